package loadtest

import (
	"math"
	"testing"
)

func TestPercentileNearestRank(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	cases := []struct {
		p    float64
		want float64
	}{{50, 5}, {95, 10}, {99, 10}, {10, 1}, {11, 2}, {100, 10}, {0, 1}}
	for _, c := range cases {
		if got := Percentile(xs, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("empty: %v", got)
	}
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	for _, c := range []struct{ p, want float64 }{{50, 50}, {95, 95}, {99, 99}, {99.5, 100}} {
		if got := Percentile(hundred, c.p); got != c.want {
			t.Errorf("1..100 p%v = %v, want %v", c.p, got, c.want)
		}
	}
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
