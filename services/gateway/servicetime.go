package gateway

import (
	"slices"
	"sync"

	"github.com/sluice-dev/sluice/schemas"
)

// Bounds of the service-time learner.
const (
	serviceSamplesMax = 128 // recent reconciled attempts kept per route and mode
	serviceSamplesMin = 8   // fewer say nothing: no margin
	serviceRoutesMax  = 4096
	// serviceSampleTTLMs: older samples say nothing. Without it, a route
	// whose p95 once exceeded its clients' deadlines would have every
	// request refused (lifecycle: deadline shorter than the service time)
	// and so never learn that it got faster.
	serviceSampleTTLMs = 5 * 60_000
)

// serviceTimes learns, per route and streaming mode, the p95 of how long
// the provider takes to answer: the whole answer for a plain request,
// the first byte for a stream (a streaming client's read timeout runs
// between chunks). The lifecycle leaves that much of a request's deadline
// for the call itself (lifecycle.Request.ServiceMs), so the ledger does
// not grant what cannot be answered before the client gives up. It is a
// gateway estimate, not ledger state: the reservation carries the
// shortened deadline, so replay sees what was asked. The zero value is
// ready to use.
type serviceTimes struct {
	mu     sync.Mutex
	routes map[serviceKey]*serviceRing
}

type serviceKey struct {
	route     string
	streaming bool
}

type serviceRing struct {
	ms   [serviceSamplesMax]int64
	at   [serviceSamplesMax]int64 // when each sample was taken (unix ms)
	n    int                      // samples held
	next int                      // where the next sample goes
}

// observe records a reconciled attempt; only complete successful answers
// count (a cut stream or an error says nothing about the route's pace).
func (s *serviceTimes) observe(route string, rec *schemas.Reconciled, nowMs int64) {
	if rec.Partial || rec.HTTPStatus < 200 || rec.HTTPStatus > 299 {
		return
	}
	ms := rec.TotalMs
	if rec.Streaming {
		ms = rec.FirstByteMs
	}
	if ms <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := serviceKey{route, rec.Streaming}
	r := s.routes[k]
	if r == nil {
		if s.routes == nil {
			s.routes = map[serviceKey]*serviceRing{}
		}
		if len(s.routes) >= serviceRoutesMax {
			return
		}
		r = &serviceRing{}
		s.routes[k] = r
	}
	r.ms[r.next], r.at[r.next] = ms, nowMs
	r.next = (r.next + 1) % serviceSamplesMax
	r.n = min(r.n+1, serviceSamplesMax)
}

// expectedMs is the route's p95 service time in the mode over the samples
// of the last serviceSampleTTLMs, 0 when there are fewer than
// serviceSamplesMin of them.
func (s *serviceTimes) expectedMs(route string, streaming bool, nowMs int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.routes[serviceKey{route, streaming}]
	if r == nil || r.n < serviceSamplesMin {
		return 0
	}
	var buf [serviceSamplesMax]int64
	live := buf[:0]
	for i := range r.n {
		if nowMs-r.at[i] <= serviceSampleTTLMs {
			live = append(live, r.ms[i])
		}
	}
	if len(live) < serviceSamplesMin {
		return 0
	}
	slices.Sort(live)
	return live[(len(live)*95+99)/100-1] // nearest rank
}
