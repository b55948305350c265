package reserve

import (
	"maps"
	"testing"
)

// TestRoundTripsProveOnlyWhatTheLedgerCommitted: a probe counts as a round
// trip once the ledger group's committed offset passes it, with the time it
// was sent; a decision proves its scope at once; an uncommitted probe
// proves nothing, however long it waits.
func TestRoundTripsProveOnlyWhatTheLedgerCommitted(t *testing.T) {
	r := newRoundTrips()
	type step struct {
		name string
		do   func()
		want map[string]int64
	}
	steps := []step{
		{"probes sent, nothing committed", func() {
			r.sent("a", 0, 10, 1000)
			r.sent("b", 1, 5, 1000)
		}, map[string]int64{}},
		{"the ledger committed up to the probe, not past it", func() { r.committed(0, 10) }, map[string]int64{}},
		{"committed past a's probe", func() { r.committed(0, 11) }, map[string]int64{"a": 1000}},
		{"later probes; b's partition commits past both", func() {
			r.sent("b", 1, 6, 2000)
			r.sent("a", 0, 12, 2000)
			r.committed(1, 7)
		}, map[string]int64{"a": 1000, "b": 2000}},
		{"a decision proves its scope", func() { r.decided("a", 2500) }, map[string]int64{"a": 2500, "b": 2000}},
		{"an older proof never moves a scope back", func() { r.committed(0, 13) }, map[string]int64{"a": 2500, "b": 2000}},
	}
	for i, st := range steps {
		st.do()
		if got := r.snapshot(); !maps.Equal(got, st.want) {
			t.Errorf("step %d (%s): %v, want %v", i, st.name, got, st.want)
		}
	}
	for i := range pendingMax + 5 {
		r.sent("c", 2, int64(i), 3000)
	}
	if n := len(r.pending[2]); n != pendingMax {
		t.Errorf("%d probes pending on one partition, want at most %d", n, pendingMax)
	}
}
