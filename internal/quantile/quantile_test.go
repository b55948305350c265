package quantile

import (
	"testing"
	"time"
)

// TestNearestRank holds the definition (the cases the load tests' own
// percentile was held to, with q = p/100).
func TestNearestRank(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {95, 10}, {99, 10}, {10, 1}, {11, 2}, {100, 10}, {0, 1}} {
		if got := Nearest(xs, c.p/100); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Nearest([]float64(nil), 0.99); got != 0 {
		t.Errorf("empty: %v", got)
	}
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	for _, c := range []struct{ p, want float64 }{{50, 50}, {95, 95}, {99, 99}, {99.5, 100}} {
		if got := Nearest(hundred, c.p/100); got != c.want {
			t.Errorf("1..100 p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Nearest([]int64{10, 20, 30}, 0.5); got != 20 {
		t.Errorf("int64 p50 = %d, want 20", got)
	}
	if got := Nearest([]time.Duration{time.Millisecond, time.Second}, 0.99); got != time.Second {
		t.Errorf("durations p99 = %v, want 1s", got)
	}
	if got := Nearest([]int64{7}, -1); got != 7 {
		t.Errorf("q < 0 = %d, want the smallest", got)
	}
	if got := Nearest([]int64{1, 2}, 2); got != 2 {
		t.Errorf("q > 1 = %d, want the largest", got)
	}
}
