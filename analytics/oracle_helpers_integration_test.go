//go:build integration

package analytics

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sluice-dev/sluice/analytics/synth"
	"github.com/sluice-dev/sluice/schemas"
)

// The oracle: metrics computed in Go straight from the events, with the
// definitions README.md gives, by code that shares nothing with the SQL.

type oAttempt struct {
	reqID                                    string
	attempt                                  int32
	scope, tenant, route, class, path, model string
	family, band, provider, limiter          string
	limitPath, limitDim                      string
	streaming                                bool
	estIn, estOut, in, out, cached           int64
	// usedIn, usedOut: what the hold actually used — a Reconciled's
	// usage, or a Released's partial usage.
	usedIn, usedOut      int64
	grantedMs, holdEndMs int64
	// holdEnd is what ended the hold (reconciled, released, late_grant,
	// provider_rejected, retried, hold_expired), the first that did.
	holdEnd                        string
	hasReserve                     bool // its own ReserveRequested (a gateway retry has none)
	reconciled, dispatched, rej429 bool
	queued, denied                 bool
	lastDecisionMs                 int64
}

// holdEndRank orders the kinds of hold end that fall in one millisecond
// as migration 008 does (s_hold_end = end time × 8 + rank): the attempt's
// own settlement, then the next attempt's retry, then the ledger's expiry.
var holdEndRank = map[string]int{"reconciled": 1, "released": 2, "late_grant": 3, "provider_rejected": 4, "retried": 5, "hold_expired": 6}

// endHold records an event that ended the attempt's hold at ms; the
// earliest counts (the ledger settles a reservation once), and of two in
// the same millisecond the lower rank, whatever order the log has them in.
func (a *oAttempt) endHold(ms int64, kind string) {
	if a.holdEndMs == 0 || ms < a.holdEndMs || ms == a.holdEndMs && holdEndRank[kind] < holdEndRank[a.holdEnd] {
		a.holdEndMs, a.holdEnd = ms, kind
	}
}

type oRequest struct {
	tenant, class, status, decision string
	receivedMs, firstDispatchMs     int64
	// From its ReserveRequested (the lowest attempt's): what links it to
	// its logical request.
	keyID, route, idemKey string
	clientRetries         int32
	producedMs            int64
	reserveAttempt        int32
}

type oracle struct {
	attempts map[string]*oAttempt
	requests map[string]*oRequest
	caps     map[string]int64 // scope|bucket|dimension → capacity
	// held: what the bucket holds at most, capacity × window ÷ period for
	// token and ramp buckets, capacity otherwise (scope|bucket|dimension).
	held map[string]float64
	// streamDisagree counts attempts whose ReserveRequested and Reconciled
	// disagree on streaming.
	streamDisagree int
}

