package loadtest

import "testing"

// TestGapAround pins which gaps count for a fault window [100, 200]: those
// that overlap it, including the one that spans its start or end, and the
// open one when decisions stop.
func TestGapAround(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ts     []int64
		gap    int64
		inside int
	}{
		{"no decisions at all", nil, 100, 0},
		{"steady", []int64{90, 110, 130, 150, 170, 190, 210}, 20, 5},
		{"gap spanning the start", []int64{50, 160, 170, 210}, 110, 2},
		{"gap spanning the end", []int64{90, 110, 190, 330}, 140, 2},
		{"gap spanning the whole window", []int64{10, 20, 400}, 380, 0},
		{"gaps outside do not count", []int64{0, 95, 105, 205, 900}, 100, 1},
		{"decisions stop inside", []int64{90, 110, 120}, 80, 2},
		{"decisions stopped before", []int64{10, 40}, 160, 0},
		{"first decision inside", []int64{150, 160, 250}, 90, 2},
		{"on the bounds", []int64{100, 200}, 100, 2},
	} {
		gap, n := gapAround(tc.ts, 100, 200)
		if gap != tc.gap || n != tc.inside {
			t.Errorf("%s: gapAround(%v, 100, 200) = %d ms, %d inside; want %d ms, %d", tc.name, tc.ts, gap, n, tc.gap, tc.inside)
		}
	}
}
