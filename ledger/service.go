package ledger

import "math/bits"

// Expected service time (issue 20 item 1). An attempt granted with less of
// its client's deadline left than the route takes to answer is sent upstream
// for nothing: the client hangs up before the answer, and the provider
// counts the call. The ledger learns each (scope, route)'s service time from
// its reconciled attempts — in ledger state, from the log's own Reconciled
// events, so replay and snapshots reproduce it exactly — and never grants an
// attempt whose remaining deadline is shorter than that:
//
//	expected = p95(first-byte ms) + output estimate × (decode ms per output token)
//
// over the current and previous period of serviceWindowMs, once the route
// has serviceSamplesMin reconciled 2xx attempts there. The p95 is the upper
// bound of its histogram bin (4 bins per octave: at most 25 % above the
// true quantile): under overload every grant is made at the last moment
// its deadline allows, and the work refused a little early is taken by the
// next waiter, while work sent a little late is an upstream call for
// nothing. The first byte includes the log time from the grant to the
// gateway's dispatch and from the answer to its Reconciled record; the
// decode rate is Σ(total − first byte) / Σ output tokens.

const (
	// serviceBins: bins 0–3 hold 0–3 ms, then 4 per octave up to 2^21 ms.
	serviceBins = 80
	// serviceWindowMs is one stats period; the estimate covers the current
	// and the previous one, so it follows a route that slows down within
	// two minutes.
	serviceWindowMs = 60_000
	// serviceRoutesMax bounds the learned routes per partition; routes
	// past it are not learned (and not refused).
	serviceRoutesMax = 4096
	// serviceQuantilePermille is the quantile of first-byte time used.
	serviceQuantilePermille = 950
)

// serviceStat is one (scope, route, streaming)'s reconciled latencies over
// the current and the previous stats period ([0] current, [1] previous).
// Streaming and buffered answers are learned apart: a buffered answer's
// first byte comes with its last, so its "first byte" is the whole call.
type serviceStat struct {
	Scope    int32                  `json:"s"`
	Route    string                 `json:"r"`
	Stream   bool                   `json:"st,omitempty"`
	Period   int64                  `json:"p"` // absolute index of the current period
	N        [2]int64               `json:"n"`
	TTFT     [2][serviceBins]uint32 `json:"f"` // histogram of first-byte ms
	DecodeMs [2]int64               `json:"d"` // Σ (total − first byte) ms
	OutTok   [2]int64               `json:"o"` // Σ output tokens of the same attempts
}

type serviceKey struct {
	scope  int32
	route  string
	stream bool
}

// serviceBin maps a latency in ms to its histogram bin.
func serviceBin(ms int64) int {
	if ms < 4 {
		return int(max(0, ms))
	}
	e := bits.Len64(uint64(ms)) - 3 // ms>>e is in [4, 7]
	return min(serviceBins-1, 4*e+int(ms>>e))
}

// serviceBinLow is the smallest latency of bin b.
func serviceBinLow(b int) int64 {
	if b < 4 {
		return int64(b)
	}
	e := b/4 - 1
	return int64(b%4+4) << e
}

// roll moves the stats to period p (the previous period is kept when p is
// the next one, dropped when later).
func (s *serviceStat) roll(p int64) {
	if p <= s.Period {
		return
	}
	if p == s.Period+1 {
		s.N[1], s.TTFT[1], s.DecodeMs[1], s.OutTok[1] = s.N[0], s.TTFT[0], s.DecodeMs[0], s.OutTok[0]
	} else {
		s.N[1], s.TTFT[1], s.DecodeMs[1], s.OutTok[1] = 0, [serviceBins]uint32{}, 0, 0
	}
	s.N[0], s.TTFT[0], s.DecodeMs[0], s.OutTok[0] = 0, [serviceBins]uint32{}, 0, 0
	s.Period = p
}

// serviceFind returns the index of (scope, route, stream)'s stats, creating
// them if create (and the bound allows), or -1.
func (l *Ledger) serviceFind(scope int32, route string, stream, create bool) int32 {
	if l.svcIdx == nil {
		l.svcIdx = make(map[serviceKey]int32, len(l.st.Services))
		for i := range l.st.Services {
			s := &l.st.Services[i]
			l.svcIdx[serviceKey{s.Scope, s.Route, s.Stream}] = int32(i)
		}
	}
	if i, ok := l.svcIdx[serviceKey{scope, route, stream}]; ok {
		return i
	}
	if !create || len(l.st.Services) >= serviceRoutesMax || len(route) > maxStrLen {
		return noIdx
	}
	l.st.Services = append(l.st.Services, serviceStat{Scope: scope, Route: route, Stream: stream, Period: l.st.Now / serviceWindowMs})
	i := int32(len(l.st.Services) - 1)
	l.svcIdx[serviceKey{scope, route, stream}] = i
	return i
}

