package ledger

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestLateExpiryAfterLogGap is the rule of lateExpiry: the ledger sees
// time only through the log, so a pause in it (a broker or machine stall)
// brings a refill that came before a waiter's expiry and the expiry itself
// into one step. A waiter whose buckets would have held it by its expiry
// is then granted, not expired — within its class's max wait past the
// expiry and its deadline — and in every other case it expires as before.
// The first case failed before the rule (expired at 400 although the
// bucket held it from 100).
func TestLateExpiryAfterLogGap(t *testing.T) {
	// 600 a minute in 1 s windows: 10 at once, then one every 100 ms.
	fast := testConfig(rpm("scope", "*", 600, 1000))
	// 60,000 tokens a minute in 1 s windows: 1,000 at once, then one a
	// millisecond; filled by one request of 1,000.
	toks := testConfig(BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimTotalTokens, Capacity: 60_000, PeriodMs: 60_000, WindowMs: 1000})
	fill := func(n int, opts ...reqOpt) []step {
		var s []step
		for i := range n {
			id := fmt.Sprintf("f%d", i)
			s = append(s, step{At: 0, Ev: reserve(id, opts...), Want: []string{id + "/1 granted admitted"}})
		}
		return s
	}
	queued := []string{"w/1 queued capacity queued"}
	cases := []struct {
		name  string
		cfg   Config
		fill  []step
		opts  []reqOpt
		gapTo int64 // the next record's log time after the gap
		want  string
	}{
		{"fit before expiry, next record past it", fast, fill(10), nil, 400, "w/1 granted queued_then_admitted"},
		{"tokens: fit before expiry", toks, fill(1, tokens(900, 100)), []reqOpt{tokens(150, 50)}, 400, "w/1 granted queued_then_admitted"},
		{"a max wait of its own", fast, fill(10), []reqOpt{maxWait(300)}, 400, "w/1 expired max_wait_exceeded queued_then_expired"},
		{"more than its max wait past the expiry", fast, fill(10), nil, 700, "w/1 expired max_wait_exceeded queued_then_expired"},
		{"past its deadline", fast, fill(10), []reqOpt{deadline(350)}, 400, "w/1 expired deadline_exceeded queued_then_expired"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			steps := append(c.fill,
				step{At: 10, Ev: reserve("w", c.opts...), Want: queued},
				step{At: c.gapTo, Ev: tick(), Want: []string{c.want}})
			runSteps(t, c.cfg, steps)
		})
	}
}
