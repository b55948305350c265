// Package quantile is the one percentile function of the house: the load
// tests' summaries, the what-if engine's queue waits and every bench's
// p50/p99 read their samples the same way, so that a figure means the same
// wherever it is printed (issue 24 found five definitions, three of them
// different). Pure: the what-if engine uses it.
package quantile

import "math"

// Number is what a sample can be: a count, a float, a time.Duration.
type Number interface {
	~int | ~int32 | ~int64 | ~float32 | ~float64
}

// Nearest returns the nearest-rank q-quantile (0 < q <= 1) of sorted: the
// smallest sample such that at least q of the samples are at or below it,
// sorted[ceil(q·n)-1]. No interpolation: the answer is always a sample. It
// returns the zero value for no samples, the smallest sample for q <= 0
// and the largest for q >= 1.
func Nearest[T Number](sorted []T, q float64) T {
	n := len(sorted)
	if n == 0 {
		var zero T
		return zero
	}
	rank := int(math.Ceil(q * float64(n)))
	return sorted[min(max(rank, 1), n)-1]
}
