package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// slowIs checks the scope's slow-start window and in-flight count.
func slowIs(slow, flight int64) func(t *testing.T, l *Ledger, out []Output) {
	return func(t *testing.T, l *Ledger, _ []Output) {
		t.Helper()
		if sc := &l.st.Scopes[0]; sc.Slow != slow || sc.Flight != flight {
			t.Fatalf("slow start %d, in flight %d; want %d, %d", sc.Slow, sc.Flight, slow, flight)
		}
	}
}

// TestSlowStart: a fallback (an attempt after the first) that reaches a
// scope no answer has confirmed yet starts slow start: one attempt in
// flight, doubled by each 2xx, while the configured window (100 at once)
// would have let the whole burst go before the provider said anything.
// A refusal ends it; the buckets alone decide after.
func TestSlowStart(t *testing.T) {
	cfg := testConfig(rpm("scope", "*", 600, 10_000))
	fb := func(id string) *schemas.Event { return reserve(id, attempt(2), maxWait(60_000)) }
	runSteps(t, cfg, []step{
		{At: 0, Ev: fb("a"), Want: []string{"a/2 granted admitted"}, Check: slowIs(1, 1)},
		{At: 1, Ev: fb("b"), Want: []string{"b/2 queued capacity queued"}, Check: slowIs(1, 1)},
		{At: 2, Ev: fb("c"), Want: []string{"c/2 queued capacity queued"}},
		{At: 3, Ev: fb("d"), Want: []string{"d/2 queued capacity queued"}},
		// The first answer: two may be in flight.
		{At: 900, Ev: reconcileAtt("a", 2, 10, 10), Want: []string{"b/2 granted queued_then_admitted", "c/2 granted queued_then_admitted"},
			Check: slowIs(2, 2)},
		{At: 901, Ev: fb("e"), Want: []string{"e/2 queued capacity queued"}},
		// Four, two of them free.
		{At: 1800, Ev: reconcileAtt("b", 2, 10, 10), Want: []string{"d/2 granted queued_then_admitted", "e/2 granted queued_then_admitted"},
			Check: slowIs(4, 3)},
		{At: 1801, Ev: fb("f"), Want: []string{"f/2 granted admitted"}, Check: slowIs(4, 4)},
		{At: 1802, Ev: fb("g"), Want: []string{"g/2 queued capacity queued"}},
		// A refusal ends it (a 500 would not: no capacity signal).
		{At: 2000, Ev: rejected("c", 2, schemas.KindRateLimited, 0), Check: slowIs(0, 3)},
	})
}

// TestSlowStartOnlyUnanswered: a scope whose own traffic the provider has
// answered is not slowed by a later fallback, nor is a first attempt, nor
// anything with learn.off.
func TestSlowStartOnlyUnanswered(t *testing.T) {
	cfg := testConfig(rpm("scope", "*", 600, 10_000))
	fb := func(id string) *schemas.Event { return reserve(id, attempt(2), maxWait(60_000)) }
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("p"), Want: []string{"p/1 granted admitted"}},
		{At: 1, Ev: reserve("q"), Want: []string{"q/1 granted admitted"}, Check: slowIs(0, 2)},
		{At: 900, Ev: reconcile("p", 10, 10), Check: slowIs(0, 1)},
		{At: 901, Ev: fb("a"), Want: []string{"a/2 granted admitted"}},
		{At: 902, Ev: fb("b"), Want: []string{"b/2 granted admitted"}, Check: slowIs(0, 3)},
	})
	cfg.Learn.Off = true
	runSteps(t, cfg, []step{
		{At: 0, Ev: fb("a"), Want: []string{"a/2 granted admitted"}},
		{At: 1, Ev: fb("b"), Want: []string{"b/2 granted admitted"}, Check: slowIs(0, 2)},
	})
}

// TestRemainingOnlyIsNoRoom: Azure reports what remains of its minute
// without a limit, and also counts over 10 s windows; a 429 after such a
// report is not one "with room": it closes the scope for its Retry-After
// (cooldown_rate_limited) and drains the window.
func TestRemainingOnlyIsNoRoom(t *testing.T) {
	cfg := testConfig(rpm("scope", "*", 600, 10_000))
	rem := func(id string, limit int64) *schemas.Event {
		ev := limitObs(id, 1, schemas.DimRequests, limit, 500)
		ev.ID += "-x"
		return ev
	}
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 1, Ev: rem("a", 0)},
		{At: 2, Ev: rejected("a", 1, schemas.KindRateLimited, 1000)},
		{At: 3, Ev: reserve("b", maxWait(5000)), Want: []string{"b/1 queued cooldown_rate_limited queued"}},
	})
}

// TestExplainNamesSlowStart: a fallback queued behind slow start has
// every bucket full; its explanation names the slow start's window and
// what is in flight, the only reason it waits.
func TestExplainNamesSlowStart(t *testing.T) {
	cfg := testConfig(rpm("scope", "*", 600, 10_000))
	x, _ := explainRun(t, cfg, "b",
		reserve("a", attempt(2), maxWait(60_000)),
		reserve("b", attempt(2), maxWait(60_000)))
	if len(x.Steps) != 1 {
		t.Fatalf("steps %+v", x.Steps)
	}
	q := x.Steps[0].Queue
	if q == nil || q.SlowStart == nil || q.SlowStart.Window != 1 || q.SlowStart.InFlight != 1 {
		t.Fatalf("queue view %+v, want slow start window 1 with 1 in flight", q)
	}
	for _, v := range x.Steps[0].Buckets {
		if v.Limiting {
			t.Fatalf("bucket %+v marked limiting; slow start is what limits", v)
		}
	}
}