func newOracle(recs []synth.Record) *oracle {
	o := &oracle{attempts: map[string]*oAttempt{}, requests: map[string]*oRequest{}, caps: map[string]int64{}, held: map[string]float64{}}
	attemptOf := func(e *schemas.Event, attempt int32) *oAttempt {
		k := fmt.Sprintf("%s#%d", e.RequestID, attempt)
		a := o.attempts[k]
		if a == nil {
			a = &oAttempt{reqID: e.RequestID, attempt: attempt, scope: DeploymentScope(e.Scope), tenant: e.Tenant, route: e.Route, class: e.Class}
			o.attempts[k] = a
		}
		return a
	}
	for _, r := range recs {
		e := r.Event
		if e.ConfigChanged != nil {
			row := Row{}
			for _, c := range CapacityRows(&row, e) {
				k := c.Scope + "|" + c.Bucket + "|" + c.Dimension
				o.caps[k] = c.Capacity
				o.held[k] = float64(c.Capacity)
				if c.Refill == "" || c.Refill == "token" || c.Refill == "ramp" {
					period, window := c.PeriodMs, c.WindowMs
					if period <= 0 {
						period = 60000
					}
					if window <= 0 {
						window = min(1000, period)
					}
					o.held[k] = float64(c.Capacity) * float64(window) / float64(period)
				}
			}
			continue
		}
		if e.RequestID == "" {
			continue
		}
		rq := o.requests[e.RequestID]
		if rq == nil {
			rq = &oRequest{}
			o.requests[e.RequestID] = rq
		}
		rq.tenant, rq.class = e.Tenant, e.Class
		var a *oAttempt
		if e.Type != schemas.TypeOutcome && e.Type != schemas.TypeRetryRequested {
			a = attemptOf(e, e.Attempt)
		}
		t := r.LogTimeMs
		switch {
		case e.ReserveRequested != nil:
			p := e.ReserveRequested
			a.hasReserve = true
			a.estIn, a.estOut, a.streaming = p.InputTokens, p.OutputTokens, p.Streaming
			a.family, a.band, a.path = p.PromptFamily, ContextBand(p.InputTokens), PathString(p.Path)
			if rq.receivedMs == 0 || t < rq.receivedMs {
				rq.receivedMs = t
			}
			if rq.reserveAttempt == 0 || e.Attempt < rq.reserveAttempt {
				rq.reserveAttempt, rq.clientRetries = e.Attempt, p.ClientRetryCount
			}
			if p.IdempotencyKey > rq.idemKey {
				rq.idemKey = p.IdempotencyKey
			}
			if rq.producedMs == 0 || e.ProducedAtMs < rq.producedMs {
				rq.producedMs = e.ProducedAtMs
			}
			rq.keyID, rq.route = e.KeyID, e.Route
		case e.RetryRequested != nil:
			// The ledger settles the previous attempt's grant if nothing
			// else did (ledger/feedback.go retry).
			attemptOf(e, e.RetryRequested.PreviousAttempt).endHold(t, "retried")
		case e.Decision != nil:
			d := e.Decision
			// A decision's time is the ledger clock that charged the
			// bucket (Decision.log_time_ms), not when its record was
			// appended to sluice.decisions.
			if d.LogTimeMs > 0 {
				t = d.LogTimeMs
			}
			switch d.Status {
			case schemas.StatusGranted:
				if a.grantedMs == 0 || t < a.grantedMs {
					a.grantedMs = t
				}
			case schemas.StatusQueued:
				a.queued = true
			case schemas.StatusDenied:
				a.denied = true
			case schemas.StatusExpired, schemas.StatusHoldExpired, schemas.StatusReleased, schemas.StatusReconciled:
				// expired: a queue expiry holds nothing (no grant), or an
				// older ledger's hold expiry.
				a.endHold(t, "hold_expired")
			}
			if d.LimitPath != "" && t >= a.lastDecisionMs {
				a.limitPath, a.limitDim, a.lastDecisionMs = d.LimitPath, string(d.LimitDimension), t
			}
		case e.Dispatched != nil:
			a.dispatched, a.provider, a.model = true, string(e.Dispatched.Provider), e.Dispatched.Model
			if rq.firstDispatchMs == 0 {
				rq.firstDispatchMs = t
			}
		case e.Reconciled != nil:
			p := e.Reconciled
			a.reconciled, a.in, a.out, a.cached = true, p.InputTokens, p.OutputTokens, p.CachedInputTokens
			a.usedIn, a.usedOut = max(a.usedIn, p.InputTokens), max(a.usedOut, p.OutputTokens)
			// An attempt streamed if its reserve or its reconcile says so
			// (the views take the max of both; the recorded load has
			// attempts where they disagree).
			if a.streaming != p.Streaming {
				o.streamDisagree++
			}
			a.streaming = a.streaming || p.Streaming
			a.endHold(t, "reconciled")
		case e.Released != nil:
			p := e.Released
			a.usedIn, a.usedOut = max(a.usedIn, p.InputTokens), max(a.usedOut, p.OutputTokens)
			kind := "released"
			if p.Reason == schemas.ReasonLateGrant {
				kind = "late_grant"
			}
			a.endHold(t, kind)
		case e.ProviderRejected != nil:
			// The ledger releases the attempt's grant (providerRejected).
			a.endHold(t, "provider_rejected")
			if e.ProviderRejected.HTTPStatus == 429 {
				a.rej429, a.limiter = true, string(e.ProviderRejected.Limiter)
			}
		case e.Outcome != nil:
			rq.status, rq.decision = string(e.Outcome.Status), string(e.Outcome.GatewayDecision)
		}
	}
	// A gateway retry (RetryRequested, no ReserveRequested) keeps the
	// path and estimates of the request's first reserved attempt
	// (ledger/feedback.go retry: "same path and estimates").
	first := map[string]*oAttempt{}
	for _, a := range o.attempts {
		if f := first[a.reqID]; a.hasReserve && (f == nil || a.attempt < f.attempt) {
			first[a.reqID] = a
		}
	}
	for _, a := range o.attempts {
		if f := first[a.reqID]; !a.hasReserve && f != nil {
			a.estIn, a.estOut, a.family, a.band, a.path = f.estIn, f.estOut, f.family, f.band, f.path
			a.streaming = a.streaming || f.streaming
		}
	}
	return o
}

