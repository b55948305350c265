package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestUsageOnUngrantedReservation: a gateway acted on a grant produced in a
// transaction that aborted, and a ledger of another version re-derived the
// round as a denial. The usage the gateway reports is charged as debt,
// counted once, and a redelivered reconcile charges nothing more.
func TestUsageOnUngrantedReservation(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "tenant", ID: "*", Dimension: schemas.DimTotalTokens, Capacity: 1000, PeriodMs: 60_000, WindowMs: 60_000})
	level := func(want int64, charged int64) func(*testing.T, *Ledger, []Output) {
		return func(t *testing.T, l *Ledger, _ []Output) {
			t.Helper()
			b := &l.st.Buckets[0]
			if got := l.available(b, &l.cc.specs[b.Spec]); got != want {
				t.Errorf("level %d, want %d", got, want)
			}
			if got := l.Stats().UngrantedUsage; got != charged {
				t.Errorf("ungranted usage %d, want %d", got, charged)
			}
		}
	}
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", tokens(500, 300)), Want: []string{"a/1 granted admitted"}, Check: level(200, 0)},
		{At: 0, Ev: reserve("b", tokens(200, 100), maxWait(1)), Want: []string{"b/1 denied wait_exceeds_max rejected_locally"}},
		// b was granted by the aborted round and dispatched: 500 spent.
		{At: 0, Ev: reconcile("b", 400, 100), Check: level(-300, 1)},
		{At: 0, Ev: reconcile("b", 400, 100), Check: level(-300, 1)}, // redelivered
		{At: 0, Ev: reconcile("a", 500, 300), Check: level(-300, 1)},
		{At: 0, Ev: reserve("c", tokens(1, 0), maxWait(1)), Want: []string{"c/1 denied wait_exceeds_max rejected_locally"}},
		// A queued reservation with reported usage is charged and cancelled.
		{At: 0, Ev: reserve("q", tokens(100, 0), class("batch")), Want: []string{"q/1 queued capacity queued"}},
		{At: 0, Ev: reconcile("q", 100, 0), Want: []string{"q/1 cancelled released_while_queued queued"}, Check: level(-400, 2)},
		// A reconcile of a granted reservation is no ungranted usage.
		{At: 60_000, Ev: reserve("d", tokens(100, 0)), Want: []string{"d/1 granted admitted"}},
		{At: 60_000, Ev: reconcile("d", 100, 0), Check: level(500, 2)},
	})
}
