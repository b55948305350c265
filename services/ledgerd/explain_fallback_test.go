package ledgerd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestExplainFollowsAFallback: a request denied in its first scope and
// granted on a fallback reservation in a scope of another partition is
// explained whole: both attempts as hops (the second marked a fallback),
// the steps of both partitions, and the outcome of the last attempt.
func TestExplainFollowsAFallback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := testenv.Kfake(t, ctx, "fallbacktest.", 4)
	brokers, names, cl := k.Brokers, k.Names, k.Client
	// Two scopes in different partitions.
	a, b := "scope-a", ""
	for i := 0; b == ""; i++ {
		if s := fmt.Sprintf("scope-b%d", i); PartitionOf(s, 4) != PartitionOf(a, 4) {
			b = s
		}
	}
	doc := fmt.Sprintf(`{"scopes":[{"name":%q,"buckets":[{"level":"tenant","id":"t","dimension":"requests_per_day","capacity":1}]},
		{"name":%q,"buckets":[{"level":"tenant","id":"t","dimension":"requests_per_day","capacity":100}]}]}`, a, b)
	if _, err := ledger.ParseConfig([]byte(doc)); err != nil {
		t.Fatal(err)
	}
	if err := PublishConfigChange(ctx, brokers, names, schemas.ConfigChanged{Source: "test", Ledger: []byte(doc)}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	reserve := func(id string, attempt int32, scope string) *kgo.Record {
		ev := eventid.New(schemas.TypeReserveRequested, now)
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = id, attempt, "gw", scope, "t", "k", "interactive"
		ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "tenant", ID: "t"}}, InputTokens: 1}
		v, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: names.Requests, Partition: PartitionOf(scope, 4), Key: []byte(scope), Value: v}
	}
	// "first" takes scope a's one request of the day; "fb" is denied
	// there and falls back to scope b.
	for _, r := range []*kgo.Record{reserve("first", 1, a), reserve("fb", 1, a), reserve("fb", 2, b)} {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	x, err := Explain(ctx, ExplainOptions{Brokers: brokers, Topics: names, RequestID: "fb", Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Hops) != 2 || x.Hops[0].Scope != a || x.Hops[1].Scope != b || x.Hops[0].Fallback || !x.Hops[1].Fallback ||
		x.Hops[0].Partition == x.Hops[1].Partition {
		t.Fatalf("hops %+v", x.Hops)
	}
	if got := x.Hops[0].Outcome; got == "" || got[:6] != "denied" {
		t.Errorf("first hop's outcome %q, want denied", got)
	}
	if x.Hops[1].Outcome != string(schemas.StatusGranted) || x.Outcome != string(schemas.StatusGranted) {
		t.Errorf("second hop %q, outcome %q: want granted", x.Hops[1].Outcome, x.Outcome)
	}
	parts := map[int32]bool{}
	for _, s := range x.Steps {
		parts[s.Partition] = true
	}
	if len(parts) != 2 {
		t.Errorf("steps of partitions %v, want both", parts)
	}
}
