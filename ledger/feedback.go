package ledger

import (
	"github.com/sluice-dev/sluice/schemas"
)

// providerRejected applies a provider refusal: the attempt's grant is
// released (its tokens were not consumed; the request still counts), and
// the scope (or the limited dimension) closes for at least Retry-After.
// A 429 also drains the rate buckets on the attempt's path, so that when the
// cooldown ends queued work flows out at the refill rate in queue order
// instead of all at once. An exhausted quota closes the scope until its
// reset and denies what is queued (non-retryable).
func (l *Ledger) providerRejected(ev *schemas.Event, out []Output) []Output {
	pr := ev.ProviderRejected
	now := l.st.Now
	ra := max(0, min(pr.RetryAfterMs, dayMs))
	ri, known := l.lookup(ev)
	var r *res
	if known {
		r = &l.st.Res[ri]
		if r.Flags&fRejected != 0 {
			return out // redelivery
		}
		r.Flags |= fRejected
	}
	si := noIdx
	if known {
		si = r.Scope
	} else if i, ok := l.scopeIdx[ev.Scope]; ok {
		si = i
	}
	if si < 0 {
		return out
	}
	sc := &l.st.Scopes[si]
	cfg := &l.st.Config.Cooldown
	limDim, dimKnown := dimIndex(pr.Limiter)
	// The scope's feedback state before this refusal: one that changes
	// none of it, on no reservation of ours (a copy of a refusal already
	// applied, a request_error), must not pump the queue again, or a
	// duplicate input would decide anew what the first copy decided.
	before := scopeFeedback{sc.CoolAll, sc.CoolAllOverload, sc.CoolDim, sc.CoolPolicy, sc.RecoverMs, sc.RecoverSlackMs}
	switch pr.Kind {
	case schemas.KindRateLimited:
		l.rateLimited(sc, r, known, ra, limDim, dimKnown)
	case schemas.KindOverloaded:
		until := now + max(ra, cfg.OverloadedMs)
		if until > sc.CoolAll {
			sc.CoolAll, sc.CoolAllOverload = until, true
		}
	case schemas.KindQuotaExhausted:
		out = l.quotaExhausted(sc, ra, out)
	}
	// An overload counts when it says so (503, Anthropic's 529); another
	// 5xx is a failure, not a capacity.
	overload := pr.Kind == schemas.KindOverloaded && (pr.HTTPStatus == 0 || pr.HTTPStatus == 503 || pr.HTTPStatus == 529)
	if known {
		// Any answer confirms the scope; a refusal ends its slow start.
		sc.Answered = true
		if pr.Kind == schemas.KindRateLimited || overload || pr.Kind == schemas.KindQuotaExhausted {
			sc.Slow = 0
		}
	}
	if (pr.Kind == schemas.KindRateLimited || overload) && known && r.State == stGranted && (r.Flags&fLimitSeen == 0 || r.Flags&fRoom != 0) {
		l.learnFromRefusal(pr, r, si, limDim, dimKnown)
	}
	if known {
		if r.State == stGranted {
			l.rampReject(r)
			if !l.st.Config.Learn.Off {
				l.st.Scopes[r.Scope].Sent.refused(r, l.st.Now)
			}
			actual := [numDims]int64{dRequests: 1, dRequestsPerDay: 1, dRamp: 1}
			l.settle(ri, &actual, 0, stReleased, false)
			l.st.Stats.Released++
		}
	} else if before == (scopeFeedback{sc.CoolAll, sc.CoolAllOverload, sc.CoolDim, sc.CoolPolicy, sc.RecoverMs, sc.RecoverSlackMs}) {
		return out
	}
	sc.Dirty = true
	return out
}