// strandedIn, strandedOut: capacity held above what the hold used, in
// token·ms (a release without usage strands the whole reservation).
func (a *oAttempt) strandedIn() int64  { return max(a.estIn-a.usedIn, 0) * a.holdMs() }
func (a *oAttempt) strandedOut() int64 { return max(a.estOut-a.usedOut, 0) * a.holdMs() }

func (a *oAttempt) holdMs() int64 {
	if a.grantedMs > 0 && a.holdEndMs >= a.grantedMs {
		return a.holdEndMs - a.grantedMs
	}
	return 0
}

func (o *oracle) sortedAttempts() []*oAttempt {
	var out []*oAttempt
	for _, a := range o.attempts {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].reqID != out[j].reqID {
			return out[i].reqID < out[j].reqID
		}
		return out[i].attempt < out[j].attempt
	})
	return out
}

// quantileRank returns ClickHouse quantileExact's pick (the element at
// index ⌊level·n⌋ of the sorted values) and its neighbours, the tolerance
// band the test accepts: one rank either side.
func quantileRank(xs []float64, level float64) (lo, at, hi float64) {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(level * float64(len(s)))
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[max(i-1, 0)], s[i], s[min(i+1, len(s)-1)]
}

// errStats is one estimation_error group in Go.
type errStats struct {
	n           int64
	inE, outE   []float64
	inSum, oSum float64
}

func (o *oracle) estimationError() map[string]*errStats {
	out := map[string]*errStats{}
	for _, a := range o.sortedAttempts() {
		if !a.reconciled || a.in <= 0 || a.out <= 0 {
			continue
		}
		ie := float64(a.estIn-a.in) / float64(a.in)
		oe := float64(a.estOut-a.out) / float64(a.out)
		stream := "not_streaming"
		if a.streaming {
			stream = "streaming"
		}
		for _, k := range []string{"route|" + a.route, "model|" + a.model, "tenant|" + a.tenant,
			"prompt_family|" + a.family, "context_band|" + a.band, "streaming|" + stream} {
			s := out[k]
			if s == nil {
				s = &errStats{}
				out[k] = s
			}
			s.n++
			s.inE, s.outE = append(s.inE, ie), append(s.outE, oe)
			s.inSum += ie
			s.oSum += oe
		}
	}
	return out
}

// stranded returns token·ms and refusals per scope|bucket|dimension.
func (o *oracle) stranded() (map[string]int64, map[string]int64) {
	tok, refused := map[string]int64{}, map[string]int64{}
	for key := range o.caps {
		parts := strings.Split(key, "|")
		scope, bucket, dim := parts[0], parts[1], parts[2]
		if dim != "input_tokens" && dim != "output_tokens" && dim != "total_tokens" {
			continue
		}
		found := false
		for _, a := range o.attempts {
			if a.scope != scope || !strings.Contains("/"+a.path+"/", "/"+bucket+"/") {
				continue
			}
			found = true
			sIn, sOut := a.strandedIn(), a.strandedOut()
			switch dim {
			case "input_tokens":
				tok[key] += sIn
			case "output_tokens":
				tok[key] += sOut
			default:
				tok[key] += sIn + sOut
			}
			if (a.queued || a.denied) && a.limitDim == dim && strings.HasSuffix("/"+a.limitPath, "/"+bucket) {
				refused[key]++
			}
		}
		if !found {
			delete(tok, key)
		}
	}
	return tok, refused
}

// logicalOf maps each request id to its logical request (README.md,
// "Logical requests"): tenant and idempotency key when it has a key; else,
// for an SDK retry (client_retry_count n > 0), the latest first try
// (count 0, no key) of the same tenant, key id and route at most n × 60 s
// before it; else itself.
func (o *oracle) logicalOf() map[string]string {
	out := map[string]string{}
	type ktr struct{ tenant, key, route string }
	roots := map[ktr][]string{}
	for id, rq := range o.requests {
		if rq.reserveAttempt > 0 && rq.idemKey == "" && rq.clientRetries == 0 {
			k := ktr{rq.tenant, rq.keyID, rq.route}
			roots[k] = append(roots[k], id)
		}
	}
	for id, rq := range o.requests {
		switch {
		case rq.idemKey != "":
			out[id] = "idem:" + rq.tenant + ":" + rq.idemKey
		case rq.clientRetries > 0:
			out[id] = id
			best := int64(-1)
			for _, r := range roots[ktr{rq.tenant, rq.keyID, rq.route}] {
				t := o.requests[r].producedMs
				// the latest; of several in one millisecond, the greatest id
				if t <= rq.producedMs && (t > best || t == best && r > out[id]) {
					best = t
					out[id] = r
				}
			}
			if best >= 0 && rq.producedMs > best+int64(rq.clientRetries)*60_000 {
				out[id] = id
			}
		default:
			out[id] = id
		}
	}
	return out
}

