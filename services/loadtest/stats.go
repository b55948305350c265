package loadtest

import (
	"math"
	"sort"

	"github.com/sluice-dev/sluice/internal/quantile"
)

// Dist summarises a sample of milliseconds.
type Dist struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Summarise computes the distribution of xs (xs is sorted in place).
func Summarise(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	sort.Float64s(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return Dist{N: len(xs), P50: quantile.Nearest(xs, 0.50), P95: quantile.Nearest(xs, 0.95), P99: quantile.Nearest(xs, 0.99),
		Max: xs[len(xs)-1], Mean: round3(sum / float64(len(xs)))}
}

// Jain is Jain's fairness index (Σx)² / (n·Σx²) of xs: 1 when every x is
// equal, 1/n when one gets everything. ok is false for fewer than one value
// or when every x is zero (undefined).
func Jain(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 0, false
	}
	return s * s / (float64(len(xs)) * s2), true
}

// FairShares is weighted max-min fair sharing (water filling): capacity is
// divided in proportion to weights, a tenant never gets more than its
// demand, and what a satisfied tenant leaves is shared by the others.
func FairShares(capacity float64, demand, weight []float64) []float64 {
	n := len(demand)
	share := make([]float64, n)
	done := make([]bool, n)
	left := capacity
	for {
		var w float64
		for i := range n {
			if !done[i] {
				w += weight[i]
			}
		}
		if w <= 0 || left <= 1e-12 {
			return share
		}
		unit := left / w
		progressed := false
		for i := range n {
			if !done[i] && demand[i] <= unit*weight[i] {
				share[i] = demand[i]
				left -= demand[i]
				done[i] = true
				progressed = true
			}
		}
		if !progressed {
			for i := range n {
				if !done[i] {
					share[i] = unit * weight[i]
				}
			}
			return share
		}
	}
}

func round3(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*1000) / 1000
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round3(a / b)
}