// rateLimited applies a provider 429 to the scope: it recovers over the
// storm hold, and closes (the dimension the provider named, or all of it)
// until the Retry-After, draining the refused attempt's buckets.
func (l *Ledger) rateLimited(sc *scopeState, r *res, known bool, ra int64, limDim int, dimKnown bool) {
	cfg := &l.st.Config.Cooldown
	now := l.st.Now
	// The provider's Retry-After is the floor, and the cooldown: a
	// blanket RateLimitedMs longer than it would keep queued work
	// waiting past the moment the provider takes it again. The default
	// applies only when the provider named no delay.
	wait := ra
	if wait == 0 {
		wait = cfg.RateLimitedMs
	}
	until := now + wait
	if known && r.Flags&fRoom != 0 {
		// Unexplained: the same response's rate-limit headers said
		// the provider's counters had room for this request. Its
		// buckets are not empty (the headers already lowered ours to
		// what they report), so neither a drain nor a closed scope
		// would avoid the next refusal; they would only stop the
		// work that must go now. The refused attempt's retry still
		// waits the Retry-After (retry), and the scope recovers: the
		// storm hold keeps back what can wait.
		sc.RecoverMs = max(sc.RecoverMs, now+wait)
		sc.RecoverSlackMs = cfg.StormHoldAttempts * wait
		return
	}
	sc.RecoverMs = max(sc.RecoverMs, until+wait)
	sc.RecoverSlackMs = cfg.StormHoldAttempts * wait
	if dimKnown {
		sc.CoolDim[limDim] = max(sc.CoolDim[limDim], until)
	} else if until > sc.CoolAll {
		sc.CoolAll, sc.CoolAllOverload = until, false
	}
	if known {
		l.drain(r, limDim, dimKnown)
	}
}

// quotaExhausted closes the scope until the provider's quota period
// resets (or its Retry-After), and denies every waiter: waiting cannot
// help.
func (l *Ledger) quotaExhausted(sc *scopeState, ra int64, out []Output) []Output {
	cfg := &l.st.Config.Cooldown
	now := l.st.Now
	until := now + ra
	if ra == 0 {
		w := floorDiv(now-cfg.QuotaResetOffsetMs, cfg.QuotaPeriodMs)
		until = (w+1)*cfg.QuotaPeriodMs + cfg.QuotaResetOffsetMs
	}
	sc.CoolPolicy = max(sc.CoolPolicy, until)
	for len(sc.Queue) > 0 {
		qi := sc.Queue[0]
		l.removeAt(sc, 0)
		l.finish(qi, stDenied)
		l.st.Stats.Denied++
		out = l.emit(out, &l.st.Res[qi], schemas.Decision{
			Status: schemas.StatusDenied, Reason: schemas.ReasonProviderQuotaExhausted,
			RetryAfterMs: until - now, GatewayDecision: schemas.GDRejectedPolicy, RetryClass: schemas.RetryPolicy,
		})
	}
	return out
}

// learnFromRefusal lowers the learned capacity on a refusal the headers
// do not explain (none reported a limit on this response, or they
// reported room for it), for an attempt of ours that was sent (learn.go).
// The refusal counts on the deployment it names, else on the path's
// deployment node.
func (l *Ledger) learnFromRefusal(pr *schemas.ProviderRejected, r *res, si int32, limDim int, dimKnown bool) {
	ni := l.learnNode(si, pr.Deployment)
	if pr.Deployment == "" {
		for i := int(r.NPath) - 1; i >= 0; i-- {
			if n := &l.st.Nodes[r.Path[i]]; n.Lvl == 6 && n.N > 0 {
				ni = r.Path[i]
				break
			}
		}
	}
	if pr.Kind == schemas.KindRateLimited && r.Flags&fRoom != 0 {
		l.learnPace(ni)
	}
	l.learnRefusal(si, ni, limDim, dimKnown && pr.Kind == schemas.KindRateLimited,
		pr.Kind == schemas.KindRateLimited && r.Flags&(fLimitSeen|fRoom) == 0)
}

// scopeFeedback is the part of a scope's state that provider refusals set.
type scopeFeedback struct {
	coolAll         int64
	coolAllOverload bool
	coolDim         [numDims]int64
	coolPolicy      int64
	recoverMs       int64
	recoverSlackMs  int64
}

// drain empties the token and ramp buckets on r's path (of dimension d if
// dimKnown) down to zero; debt stays.
// Shadow buckets are drained too: an enforced one would have been.
func (l *Ledger) drain(r *res, d int, dimKnown bool) {
	for i := 0; i < int(r.NPath); i++ {
		n := &l.st.Nodes[r.Path[i]]
		l.drainBuckets(l.st.Buckets[n.First:n.First+n.N], d, dimKnown)
		l.drainBuckets(l.st.Shadow[n.SFirst:n.SFirst+n.SN], d, dimKnown)
	}
}

func (l *Ledger) drainBuckets(bs []bucket, d int, dimKnown bool) {
	for bi := range bs {
		b := &bs[bi]
		sp := &l.cc.specs[b.Spec]
		if (sp.kind != kToken && sp.kind != kRamp) || (dimKnown && int(sp.dim) != d) {
			continue
		}
		l.refill(b, sp, l.st.Now)
		b.Level = min(b.Level, 0)
	}
}

