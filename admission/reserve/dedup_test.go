package reserve

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestSeenDropsReproducedDecisions: an aborted run of decisions and its
// re-production (by the same ledger or the next owner) are delivered once;
// the input partitions are independent.
func TestSeenDropsReproducedDecisions(t *testing.T) {
	dec := func(p int32, off int64, idx int) *schemas.Event {
		return &schemas.Event{ID: fmt.Sprintf("d-%d-%d-%d", p, off, idx),
			Decision: &schemas.Decision{InputPartition: p, InputOffset: off}}
	}
	steps := []struct {
		ev    *schemas.Event
		first bool
	}{
		{dec(0, 10, 0), true},
		{dec(0, 10, 1), true},
		{dec(0, 12, 0), true},  // end of the aborted run
		{dec(1, 3, 0), true},   // another input partition
		{dec(0, 10, 0), false}, // re-produced after the abort
		{dec(0, 10, 1), false},
		{dec(0, 12, 0), false},
		{dec(0, 13, 0), true}, // new
		{dec(1, 3, 0), false},
		{dec(1, 2, 0), false},
		{dec(1, 4, 0), true},
	}
	s := NewDedup()
	for i, st := range steps {
		if got := s.First(st.ev); got != st.first {
			t.Errorf("step %d (%s): first = %v, want %v", i, st.ev.ID, got, st.first)
		}
	}
}
