package loadtest

import (
	"math"
	"testing"
)

// TestSummarise: the summary's percentiles are quantile.Nearest's (held
// to its definition there).
func TestSummarise(t *testing.T) {
	d := Summarise([]float64{3, 1, 2})
	if d.N != 3 || d.P50 != 2 || d.Max != 3 || d.Mean != 2 {
		t.Errorf("summary %+v", d)
	}
}

func TestJain(t *testing.T) {
	cases := []struct {
		xs   []float64
		want float64
		ok   bool
	}{
		{[]float64{1, 1, 1, 1}, 1, true},
		{[]float64{1, 0, 0, 0}, 0.25, true},
		{[]float64{3, 1}, 0.8, true}, // 16 / (2 × 10)
		{[]float64{5}, 1, true},
		{nil, 0, false},
		{[]float64{0, 0}, 0, false},
	}
	for _, c := range cases {
		got, ok := Jain(c.xs)
		if ok != c.ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Jain(%v) = %v,%v want %v,%v", c.xs, got, ok, c.want, c.ok)
		}
	}
}

func TestFairShares(t *testing.T) {
	near := func(a, b []float64) bool {
		for i := range a {
			if math.Abs(a[i]-b[i]) > 1e-9 {
				return false
			}
		}
		return true
	}
	cases := []struct {
		cap            float64
		demand, weight []float64
		want           []float64
	}{
		// Everyone saturated: proportional to weight.
		{9, []float64{100, 100, 100}, []float64{1, 1, 1}, []float64{3, 3, 3}},
		{9, []float64{100, 100}, []float64{2, 1}, []float64{6, 3}},
		// Noisy neighbour: small demands satisfied, the rest to the flood.
		{9, []float64{1.5, 1.5, 1.5, 45}, []float64{1, 1, 1, 1}, []float64{1.5, 1.5, 1.5, 4.5}},
		// Cascading water fill.
		{10, []float64{1, 3, 100}, []float64{1, 1, 1}, []float64{1, 3, 6}},
		// Capacity above demand.
		{10, []float64{1, 2}, []float64{1, 1}, []float64{1, 2}},
		{0, []float64{1, 2}, []float64{1, 1}, []float64{0, 0}},
	}
	for _, c := range cases {
		if got := FairShares(c.cap, c.demand, c.weight); !near(got, c.want) {
			t.Errorf("FairShares(%v, %v, %v) = %v, want %v", c.cap, c.demand, c.weight, got, c.want)
		}
	}
}