func (l *Ledger) rampReject(r *res) {
	for i := 0; i < int(r.NPath); i++ {
		n := &l.st.Nodes[r.Path[i]]
		for bi := n.First; bi < n.First+n.N; bi++ {
			b := &l.st.Buckets[bi]
			if sp := &l.cc.specs[b.Spec]; sp.kind == kRamp {
				rampRoll(&l.st.Ramps[b.Ext], l.st.Now, sp.period)
				l.st.Ramps[b.Ext].Rejects[0]++
			}
		}
	}
}

// providerObserved lowers local levels to what the provider's headers say
// remains (never raising them): on the deployment node named by the event,
// else on the scope's root node.
func (l *Ledger) providerObserved(ev *schemas.Event) {
	si, ok := l.scopeIdx[ev.Scope]
	if !ok {
		return
	}
	po := ev.ProviderObserved
	if ev.RequestID != "" {
		if ri, known := l.lookup(ev); known {
			l.st.Scopes[si].Answered = true
			l.markRoom(&l.st.Res[ri], po.Observations)
			for _, ob := range po.Observations {
				if ob.Limit > 0 {
					l.st.Res[ri].Flags |= fLimitSeen
				}
			}
		}
	}
	// The enforced and the shadow buckets each take the deployment node if
	// it has buckets of their kind, else the scope root: a deployment node
	// that exists only for its shadow buckets must not turn the enforced
	// lowering away from the root.
	enf, sh := int32(noIdx), int32(noIdx)
	if po.Deployment != "" {
		if ni, found := l.nodeIdx[nodeKey{si, 6, po.Deployment}]; found {
			// (A node left without buckets by a config change keeps the
			// observation, as before shadow buckets existed.)
			// A node whose only enforced buckets were learned from
			// headers alone (learn.go) does not turn the lowering of the
			// configured ones away from the root either.
			if n := &l.st.Nodes[ni]; (n.N > 0 && !l.headersOnly(ni)) || (n.N == 0 && n.SN == 0) {
				enf = ni
			}
			if l.st.Nodes[ni].SN > 0 {
				sh = ni
			}
		}
	}
	if enf < 0 || sh < 0 {
		if root, found := l.nodeIdx[nodeKey{si, 0, ev.Scope}]; found {
			if enf < 0 {
				enf = root
			}
			if sh < 0 {
				sh = root
			}
		}
	}
	l.learnHeaders(si, enf, po.Deployment, po.Observations)
	if enf >= 0 {
		n := &l.st.Nodes[enf]
		l.lowerTo(l.st.Buckets[n.First:n.First+n.N], po.Observations)
	}
	if po.Deployment != "" {
		// The deployment's buckets learned from headers alone.
		if ni, found := l.nodeIdx[nodeKey{si, 6, po.Deployment}]; found && ni != enf && l.st.Nodes[ni].N > 0 {
			n := &l.st.Nodes[ni]
			l.lowerTo(l.st.Buckets[n.First:n.First+n.N], po.Observations)
		}
	}
	if sh >= 0 {
		n := &l.st.Nodes[sh]
		l.lowerTo(l.st.Shadow[n.SFirst:n.SFirst+n.SN], po.Observations)
	}
}

// markRoom flags a granted attempt whose response's rate-limit headers
// reported room for it on every dimension they named that it needs
// (remaining at least its amount): a 429 on it is then not one of the
// provider's counters running out (providerRejected). Headers that name
// no dimension it needs, or any exhausted one, leave the flag clear, and
// so does a remaining count without a limit (Azure's): it is the
// minute's, while Azure also counts over 1 or 10 s windows, so a minute
// with room does not explain away a 429 from the short window. Taken as
// room, such a 429 neither closed the scope for its Retry-After nor
// drained the bucket, and the refused grant's tokens, given back, let the
// next waiter into the same window at once
// (noisy-neighbor-handwritten's Azure fallback: three 429s in 800 ms).
func (l *Ledger) markRoom(r *res, obs []schemas.Observation) {
	if r.State != stGranted {
		return
	}
	room, named := true, false
	for _, ob := range obs {
		d, ok := dimIndex(ob.Dimension)
		if !ok || ob.Remaining < 0 || ob.Limit <= 0 || r.Need[d] <= 0 {
			continue
		}
		named = true
		need := r.Need[d]
		if d == dOutput || d == dTotal {
			need = max(need, need-r.Need[dOutput]+r.MaxOut) // a max_tokens provider counts the max
		}
		if ob.Remaining < need {
			room = false
		}
	}
	if named && room {
		r.Flags |= fRoom
	} else {
		r.Flags &^= fRoom
	}
}

