package estimate

import (
	"math/bits"
	"sync"
)

// Online learning of each route's p95 output (issue 13 item 4).
//
// The weekly calibration report sets a route's p95_output_tokens; until it
// has, the gateway's estimator learns the same figure from the reconciled
// actuals it sees and may use it in its place. The learned value keeps the
// report's bounds: it needs MinSamples observations, and it is never under
// the observed p95 (the sketch answers the upper edge of the bucket that
// holds the p95 rank, at most 1/32 ≈ 3 % above it).
//
// Everything here is a function of the observations in order: no wall
// clock, no randomness, bounded memory (a fixed histogram per route, at most
// MaxRoutes routes), so a unit test with seeded inputs pins every answer.

// Learner defaults.
const (
	DefaultLearnMinSamples    = 30   // the calibration report's MinSamples
	DefaultLearnWindowSamples = 4096 // observations per generation
	DefaultLearnMaxRoutes     = 1024
)

// LearnOptions configure an OutputLearner. Zero values take the defaults.
type LearnOptions struct {
	// MinSamples is the observations a route needs before P95 answers.
	MinSamples int64
	// WindowSamples is the size of one generation: P95 covers the last
	// WindowSamples to 2×WindowSamples observations of the route, so it
	// follows a route whose output changes.
	WindowSamples int64
	// MaxRoutes bounds the routes learned; observations of further routes
	// are counted in Dropped and otherwise ignored.
	MaxRoutes int
}

// OutputLearner learns the p95 of actual output tokens per route from a
// stream of observations. It is safe for concurrent use; the zero value is
// not usable (NewOutputLearner).
type OutputLearner struct {
	opts LearnOptions

	mu      sync.Mutex
	routes  map[string]*routeSketch
	dropped int64
}

// NewOutputLearner returns an empty learner.
func NewOutputLearner(o LearnOptions) *OutputLearner {
	if o.MinSamples <= 0 {
		o.MinSamples = DefaultLearnMinSamples
	}
	if o.WindowSamples <= 0 {
		o.WindowSamples = DefaultLearnWindowSamples
	}
	if o.MaxRoutes <= 0 {
		o.MaxRoutes = DefaultLearnMaxRoutes
	}
	return &OutputLearner{opts: o, routes: map[string]*routeSketch{}}
}

// Observe records one attempt's actual output tokens on route. Callers
// feed only complete answers (a 2xx that was not cut short): a partial
// stream's output says nothing about what the route needs.
func (l *OutputLearner) Observe(route string, outputTokens int64) {
	if route == "" || outputTokens < 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.routes[route]
	if rs == nil {
		if len(l.routes) >= l.opts.MaxRoutes {
			l.dropped++
			return
		}
		rs = &routeSketch{}
		l.routes[route] = rs
	}
	if rs.cur.n >= l.opts.WindowSamples {
		rs.prev, rs.cur = rs.cur, histogram{}
	}
	rs.cur.add(outputTokens)
}

// P95 returns the learned p95 of route's output tokens, and false while the
// route has fewer than MinSamples observations in its window.
func (l *OutputLearner) P95(route string) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.routes[route]
	if rs == nil {
		return 0, false
	}
	n := rs.cur.n + rs.prev.n
	if n < l.opts.MinSamples {
		return 0, false
	}
	// The smallest bucket whose cumulative count reaches ⌈0.95·n⌉.
	rank := (95*n + 99) / 100
	var cum int64
	for i := range rs.cur.counts {
		cum += int64(rs.cur.counts[i]) + int64(rs.prev.counts[i])
		if cum >= rank {
			return bucketUpper(i), true
		}
	}
	return bucketUpper(len(rs.cur.counts) - 1), true
}

// Samples returns the observations in route's window.
func (l *OutputLearner) Samples(route string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rs := l.routes[route]; rs != nil {
		return rs.cur.n + rs.prev.n
	}
	return 0
}

// Dropped returns the observations ignored because MaxRoutes was reached.
func (l *OutputLearner) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// routeSketch keeps two generations so the window slides without
// forgetting everything at once.
type routeSketch struct{ cur, prev histogram }

// Histogram layout: values below 64 have a bucket each; above, every
// power of two is split into 32 buckets (relative width ≤ 1/32), up to
// MaxTokensLimit (2^20 > 1,000,000). 512 buckets of 4 bytes per
// generation: 4 KiB per route.
const (
	exactBelow   = 64
	subBits      = 5 // 32 sub-buckets per octave
	topOctave    = 20
	numBuckets   = exactBelow + (topOctave-6)*(1<<subBits)
	learnedValue = MaxTokensLimit
)

type histogram struct {
	n      int64
	counts [numBuckets]uint32
}

func (h *histogram) add(v int64) {
	h.n++
	h.counts[bucketOf(v)]++
}

// bucketOf maps a token count to its bucket; counts above MaxTokensLimit
// share the last bucket.
func bucketOf(v int64) int {
	if v > learnedValue {
		v = learnedValue
	}
	if v < exactBelow {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1 // 6 … 19
	sub := int(v>>(e-subBits)) & (1<<subBits - 1)
	return exactBelow + (e-6)<<subBits + sub
}

// bucketUpper is the largest value of bucket i.
func bucketUpper(i int) int64 {
	if i < exactBelow {
		return int64(i)
	}
	e := (i-exactBelow)>>subBits + 6
	sub := int64((i - exactBelow) & (1<<subBits - 1))
	return ((1<<subBits+sub+1)<<(e-subBits) - 1)
}
