package ledger

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestSplitScopeNoRoundTripOnThePath: a split deployment far below its
// limit, 500 requests a second over 2 sub-scopes for 20 s of log time,
// lease messages delivered at once: every request is granted in the step
// it arrives (10 ms), so in the pure machines no request waits out a
// term, a retry or a window roll for its lease. (Through the real broker
// they wait 4–5 s in lockstep, README "Hot scopes": the wait is in the
// delivery of lease messages, not in the rule.)
func TestSplitScopeNoRoundTripOnThePath(t *testing.T) {
	const n = 2
	cfg, err := ParseConfig([]byte(strings.Replace(hotConfig(n, 100000000), `"capacity":1000000,`, `"capacity":100000000000,`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	bid := SplitBudgetID("openai:hot", "dep", schemas.DimRequests)
	tid := SplitBudgetID("openai:hot", "dep", schemas.DimTotalTokens)
	s := newBudgetStack(t, cfg)
	s.home = map[string]string{bid: SubScope("openai:hot", 0), tid: SubScope("openai:hot", 1)}
	sentAt := map[string]int64{}
	var lat []int64
	for ms := int64(0); ms < 20000; ms += 10 {
		s.tick(10)
		for k := 0; k < 5; k++ {
			key := fmt.Sprintf("k%d", (int(ms)+k)%50)
			sc := PartitionScope("openai:hot", n, key)
			id := fmt.Sprintf("r%d-%d", ms, k)
			sentAt[id] = s.nowMs
			s.apply(sc, reserve(id, func(ev *schemas.Event) {
				ev.Scope, ev.KeyID, ev.Class = sc, key, "agent"
				ev.ReserveRequested.Path = []schemas.PathLevel{{Level: LevelKey, ID: key}, {Level: LevelDeployment, ID: "dep"}}
			}))
		}
		for _, sc := range s.outScopes() {
			outs := s.out[sc]
			s.out[sc] = nil
			for _, o := range outs {
				if o.Decision.Status == schemas.StatusGranted {
					lat = append(lat, s.nowMs-sentAt[o.RequestID])
					s.apply(sc, reconcile(o.RequestID, 100, 50))
				}
			}
		}
	}
	if len(lat) != 10000 {
		t.Errorf("%d granted of 10000", len(lat))
	}
	for _, l := range lat {
		if l > 10 {
			t.Fatalf("a grant waited %d ms of log time", l)
		}
	}
}
