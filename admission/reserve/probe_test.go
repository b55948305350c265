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
		if got, _ := r.snapshot(); !maps.Equal(got, st.want) {
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

// TestHeldNeedsTheGroupAndNoStuckProbe: a scope is held while the ledger
// group holds its partition and no probe there has waited past the stuck
// bound; an unassigned partition or a stuck probe holds nothing.
func TestHeldNeedsTheGroupAndNoStuckProbe(t *testing.T) {
	r := newRoundTrips()
	r.sent("a", 0, 10, 1000)
	r.sent("b", 1, 20, 1000)
	steps := []struct {
		name     string
		assigned map[int32]bool
		nowMs    int64
		want     map[string]int64
	}{
		{"no member holds anything", map[int32]bool{}, 2000, map[string]int64{}},
		{"partition 0 held", map[int32]bool{0: true}, 3000, map[string]int64{"a": 3000}},
		{"both held, probes young", map[int32]bool{0: true, 1: true}, 4000, map[string]int64{"a": 4000, "b": 4000}},
		{"probes stuck past the bound", map[int32]bool{0: true, 1: true}, 1000 + 5001, map[string]int64{"a": 4000, "b": 4000}},
	}
	for i, st := range steps {
		r.held(st.assigned, st.nowMs, 5000)
		if _, got := r.snapshot(); !maps.Equal(got, st.want) {
			t.Errorf("step %d (%s): %v, want %v", i, st.name, got, st.want)
		}
	}
	r.committed(0, 11) // a's probe applied: a is held again
	r.held(map[int32]bool{0: true, 1: true}, 7000, 5000)
	if _, got := r.snapshot(); got["a"] != 7000 || got["b"] != 4000 {
		t.Errorf("after a's commit: %v", got)
	}
}
