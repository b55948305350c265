package live

import "sort"

// timelineBuilder sums the visible series into per-second lines for the
// snapshot's Timeline. It runs under the projection lock.
type timelineBuilder struct {
	start   int64 // unix second of point 0
	n       int
	tenants map[string]*RateLine
	classes map[string]*RateLine
	// trailing sums for the estimation-error lines, per point
	estIn, actIn, estOut, actOut []int64
}

func newTimelineBuilder(start int64, n int) *timelineBuilder {
	return &timelineBuilder{
		start: start, n: n, tenants: map[string]*RateLine{}, classes: map[string]*RateLine{},
		estIn: make([]int64, n), actIn: make([]int64, n), estOut: make([]int64, n), actOut: make([]int64, n),
	}
}

func (b *timelineBuilder) line(m map[string]*RateLine, name string) *RateLine {
	l := m[name]
	if l == nil {
		l = &RateLine{Name: name, Received: make([]int64, b.n), Granted: make([]int64, b.n),
			Denied: make([]int64, b.n), QueueDepth: make([]int64, b.n)}
		m[name] = l
	}
	return l
}

// add sums series s into its tenant's and class's lines.
func (b *timelineBuilder) add(s *series) {
	t, c := b.line(b.tenants, s.key.Tenant), b.line(b.classes, s.key.Class)
	// Queue depth: before the first bucket of the window, the depth that
	// bucket opened with; then each bucket's end value carried forward.
	depth := s.queued
	if len(s.buckets) > 0 {
		depth = s.buckets[0].depthStart
	}
	bi := 0
	for i := 0; i < b.n; i++ {
		sec := b.start + int64(i)
		for bi < len(s.buckets) && s.buckets[bi].sec < sec {
			depth = s.buckets[bi].depthEnd
			bi++
		}
		if bi < len(s.buckets) && s.buckets[bi].sec == sec {
			bk := &s.buckets[bi]
			depth = bk.depthEnd
			for _, l := range []*RateLine{t, c} {
				l.Received[i] += bk.v[cReceived]
				l.Granted[i] += bk.v[cGranted]
				l.Denied[i] += bk.v[cDenied] + bk.v[cExpired]
			}
			for j := i; j < i+estErrSpanS && j < b.n; j++ {
				b.estIn[j] += bk.v[cEstIn]
				b.actIn[j] += bk.v[cActIn]
				b.estOut[j] += bk.v[cEstOut]
				b.actOut[j] += bk.v[cActOut]
			}
			bi++
		}
		t.QueueDepth[i] += depth
		c.QueueDepth[i] += depth
	}
}

func total(xs []int64) int64 {
	var n int64
	for _, x := range xs {
		n += x
	}
	return n
}

// finish returns the timeline; in the operator view (filter false) the
// tenants beyond TimelineTenantsMax are summed into OtherTenants.
func (b *timelineBuilder) finish(filter bool) Timeline {
	tl := Timeline{StartS: b.start, Points: b.n, Tenants: []RateLine{}, Classes: []RateLine{},
		ProviderRemaining:    []RemainingLine{},
		InputEstimationError: make([]*float64, b.n), OutputEstimationError: make([]*float64, b.n)}
	for _, l := range b.tenants {
		tl.Tenants = append(tl.Tenants, *l)
	}
	sort.Slice(tl.Tenants, func(i, j int) bool {
		a, c := total(tl.Tenants[i].Received), total(tl.Tenants[j].Received)
		if a != c {
			return a > c
		}
		return tl.Tenants[i].Name < tl.Tenants[j].Name
	})
	if !filter && len(tl.Tenants) > TimelineTenantsMax {
		other := RateLine{Name: OtherTenants, Received: make([]int64, b.n), Granted: make([]int64, b.n),
			Denied: make([]int64, b.n), QueueDepth: make([]int64, b.n)}
		for _, l := range tl.Tenants[TimelineTenantsMax-1:] {
			for i := 0; i < b.n; i++ {
				other.Received[i] += l.Received[i]
				other.Granted[i] += l.Granted[i]
				other.Denied[i] += l.Denied[i]
				other.QueueDepth[i] += l.QueueDepth[i]
			}
		}
		tl.Tenants = append(tl.Tenants[:TimelineTenantsMax-1], other)
	}
	for _, l := range b.classes {
		tl.Classes = append(tl.Classes, *l)
	}
	sort.Slice(tl.Classes, func(i, j int) bool { return tl.Classes[i].Name < tl.Classes[j].Name })
	for i := 0; i < b.n; i++ {
		tl.InputEstimationError[i] = ratio(b.estIn[i], b.actIn[i])
		tl.OutputEstimationError[i] = ratio(b.estOut[i], b.actOut[i])
	}
	return tl
}

// remaining draws one provider observation's history over the window.
func (b *timelineBuilder) remaining(o observed) RemainingLine {
	l := RemainingLine{Scope: o.Scope, Deployment: o.Deployment, Dimension: o.Dimension, Limit: o.Limit,
		Remaining: make([]*int64, b.n)}
	var last *int64
	hi := 0
	for i := 0; i < b.n; i++ {
		sec := b.start + int64(i)
		for hi < len(o.hist) && o.hist[hi].sec <= sec {
			v := o.hist[hi].remaining
			last = &v
			hi++
		}
		l.Remaining[i] = last
	}
	return l
}

// trimHist drops the observations at or before second cut, keeping the
// newest of them so that the line carries it into the window.
func trimHist(h []obsPoint, cut int64) []obsPoint {
	i := 0
	for i+1 < len(h) && h[i+1].sec <= cut {
		i++
	}
	if i > 0 {
		h = append(h[:0], h[i:]...)
	}
	return h
}
