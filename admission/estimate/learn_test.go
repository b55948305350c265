package estimate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBucketsCoverEveryValue(t *testing.T) {
	prev := -1
	for v := int64(0); v <= MaxTokensLimit; v += 1 + v/97 {
		b := bucketOf(v)
		if b < prev || b >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d after %d (of %d)", v, b, prev, numBuckets)
		}
		prev = b
		up := bucketUpper(b)
		if up < v || float64(up-v) > float64(v)/32 {
			t.Fatalf("value %d: bucket %d upper %d, want within [v, v·33/32]", v, b, up)
		}
		if b > 0 && bucketUpper(b-1) >= v {
			t.Fatalf("value %d: previous bucket's upper %d already holds it", v, bucketUpper(b-1))
		}
	}
	if b := bucketOf(50 * MaxTokensLimit); b != bucketOf(MaxTokensLimit) {
		t.Fatalf("a value above MaxTokensLimit lands in bucket %d", b)
	}
}

// exactP95 is the nearest-rank p95 of xs.
func exactP95(xs []int64) int64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(95*len(s)+99)/100-1]
}

// TestLearnedP95IsNeverUnderTheObserved: over seeded distributions the
// learned p95 is at least the exact p95 of the window and at most 1/32
// above it (the report's bound: never under the observed p95).
func TestLearnedP95IsNeverUnderTheObserved(t *testing.T) {
	dists := map[string]func(r *rand.Rand) int64{
		"uniform 0-800":   func(r *rand.Rand) int64 { return r.Int64N(801) },
		"exp mean 300":    func(r *rand.Rand) int64 { return int64(r.ExpFloat64() * 300) },
		"lognormal":       func(r *rand.Rand) int64 { return int64(200 * math.Exp(r.NormFloat64())) },
		"constant 4096":   func(*rand.Rand) int64 { return 4096 },
		"small 0-40":      func(r *rand.Rand) int64 { return r.Int64N(41) },
		"bimodal 20/3000": func(r *rand.Rand) int64 { return []int64{20, 3000}[r.IntN(2)] + r.Int64N(10) },
	}
	for name, draw := range dists {
		for seed := uint64(1); seed <= 5; seed++ {
			r := rand.New(rand.NewPCG(seed, 13))
			l := NewOutputLearner(LearnOptions{WindowSamples: 1000})
			var xs []int64
			for i := 0; i < 1500; i++ { // within the window (≤ 2 generations)
				x := draw(r)
				xs = append(xs, x)
				l.Observe("r", x)
			}
			got, ok := l.P95("r")
			want := exactP95(xs)
			if !ok || got < want || float64(got-want) > float64(want)/32 {
				t.Errorf("%s seed %d: learned %d (ok %v), exact p95 %d", name, seed, got, ok, want)
			}
		}
	}
}

func TestLearnerNeedsMinSamples(t *testing.T) {
	l := NewOutputLearner(LearnOptions{})
	for i := 0; i < DefaultLearnMinSamples-1; i++ {
		l.Observe("r", 100)
		if _, ok := l.P95("r"); ok {
			t.Fatalf("answered after %d samples", i+1)
		}
	}
	l.Observe("r", 100)
	if p, ok := l.P95("r"); !ok || p < 100 || p > 103 {
		t.Fatalf("after %d samples: %d, %v", DefaultLearnMinSamples, p, ok)
	}
	if _, ok := l.P95("other"); ok {
		t.Fatal("an unseen route answered")
	}
}

// TestLearnerFollowsAShift: the window is two generations, so after two
// windows of a new distribution the old one is forgotten.
func TestLearnerFollowsAShift(t *testing.T) {
	const w = 200
	l := NewOutputLearner(LearnOptions{WindowSamples: w})
	for i := 0; i < 3*w; i++ {
		l.Observe("r", 4000)
	}
	for i := 0; i < 2*w; i++ {
		l.Observe("r", 100)
	}
	if p, _ := l.P95("r"); p >= 4000 {
		t.Fatalf("after a window of half new samples p95 %d still sees the old ones", p)
	}
	l.Observe("r", 100)
	if p, _ := l.P95("r"); p < 100 || p > 103 {
		t.Fatalf("p95 %d after the shift, want about 100", p)
	}
	if n := l.Samples("r"); n > 2*w {
		t.Fatalf("window holds %d samples, want ≤ %d", n, 2*w)
	}
}

// TestLearnerIsDeterministic: the same observations give the same answers
// after every step (no clock, no randomness inside).
func TestLearnerIsDeterministic(t *testing.T) {
	a, b := NewOutputLearner(LearnOptions{WindowSamples: 64}), NewOutputLearner(LearnOptions{WindowSamples: 64})
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 5000; i++ {
		route := fmt.Sprintf("route-%d", r.IntN(4))
		x := r.Int64N(2000)
		a.Observe(route, x)
		b.Observe(route, x)
		pa, oka := a.P95(route)
		pb, okb := b.P95(route)
		if pa != pb || oka != okb {
			t.Fatalf("step %d: %d,%v vs %d,%v", i, pa, oka, pb, okb)
		}
	}
}

func TestLearnerBoundsRoutes(t *testing.T) {
	l := NewOutputLearner(LearnOptions{MaxRoutes: 3})
	for i := 0; i < 5; i++ {
		l.Observe(fmt.Sprintf("r%d", i), 10)
	}
	l.Observe("", 10)
	l.Observe("r0", -1)
	if l.Dropped() != 2 || l.Samples("r0") != 1 || l.Samples("r4") != 0 {
		t.Fatalf("dropped %d, r0 %d, r4 %d", l.Dropped(), l.Samples("r0"), l.Samples("r4"))
	}
}

func TestInputCorrection(t *testing.T) {
	e := New(Options{})
	req := Request{Format: FormatOpenAIChat, Model: "gpt-4o", Messages: []Message{{Role: "user", Parts: []Part{{Type: PartText, Text: "Hello there, how are you doing today?"}}}}}
	base := e.Estimate(req, 0).InputTokens
	for _, tc := range []struct {
		f    float64
		want float64
	}{{0, 1}, {1, 1}, {1.1, 1.1}, {0.9, 0.9}, {0.2, InputCorrectionMin}, {7, InputCorrectionMax}} {
		got := e.EstimateRoute(req, Route{InputCorrection: tc.f}).InputTokens
		want := int64(float64(base)*tc.want + 0.999999)
		if got != want {
			t.Errorf("factor %v: %d input tokens, want %d (base %d)", tc.f, got, want, base)
		}
	}
}

func TestObserveOutputFeedsLearnedP95(t *testing.T) {
	e := New(Options{Learn: LearnOptions{MinSamples: 3}})
	for _, x := range []int64{10, 20, 300} {
		e.ObserveOutput("r", x)
	}
	if p, ok := e.LearnedP95("r"); !ok || p < 300 || p > 309 {
		t.Fatalf("learned %d, %v", p, ok)
	}
}