// lowerTo lowers the levels of bs to the remaining amounts observed, never
// raising them.
func (l *Ledger) lowerTo(bs []bucket, obs []schemas.Observation) {
	now := l.st.Now
	for _, ob := range obs {
		d, ok := dimIndex(ob.Dimension)
		if !ok || ob.Remaining < 0 {
			continue
		}
		rem := min(ob.Remaining, maxAmount)
		for bi := range bs {
			b := &bs[bi]
			sp := &l.cc.specs[b.Spec]
			if int(sp.dim) != d {
				continue
			}
			l.refill(b, sp, now)
			switch sp.kind {
			case kToken, kRamp:
				b.Level = min(b.Level, mulSat(rem, sp.period))
			case kFixed:
				b.Level = min(b.Level, rem)
			case kRolling:
				rs := &l.st.Rolls[b.Ext]
				if used := sp.capacity - rem; used > rs.Sum {
					rs.Ring[rs.Cur%int64(len(rs.Ring))] += used - rs.Sum
					rs.Sum = used
				}
			}
		}
	}
}

// retry decides whether, and when, a failed attempt may be retried. The
// retry is a new reservation (attempt previous+1, same path and estimates)
// under the logical request's budget (attempts, deadline) and the scope's
// retry budget (each first attempt earns RatioPermille/1000 of a retry).
// Its backoff is capped exponential with full jitter derived from the
// request id, with Retry-After (and any cooldown) as the floor; it waits in
// the queue until then and is granted like any other waiter.
func (l *Ledger) retry(ev *schemas.Event, out []Output) []Output {
	rq := ev.RetryRequested
	if ev.RequestID == "" {
		return out
	}
	if rq.PreviousAttempt < 1 || rq.PreviousAttempt >= 1000 || (ev.Attempt > 0 && ev.Attempt != rq.PreviousAttempt+1) {
		return l.refuseEv(ev, out, schemas.ReasonBadAttempt, schemas.RetryRequestError)
	}
	att := rq.PreviousAttempt + 1
	fp := fnvInt(fnvStr(fnvStr(fnvOffset, "retry"), string(rq.Reason)), rq.RetryAfterMs)
	rh := resHash(ev.RequestID, att)
	if ri, ok := l.resIdx.get(l.st.Res, rh, ev.RequestID, att); ok {
		if r := &l.st.Res[ri]; r.Flags&fRetry != 0 && r.FP == fp {
			return out // redelivery
		}
		return l.conflict(ev, att, out)
	}
	pi, ok := l.resFind(ev.RequestID, rq.PreviousAttempt)
	if !ok {
		return l.refuseEv(ev, out, schemas.ReasonUnknownPrevious, schemas.RetryRequestError)
	}
	if l.liveRes() >= l.st.Config.ReservationsMax {
		return l.refuseEv(ev, out, schemas.ReasonLedgerFull, schemas.RetryOverload)
	}
	if l.st.Res[pi].State == stGranted {
		// The gateway asks to retry an attempt it never settled: release it.
		actual := [numDims]int64{dRequests: 1, dRequestsPerDay: 1, dRamp: 1}
		l.settle(pi, &actual, 0, stReleased, false)
		l.st.Stats.Released++
	}
	if l.st.Res[pi].State == stQueued {
		out = l.cancel(pi, out)
	}
	if es := l.cc.ent; es != nil {
		// The retry reuses the first attempt's path, class, priority and
		// route; the entitlements may have changed since (entitle.go).
		p := &l.st.Res[pi]
		who := l.retryWho(p)
		if why, holder := es.fault(&who, p.ClassIdx, p.Priority, p.Route); why != "" {
			return l.refuseNotEntitled(ev, out, why, holder)
		}
	}
	ri := l.newRetryRes(ev, pi, att, rh, fp)
	r := &l.st.Res[ri]
	now := l.st.Now
	sc := &l.st.Scopes[r.Scope]
	switch rq.Reason {
	case schemas.RetryPolicy, schemas.RetryRequestError, schemas.RetryDeadline:
		return l.refuseRetry(ri, out, schemas.ReasonNotRetryable, rq.Reason)
	}
	if att > r.MaxAtt {
		return l.refuseRetry(ri, out, schemas.ReasonRetryAttemptsExhausted, schemas.RetryPolicy)
	}
	delay := l.retryDelay(r, sc, rq.RetryAfterMs)
	if r.Deadline > 0 && now+delay >= r.grantBy() {
		if now+delay < r.Deadline {
			return l.refuseRetry(ri, out, schemas.ReasonDeadlineBelowService, schemas.RetryDeadline)
		}
		return l.refuseRetry(ri, out, schemas.ReasonDeadlineExceeded, schemas.RetryDeadline)
	}
	if sc.RetryMilli < 1000 {
		return l.refuseRetry(ri, out, schemas.ReasonRetryBudgetExhausted, schemas.RetryPolicy)
	}
	sc.RetryMilli -= 1000
	l.st.Stats.Retries++
	r.NotBefore = now + delay
	r.ExpireMs = r.NotBefore + max(1, l.st.Config.Classes[r.ClassIdx].MaxWaitMs)
	if r.Deadline > 0 && r.grantBy() < r.ExpireMs {
		r.ExpireMs = r.grantBy()
	}
	return l.arrive(ri, out)
}

