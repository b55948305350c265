package ledgerd

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// TestInputEnd: the verified range ends at the smallest of the stable
// offset, the ledger's committed offset and --to-offset, and says which.
func TestInputEnd(t *testing.T) {
	cases := []struct {
		name                  string
		stable, committed, to int64
		end                   int64
		bound                 string
	}{
		{"ledger caught up", 100, 100, 0, 100, BoundStable},
		{"ledger lags", 100, 80, 0, 80, BoundCommitted},
		{"committed past a stale stable offset", 90, 100, 0, 90, BoundStable},
		{"to-offset below both", 100, 80, 50, 50, BoundToOffset},
		{"to-offset above both", 100, 80, 500, 80, BoundCommitted},
		{"to-offset -1 means the end", 100, 80, -1, 80, BoundCommitted},
		{"nothing committed", 100, -1, 0, 0, BoundCommitted},
		{"stable unknown", -1, 80, 0, 0, BoundStable},
		{"empty log", 0, 0, 0, 0, BoundStable},
	}
	for _, c := range cases {
		end, bound := inputEnd(c.stable, c.committed, c.to)
		if end != c.end || bound != c.bound {
			t.Errorf("%s: inputEnd(%d, %d, %d) = %d %s, want %d %s", c.name, c.stable, c.committed, c.to, end, bound, c.end, c.bound)
		}
	}
}

// TestWindow: recorded decisions are kept only for inputs in [lo, end);
// the first decision of an input at or after end closes the window; a
// record that is not a decision is kept so that it shows as a divergence.
func TestWindow(t *testing.T) {
	dec := func(off int64) []byte { return decAt(t, 0, off, 0) }
	steps := []struct {
		value  []byte
		keep   bool // appended to recorded
		closes bool
	}{
		{dec(3), false, false}, // before lo (from a snapshot)
		{dec(5), true, false},
		{dec(5), true, false}, // a second decision of the same input
		{[]byte("garbage"), true, false},
		{decAt(t, 1, 7, 0), false, false}, // another input partition's
		{decAt(t, 1, 12, 0), false, false},
		{dec(9), true, false},
		{dec(10), false, true}, // end: decisions of inputs not replayed
	}
	w := &window{lo: 5, end: 10}
	for i, s := range steps {
		before := len(w.recorded)
		err := w.add(&kgo.Record{Offset: int64(100 + i), Value: s.value})
		if kept := len(w.recorded) > before; kept != s.keep {
			t.Errorf("step %d: kept = %v, want %v", i, kept, s.keep)
		}
		if closed := errors.Is(err, errPastEnd); closed != s.closes || w.closed != s.closes {
			t.Errorf("step %d: err = %v, closed = %v, want closed %v", i, err, w.closed, s.closes)
		}
		if w.next != int64(101+i) {
			t.Errorf("step %d: next = %d, want %d", i, w.next, 101+i)
		}
	}
}

// decAt encodes the decision of input partition p, offset off, index idx.
func decAt(t *testing.T, p int32, off int64, idx int) []byte {
	t.Helper()
	o := ledger.Output{Index: int32(idx), Decision: schemas.Decision{Status: schemas.StatusGranted, InputPartition: p, InputOffset: off}}
	b, err := schemas.Encode(o.Event())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMergeWindows: the decisions of one input partition, read from
// several decisions partitions, come back in input order (offset, then
// index within the input).
func TestMergeWindows(t *testing.T) {
	a := &window{part: 2, lo: 0, end: 100}
	b := &window{part: 2, lo: 0, end: 100}
	for _, r := range []struct {
		w        *window
		off, idx int
	}{{a, 1, 0}, {b, 1, 1}, {b, 3, 0}, {a, 4, 0}, {a, 4, 2}, {b, 4, 1}} {
		if err := r.w.add(&kgo.Record{Value: decAt(t, 2, int64(r.off), r.idx)}); err != nil {
			t.Fatal(err)
		}
	}
	got := mergeWindows([]*window{a, b})
	want := [][2]int64{{1, 0}, {1, 1}, {3, 0}, {4, 0}, {4, 1}, {4, 2}}
	if len(got) != len(want) {
		t.Fatalf("merged %d decisions, want %d", len(got), len(want))
	}
	for i, raw := range got {
		var ev schemas.Event
		if err := schemas.Decode([]byte(raw), &ev); err != nil {
			t.Fatal(err)
		}
		if o, x := ev.Decision.InputOffset, decisionIndex(ev.ID); o != want[i][0] || x != want[i][1] {
			t.Errorf("merged #%d = offset %d index %d, want %v", i, o, x, want[i])
		}
	}
}