// recordService learns from a reconciled attempt of r: only complete 2xx
// answers with a latency count (a partial stream ended early, a refusal
// answered fast).
func (l *Ledger) recordService(r *res, totalMs, firstByteMs, outTokens int64, status int32, partial bool) {
	if l.st.Config.ServiceSamplesMin < 0 || status < 200 || status > 299 || partial || totalMs <= 0 {
		return
	}
	si := l.serviceFind(r.Scope, r.Route, r.Flags&fStreaming != 0, true)
	if si < 0 {
		return
	}
	s := &l.st.Services[si]
	s.roll(l.st.Now / serviceWindowMs)
	first := min(max(0, firstByteMs), totalMs)
	seen := first
	if r.GrantMs > 0 {
		// The gateway times the call from its dispatch; the client's
		// deadline also runs while the grant is delivered to it and
		// while the answer's record reaches the log. That overhead —
		// log time from the grant to this Reconciled, less the call —
		// belongs to the first byte: under overload every grant is made
		// at grantBy, and without it the delivery of each grant ate the
		// margin (noisy-neighbor-handwritten: 10 of 75 upstream calls
		// cancelled in flight by their clients).
		seen += min(max(0, l.st.Now-r.GrantMs-totalMs), dayMs)
	}
	s.N[0]++
	s.TTFT[0][serviceBin(seen)]++
	if outTokens > 0 {
		s.DecodeMs[0] = min(maxAmount, s.DecodeMs[0]+min(totalMs-first, dayMs))
		s.OutTok[0] = min(maxAmount, s.OutTok[0]+min(outTokens, maxAmount))
	}
}

// expectedService returns the expected service time in ms of r (its
// route, streaming or not, and its output estimate), or 0 when the route
// has too few samples to say anywhere.
//
// The prior: until r's own (scope, route) has the samples, the same
// route's learned time in the partition's other scopes stands in for it,
// the longest of them. A fallback reaches a scope whose route has never
// answered (or too rarely to learn: the Azure fallback of
// noisy-neighbor-handwritten has about 10 calls a run against 20
// samples), and under overload it is the waiter its primary gave up on,
// granted with what is left of its deadline: without a service time 4
// of ~84 upstream calls a run were sent with 5–650 ms left and cancelled
// by their clients. The route is the model profile, the same work on
// another provider's copy of it; a provider slower than the one learned
// is learned itself once it has the samples.
func (l *Ledger) expectedService(r *res) int64 {
	minN := l.st.Config.ServiceSamplesMin
	if minN < 0 || len(l.st.Services) == 0 {
		return 0
	}
	stream := r.Flags&fStreaming != 0
	if si := l.serviceFind(r.Scope, r.Route, stream, false); si >= 0 {
		if svc := l.serviceEstimate(&l.st.Services[si], r.Need[dOutput], minN); svc > 0 {
			return svc
		}
	}
	var prior int64
	for i := range l.st.Services {
		if s := &l.st.Services[i]; s.Scope != r.Scope && s.Stream == stream && s.Route == r.Route {
			prior = max(prior, l.serviceEstimate(s, r.Need[dOutput], minN))
		}
	}
	return prior
}

// serviceEstimate is s's expected service time in ms for outTokens of
// output, or 0 when it has fewer than minN samples in the current and
// previous periods.
func (l *Ledger) serviceEstimate(s *serviceStat, outTokens, minN int64) int64 {
	// Read without rolling (a look changes no state): the periods that
	// are current and previous at now.
	var use [2]bool
	switch p := l.st.Now / serviceWindowMs; p {
	case s.Period:
		use = [2]bool{true, true}
	case s.Period + 1:
		use = [2]bool{true, false}
	}
	var n, decodeMs, tok int64
	var hist [serviceBins]int64
	for i := range use {
		if !use[i] {
			continue
		}
		n, decodeMs, tok = n+s.N[i], decodeMs+s.DecodeMs[i], tok+s.OutTok[i]
		for b := range hist {
			hist[b] += int64(s.TTFT[i][b])
		}
	}
	if n < minN || n == 0 {
		return 0
	}
	// The smallest bin by which serviceQuantilePermille of the samples
	// are counted.
	var acc, ttft int64
	for b := range hist {
		acc += hist[b]
		if acc*1000 >= n*serviceQuantilePermille {
			ttft = serviceBinLow(min(b+1, serviceBins-1))
			break
		}
	}
	var decode int64
	if tok > 0 && outTokens > 0 {
		// µs per token keeps the rate's precision; the product is
		// saturated (both factors are bounded, their product is not).
		perTokUs := decodeMs * 1000 / tok
		decode = min(dayMs, mulSat(perTokUs, outTokens)/1000)
	}
	return ttft + decode
}

// grantBy is the latest log time at which r may be granted: its deadline
// less its expected service time (0: no deadline).
func (r *res) grantBy() int64 {
	if r.Deadline == 0 {
		return 0
	}
	return r.Deadline - r.SvcMs
}