// newRetryRes allocates the retry's reservation: the previous attempt's
// path, needs, class, priority, route and budgets (charged anew), under
// the retry's node.
func (l *Ledger) newRetryRes(ev *schemas.Event, pi, att int32, rh uint32, fp uint64) int32 {
	ri := l.allocRes()
	p := &l.st.Res[pi]
	r := &l.st.Res[ri]
	l.st.Seq++
	now := l.st.Now
	*r = res{
		RequestID: p.RequestID, Attempt: att, rh: rh, Node: p.Node, Tenant: p.Tenant, KeyID: p.KeyID, Team: p.Team, Route: p.Route,
		Class: p.Class, Scope: p.Scope, ClassIdx: p.ClassIdx, State: stQueued, Flags: p.Flags & (fStreaming | fFallback | fOwnWait),
		NPath: p.NPath, Path: p.Path, Need: p.Need, Cached: p.Cached, MaxOut: p.MaxOut, FP: fp, Seq: l.st.Seq, Priority: p.Priority,
		EnqMs: now, FirstMs: p.FirstMs, Deadline: p.Deadline, MaxAtt: p.MaxAtt, Gen: l.st.Gen,
		List: noIdx, Prev: noIdx, Next: noIdx,
	}
	r.Flags |= fRetry
	if len(p.Bud) > 0 {
		r.Bud = make([]budRef, len(p.Bud)) // the same budgets, charged anew
		for i, b := range p.Bud {
			r.Bud[i] = budRef{ID: b.ID, Cost: b.Cost}
		}
	}
	if r.Deadline > 0 {
		r.SvcMs = l.expectedService(r)
	}
	if ev.Node != "" {
		r.Node = ev.Node
	}
	l.resIdx.put(rh, ri)
	return ri
}

// refuseRetry denies the retry's reservation ri.
func (l *Ledger) refuseRetry(ri int32, out []Output, reason schemas.Reason, class schemas.RetryClass) []Output {
	l.finish(ri, stDenied)
	l.st.Stats.Denied++
	gd := schemas.GDRejectedLocally
	if class == schemas.RetryPolicy {
		gd = schemas.GDRejectedPolicy
	}
	return l.emit(out, &l.st.Res[ri], schemas.Decision{Status: schemas.StatusDenied, Reason: reason, GatewayDecision: gd, RetryClass: class})
}

// retryDelay is how long the retry r waits: capped exponential backoff
// with full jitter, Retry-After as its floor, and no earlier than the
// scope's (or its needed dimension's) cooldown ends.
func (l *Ledger) retryDelay(r *res, sc *scopeState, retryAfterMs int64) int64 {
	cfg := &l.st.Config.Retry
	now, att := l.st.Now, r.Attempt
	capMs := cfg.MaxMs
	if shift := att - 2; shift < 30 && cfg.BaseMs<<shift < capMs {
		capMs = cfg.BaseMs << shift
	}
	delay := jitter(r.RequestID, att, capMs)
	if ra := min(max(0, retryAfterMs), dayMs); ra > 0 {
		// Retry-After is the floor; the jitter goes on top of it (at most
		// half of it) so that attempts refused together do not all come
		// back at the same instant, in the same order, to meet the same
		// refusals.
		delay = ra + jitter(r.RequestID, att, min(capMs, ra/2))
	}
	if c := max(sc.CoolAll, sc.CoolPolicy) - now; c > delay {
		delay = c
	}
	// A provider 429 that named its dimension closes only that dimension;
	// a retry needing it is not due before it reopens (otherwise it would
	// wait in the queue past its class's max wait and expire).
	for d := range sc.CoolDim {
		if r.Need[d] > 0 && sc.CoolDim[d]-now > delay {
			delay = sc.CoolDim[d] - now
		}
	}
	return delay
}