// groupOf is a logical request's tenant|class: the least of its request
// ids' (they share a tenant; a class may differ between tries).
func (o *oracle) groupOf(ids []string) string {
	tenant, class := o.requests[ids[0]].tenant, o.requests[ids[0]].class
	for _, id := range ids {
		tenant, class = min(tenant, o.requests[id].tenant), min(class, o.requests[id].class)
	}
	return tenant + "|" + class
}

type ampStats struct {
	requests      map[string]bool // request ids sent upstream
	logical       map[string]bool
	upstream      int64
	gatewayRetry  int64
	sdkRetry      int64
	duplicates    int64
	retriedTokens int64
}

// amplification groups the logical requests sent upstream at least once
// by the provider they went to (the greatest name over their attempts),
// tenant and class: each logical request counts once, whatever its
// layers did. Its later request ids are SDK retries (client_retry_count
// > 0) or client duplicates (0).
func (o *oracle) amplification() map[string]*ampStats {
	logical := o.logicalOf()
	provider, upstream := map[string]string{}, map[string]int64{}
	for _, a := range o.attempts {
		if a.dispatched {
			l := logical[a.reqID]
			upstream[l]++
			if a.provider > provider[l] {
				provider[l] = a.provider
			}
		}
	}
	members := map[string][]string{}
	for id, l := range logical {
		members[l] = append(members[l], id)
	}
	out := map[string]*ampStats{}
	for l, ids := range members {
		if upstream[l] == 0 {
			continue
		}
		sort.Slice(ids, func(i, j int) bool {
			a, b := o.requests[ids[i]], o.requests[ids[j]]
			if a.producedMs != b.producedMs {
				return a.producedMs < b.producedMs
			}
			return a.clientRetries < b.clientRetries
		})
		k := provider[l] + "|" + o.groupOf(ids)
		s := out[k]
		if s == nil {
			s = &ampStats{requests: map[string]bool{}, logical: map[string]bool{}}
			out[k] = s
		}
		s.logical[l] = true
		for i, id := range ids {
			if i > 0 {
				if o.requests[id].clientRetries > 0 {
					s.sdkRetry++
				} else {
					s.duplicates++
				}
			}
		}
	}
	for _, a := range o.attempts {
		l := logical[a.reqID]
		if upstream[l] == 0 {
			continue
		}
		s := out[provider[l]+"|"+o.groupOf(members[l])]
		if a.dispatched {
			s.requests[a.reqID] = true
			s.upstream++
			if a.attempt > 1 {
				s.gatewayRetry++
				s.retriedTokens += a.estIn + a.estOut
			}
		}
	}
	return out
}

// shadowGroup is one shadow_limits row in Go.
type shadowGroup struct {
	stc       string // scope|tenant|class
	grants    int64
	shortfall []float64 // needed − available of the grants it would have refused
}

// shadowLimits groups the granted Decisions that carry a shadow verdict
// (produced in rng) by scope, tenant, class, limit path and dimension, and
// counts the evaluated grants of each scope, tenant and class.
func shadowLimits(recs []synth.Record, rng Range) (map[string]*shadowGroup, map[string]int64) {
	groups, evaluated := map[string]*shadowGroup{}, map[string]int64{}
	for _, r := range recs {
		e := r.Event
		if e.Decision == nil || e.Decision.Status != schemas.StatusGranted || e.Decision.Shadow == nil || e.Decision.Shadow.Buckets == 0 {
			continue
		}
		if sec := e.ProducedAtMs / 1000; sec < rng.From.Unix() || sec >= rng.To.Unix() {
			continue
		}
		sv := e.Decision.Shadow
		stc := DeploymentScope(e.Scope) + "|" + e.Tenant + "|" + e.Class
		evaluated[stc]++
		k := stc + "|" + sv.LimitPath + "|" + string(sv.LimitDimension)
		g := groups[k]
		if g == nil {
			g = &shadowGroup{stc: stc}
			groups[k] = g
		}
		g.grants++
		if sv.Limited {
			g.shortfall = append(g.shortfall, float64(sv.Needed-sv.Available))
		}
	}
	return groups, evaluated
}
