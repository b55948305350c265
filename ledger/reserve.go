package ledger

import (
	"strings"

	"github.com/sluice-dev/sluice/schemas"
)

// ---- scopes and nodes ----

// scopeOf returns the state index of a scope, creating it on first use, or
// -1 when no scope config (exact or "*") covers the name.
func (l *Ledger) scopeOf(name string) int32 {
	// Scope indexes never change once assigned: most events of a partition
	// name the scope of the one before.
	if i := l.lastScope; i >= 0 && int(i) < len(l.st.Scopes) && l.st.Scopes[i].Name == name {
		return i
	}
	if i, ok := l.scopeIdx[name]; ok {
		l.lastScope = i
		return i
	}
	if _, ok := l.cc.scopeFor(name); !ok || name == "" || len(name) > maxStrLen {
		return noIdx
	}
	i := int32(len(l.st.Scopes))
	l.st.Scopes = append(l.st.Scopes, scopeState{
		Name:       name,
		Depth:      make([]int32, len(l.st.Config.Classes)),
		RetryMilli: l.st.Config.Retry.BurstMax * 1000,
		flows:      map[flowKey]int64{},
	})
	l.scopeIdx[name] = i
	return i
}

// nodeOf returns the node (scope, level, id), stamping it from the config on
// first use. It returns -1 when the level has no buckets for id and -2 when
// the node limit is reached.
func (l *Ledger) nodeOf(si int32, lv uint8, id string) int32 {
	if i, ok := l.nodeIdx[nodeKey{si, lv, id}]; ok {
		return i
	}
	ci, ok := l.cc.scopeFor(l.st.Scopes[si].Name)
	if !ok {
		return noIdx
	}
	specs := l.cc.scopes[ci].specsFor(lv, id)
	if len(specs) == 0 {
		return noIdx
	}
	if len(l.st.Nodes) >= l.st.Config.NodesMax {
		return -2
	}
	n := node{Scope: si, Lvl: lv, ID: id, First: int32(len(l.st.Buckets))}
	for _, s := range specs {
		if !l.cc.specs[s].shadow {
			l.st.Buckets = append(l.st.Buckets, l.newBucket(s, si))
			n.N++
		} else {
			if n.SN == 0 {
				n.SFirst = int32(len(l.st.Shadow))
			}
			l.st.Shadow = append(l.st.Shadow, l.newBucket(s, si))
			n.SN++
		}
	}
	ni := int32(len(l.st.Nodes))
	l.st.Nodes = append(l.st.Nodes, n)
	l.nodeIdx[nodeKey{si, lv, id}] = ni
	return ni
}

// newBucket returns a full bucket of spec s.
func (l *Ledger) newBucket(s int32, si int32) bucket {
	sp := &l.cc.specs[s]
	now := l.st.Now
	b := bucket{Spec: s, Gen: l.st.Gen, Ext: noIdx, LastMs: now}
	switch sp.kind {
	case kToken:
		b.Level, b.Base = sp.burst, sp.gBurst
	case kRamp:
		rate := sp.ramp.StartPerPeriod
		b.Ext = int32(len(l.st.Ramps))
		l.st.Ramps = append(l.st.Ramps, rampState{Scope: si, Rate: rate, Period: now / sp.period})
		b.Level = rampBurst(rate, sp.window)
	case kFixed:
		b.Level = sp.capacity
		b.LastMs = floorDiv(now-sp.offset, sp.period)
	case kRolling:
		b.Ext = int32(len(l.st.Rolls))
		l.st.Rolls = append(l.st.Rolls, rollState{Cur: now / sp.slotMs, Ring: make([]int64, sp.slots+1)})
	case kConcurrency:
		b.Level = sp.capacity
	}
	return b
}

// limitPath renders the path of r up to and including node ni, e.g.
// "scope:sim-openai/tenant:acme/key:k1". Nodes that hold only shadow
// buckets are left out, so that adding a shadow limit changes no recorded
// limit_path. It allocates: refusals only.
func (l *Ledger) limitPath(r *res, ni int32) string {
	var sb strings.Builder
	for i := 0; i < int(r.NPath); i++ {
		n := &l.st.Nodes[r.Path[i]]
		if n.N == 0 && n.SN > 0 && r.Path[i] != ni {
			continue // a node of shadow buckets only
		}
		if sb.Len() > 0 {
			sb.WriteByte('/')
		}
		sb.WriteString(levelNames[n.Lvl])
		sb.WriteByte(':')
		sb.WriteString(n.ID)
		if r.Path[i] == ni {
			break
		}
	}
	return sb.String()
}

// ---- reservations ----

func (l *Ledger) allocRes() int32 {
	if n := len(l.st.Free); n > 0 {
		i := l.st.Free[n-1]
		l.st.Free = l.st.Free[:n-1]
		return i
	}
	l.st.Res = append(l.st.Res, res{})
	return int32(len(l.st.Res) - 1)
}

func (l *Ledger) liveRes() int { return len(l.st.Res) - len(l.st.Free) }

// finish moves r to a terminal state and remembers it for DedupTTLMs.
func (l *Ledger) finish(ri int32, state uint8) {
	r := &l.st.Res[ri]
	r.State = state
	r.DoneMs = l.st.Now
	l.pushDone(ri)
}

// pushDone appends ri to the done list. evictDone drops the list's head by
// reslicing, which leaves the front of the backing array unused; instead of
// letting append allocate a new array each time the tail reaches the end,
// the live part slides back to the front once half of the array is free
// (amortized O(1), and no allocation in a steady state). A full array
// doubles.
func (l *Ledger) pushDone(ri int32) {
	d := l.st.Done
	if len(d) == cap(d) {
		if len(d) <= cap(l.doneBuf)/2 && (len(d) == 0 || sameArrayEnd(l.doneBuf, d)) {
			d = l.doneBuf[:copy(l.doneBuf, d)]
		} else {
			l.doneBuf = make([]int32, 2*len(d)+64)
			d = l.doneBuf[:copy(l.doneBuf, d)]
		}
	}
	l.st.Done = append(d, ri)
}

// sameArrayEnd reports whether the non-empty slices a and b end their
// capacity at the same element, i.e. b is a tail window of a's array.
func sameArrayEnd(a, b []int32) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:cap(a)][cap(a)-1] == &b[:cap(b)][cap(b)-1]
}

// evictDone forgets finished reservations older than DedupTTLMs.
func (l *Ledger) evictDone() {
	ttl := l.st.Config.DedupTTLMs
	k := 0
	for k < len(l.st.Done) && l.st.Res[l.st.Done[k]].DoneMs+ttl <= l.st.Now {
		ri := l.st.Done[k]
		r := &l.st.Res[ri]
		h := r.rh
		if h == 0 {
			h = resHash(r.RequestID, r.Attempt) // the same value if it really is 0
		}
		l.resIdx.del(h, ri)
		*r = res{}
		l.st.Free = append(l.st.Free, ri)
		k++
	}
	if k > 0 {
		l.st.Done = l.st.Done[k:]
		if len(l.st.Free) == len(l.st.Res) && len(l.st.Res) > 4096 {
			// Nothing is live: give the slab's memory back after a burst.
			l.st.Res, l.st.Free, l.st.Done, l.doneBuf = nil, nil, nil, nil
		}
	}
}

// missingLevels returns, as a bit per level, the levels that scope si
// requires and path does not name. A level is named when resolvePath would
// use it: a known level with a non-empty id of at most maxStrLen bytes.
func (l *Ledger) missingLevels(si int32, levels []schemas.PathLevel) uint8 {
	ci, ok := l.cc.scopeFor(l.st.Scopes[si].Name)
	if !ok || l.cc.scopes[ci].required == 0 {
		return 0
	}
	var named uint8
	for _, p := range levels {
		if lv, ok := levelCode(p.Level); ok && p.ID != "" && len(p.ID) <= maxStrLen {
			named |= 1 << lv
		}
	}
	return l.cc.scopes[ci].required &^ named
}

// refuseMissingLevels denies a request whose path lacks required levels,
// naming them in LimitPath ("/" separated, in path order).
func (l *Ledger) refuseMissingLevels(ev *schemas.Event, out []Output, missing uint8) []Output {
	var names []string
	for lv, name := range levelNames {
		if missing&(1<<lv) != 0 {
			names = append(names, name)
		}
	}
	n := len(out)
	out = l.refuseEv(ev, out, schemas.ReasonPathMissingLevel, schemas.RetryRequestError)
	if len(out) > n {
		out[n].Decision.LimitPath = strings.Join(names, "/")
	}
	return out
}

// unknownIDs returns the "level:id" entries ("/" separated, in path order)
// where a path names, at a closed level of scope si (scopeCfg.closed), an
// id that the config does not list, or "" when it names none. It reads the
// path as resolvePath does: the first entry of each known level, ids of at
// most maxStrLen bytes. Such a path would pass the level without charging
// any of its limits: a reserve naming "deployment:evil-deployment" charged
// no provider bucket (issue 19, D5), and so would a gateway whose
// provider name drifted from the ledger config.
func (l *Ledger) unknownIDs(si int32, levels []schemas.PathLevel) string {
	ci, ok := l.cc.scopeFor(l.st.Scopes[si].Name)
	if !ok || l.cc.scopes[ci].closed == 0 {
		return ""
	}
	sc := &l.cc.scopes[ci]
	var seen [numLevels]bool
	var names []string
	for _, p := range levels {
		lv, ok := levelCode(p.Level)
		if !ok || lv == 0 || seen[lv] || len(p.ID) > maxStrLen {
			continue
		}
		seen[lv] = true
		if sc.closed&(1<<lv) != 0 && !l.cc.knows(sc, lv, p.ID) {
			names = append(names, levelNames[lv]+":"+p.ID)
		}
	}
	return strings.Join(names, "/")
}

// resolvePath resolves a request path to its node chain: the scope root,
// then each configured level once (unknown levels, repeated levels and
// over-long ids are skipped, as are levels without buckets). Nodes are
// created on first use; limit reports that the node limit was reached.
func (l *Ledger) resolvePath(si int32, scope string, levels []schemas.PathLevel) (path [maxPath]int32, np int, limit bool) {
	var seen [numLevels]bool
	root := l.nodeOf(si, 0, scope)
	if root == -2 {
		return path, 0, true
	}
	if root >= 0 {
		path[np] = root
		np++
	}
	seen[0] = true
	for _, p := range levels {
		lv, ok := levelCode(p.Level)
		if !ok || seen[lv] || len(p.ID) > maxStrLen {
			continue
		}
		seen[lv] = true
		ni := l.nodeOf(si, lv, p.ID)
		if ni == -2 {
			return path, 0, true
		}
		if ni >= 0 {
			path[np] = ni
			np++
		}
	}
	return path, np, false
}

// malformedReserve names the first field of ev's ReserveRequested that is
// out of its bounds, or returns "" when every field is in bounds.
func malformedReserve(ev *schemas.Event) schemas.Reason {
	rr := ev.ReserveRequested
	switch {
	case len(ev.RequestID) > maxStrLen:
		return schemas.ReasonRequestIDTooLong
	case len(rr.Path) > maxPathLen:
		return schemas.ReasonPathTooLong
	case rr.InputTokens < 0 || rr.InputTokens > maxAmount:
		return schemas.ReasonInvalidInputTokens
	case rr.OutputTokens < 0 || rr.OutputTokens > maxAmount,
		rr.MaxOutputTokens < 0 || rr.MaxOutputTokens > maxAmount:
		return schemas.ReasonInvalidOutputTokens
	case rr.CachedInputTokens < 0 || rr.CachedInputTokens > rr.InputTokens:
		return schemas.ReasonInvalidCachedTokens
	case rr.SpendMicros < 0 || rr.SpendMicros > maxAmount:
		return schemas.ReasonInvalidSpend
	case rr.MaxWaitMs < 0 || rr.MaxWaitMs > dayMs:
		return schemas.ReasonInvalidMaxWait
	case rr.DeadlineMs < 0 || rr.DeadlineMs > dayMs:
		return schemas.ReasonInvalidDeadline
	case rr.MaxAttempts < 0:
		return schemas.ReasonInvalidMaxAttempts
	}
	return ""
}

// reserve handles ReserveRequested.
func (l *Ledger) reserve(ev *schemas.Event, out []Output) []Output {
	rr := ev.ReserveRequested
	if ev.RequestID == "" {
		return out
	}
	att := ev.Attempt
	if att <= 0 {
		att = 1
	}
	fp, pathHash := fingerprint(ev)
	rh := resHash(ev.RequestID, att)
	if ri, ok := l.resIdx.get(l.st.Res, rh, ev.RequestID, att); ok {
		if l.st.Res[ri].FP == fp {
			return out // redelivery: already decided
		}
		return l.conflict(ev, att, out)
	}
	if why := malformedReserve(ev); why != "" {
		return l.refuseEv(ev, out, why, schemas.RetryRequestError)
	}
	si := l.scopeOf(ev.Scope)
	if si < 0 {
		return l.refuseEv(ev, out, schemas.ReasonUnknownScope, schemas.RetryPolicy)
	}
	ci := l.cc.defClass
	if ev.Class != "" {
		c, ok := l.cc.classOf(ev.Class)
		if !ok {
			return l.refuseEv(ev, out, schemas.ReasonUnknownClass, schemas.RetryRequestError)
		}
		ci = c
	}
	if l.cc.ent != nil {
		// Not part of the path cache: the class, priority and route vary
		// on one path.
		who := whoOf(ev, rr.Path)
		if why, holder := l.cc.ent.fault(&who, ci, rr.Priority, ev.Route); why != "" {
			return l.refuseNotEntitled(ev, out, why, holder)
		}
	}
	if l.liveRes() >= l.st.Config.ReservationsMax {
		return l.refuseEv(ev, out, schemas.ReasonLedgerFull, schemas.RetryOverload)
	}
	var path [maxPath]int32
	np, out, ok := l.pathFor(ev, si, pathHash, &path, out)
	if !ok {
		return out
	}
	ri := l.newRes(ev, att, rh, fp, si, ci, &path, np)
	r := &l.st.Res[ri]
	now := l.st.Now
	sc := &l.st.Scopes[si]

	if rr.EmergencyAdmitted {
		// The gateway already let it through: account for it, even into debt.
		r.Flags |= fEmergency
		l.grant(ri, false)
		if rr.Degraded {
			return l.emitDegraded(out, ri) // degraded.go
		}
		return l.emitGrant(out, ri, schemas.GDEmergencyAdmitted)
	}
	if r.Deadline > 0 && r.grantBy() < now {
		return l.refuseShortDeadline(ri, out)
	}
	if att > 1 {
		l.slowArm(sc) // a fallback, most likely
	}
	return l.arrive(ri, out)
}

// pathFor resolves the request's bucket path in scope si, from the path
// cache or, on a miss, checked (required levels, known ids, the node
// limit) and stored. ok false: out holds the refusal.
func (l *Ledger) pathFor(ev *schemas.Event, si int32, pathHash uint64, path *[maxPath]int32, out []Output) (np int, _ []Output, ok bool) {
	if l.paths == nil {
		l.paths = new(pathCache)
	}
	ph := pathKey(si, pathHash)
	if e, ok := l.paths.lookup(ph, si, ev.ReserveRequested.Path); ok {
		*path, np = e.nodes, int(e.np)
	} else {
		// Checked on a cache miss only: a cached path passed under the
		// same config (the cache is reset with it).
		if missing := l.missingLevels(si, ev.ReserveRequested.Path); missing != 0 {
			return 0, l.refuseMissingLevels(ev, out, missing), false
		}
		if unknown := l.unknownIDs(si, ev.ReserveRequested.Path); unknown != "" {
			n := len(out)
			out = l.refuseEv(ev, out, schemas.ReasonPathUnknownID, schemas.RetryRequestError)
			if len(out) > n {
				out[n].Decision.LimitPath = unknown
			}
			return 0, out, false
		}
		var limit bool
		*path, np, limit = l.resolvePath(si, ev.Scope, ev.ReserveRequested.Path)
		if limit {
			return 0, l.refuseEv(ev, out, schemas.ReasonNodeLimit, schemas.RetryOverload), false
		}
		l.paths.store(ph, si, ev.ReserveRequested.Path, path, np)
	}
	return np, out, true
}

// newRes allocates and fills the reservation of a ReserveRequested that
// passed every check: its needs, flags, deadline, expected service time,
// budgets and the time its wait expires. The scope's retry budget earns
// its share of a first attempt.
func (l *Ledger) newRes(ev *schemas.Event, att int32, rh uint32, fp uint64, si, ci int32, path *[maxPath]int32, np int) int32 {
	rr := ev.ReserveRequested
	ri := l.allocRes()
	r := &l.st.Res[ri]
	l.st.Seq++
	now := l.st.Now
	// Cleared, then filled field by field: a composite literal here is
	// built in a temporary and copied (the compiler cannot tell that its
	// operands do not alias *r), about 90 instructions a reservation more
	// for its 400-odd bytes (cachegrind, issue 25).
	*r = res{}
	r.RequestID, r.Attempt, r.rh, r.Node, r.Tenant, r.KeyID, r.Team = ev.RequestID, att, rh, ev.Node, ev.Tenant, ev.KeyID, pathTeam(rr.Path)
	r.Route, r.Class, r.Scope, r.ClassIdx = ev.Route, l.st.Config.Classes[ci].Name, si, ci
	r.State, r.NPath, r.Path, r.Cached, r.FP = stQueued, uint8(np), *path, rr.CachedInputTokens, fp
	r.Seq, r.Priority = l.st.Seq, max(-maxPriority, min(maxPriority, rr.Priority))
	r.EnqMs, r.FirstMs, r.MaxAtt, r.Gen, r.List, r.Prev, r.Next = now, now, rr.MaxAttempts, l.st.Gen, noIdx, noIdx, noIdx
	if r.MaxAtt == 0 {
		r.MaxAtt = l.st.Config.Retry.MaxAttempts
	}
	if rr.DeadlineMs > 0 {
		r.Deadline = now + rr.DeadlineMs
	}
	r.Need = [numDims]int64{
		dRequests: 1, dInput: rr.InputTokens, dOutput: rr.OutputTokens, dTotal: rr.InputTokens + rr.OutputTokens,
		dConcurrency: 1, dRequestsPerDay: 1, dSpend: rr.SpendMicros, dRamp: 1,
	}
	r.MaxOut = max(rr.MaxOutputTokens, rr.OutputTokens)
	if rr.Streaming {
		r.Flags |= fStreaming
	}
	if r.Deadline > 0 {
		r.SvcMs = l.expectedService(r)
		if r.SvcMs == 0 {
			// Not known here: the time an earlier attempt's ledger named
			// (ReserveRequested.ServicePriorMs; service.go).
			r.SvcMs = min(max(0, rr.ServicePriorMs), dayMs)
		}
	}
	if rr.FallbackAllowed {
		r.Flags |= fFallback
	}
	if l.st.Config.Budget != nil {
		l.budgetsOf(r, rr.Path)
	}
	l.resIdx.put(rh, ri)
	sc := &l.st.Scopes[si]
	if att == 1 {
		sc.RetryMilli = min(l.st.Config.Retry.BurstMax*1000, sc.RetryMilli+l.st.Config.Retry.RatioPermille)
	}
	maxWait := rr.MaxWaitMs
	if maxWait == 0 {
		maxWait = l.st.Config.Classes[ci].MaxWaitMs
	} else {
		r.Flags |= fOwnWait
	}
	r.ExpireMs = now + maxWait
	if r.Deadline > 0 && r.grantBy() < r.ExpireMs {
		r.ExpireMs = r.grantBy()
	}
	return ri
}

// refuseShortDeadline denies, at once, an attempt whose remaining deadline
// is shorter than its route's expected service time: granted, it would be
// sent upstream and abandoned before its answer (service.go).
func (l *Ledger) refuseShortDeadline(ri int32, out []Output) []Output {
	l.finish(ri, stDenied)
	l.st.Stats.Denied++
	r := &l.st.Res[ri]
	cl := &l.st.Config.Classes[r.ClassIdx]
	return l.emit(out, r, schemas.Decision{
		Status: schemas.StatusDenied, Reason: schemas.ReasonDeadlineBelowService,
		GatewayDecision: schemas.GDRejectedLocally, RetryClass: schemas.RetryDeadline,
		Needed: r.SvcMs, Available: max(0, r.Deadline-l.st.Now),
		FallbackAllowed: cl.Overload == OverloadFallback && r.Flags&fFallback != 0,
	})
}

// arrive decides a new reservation (first attempt or retry): granted at
// once if every bucket covers it and no earlier waiter needs the same
// capacity; otherwise queued, or denied when waiting cannot help.
func (l *Ledger) arrive(ri int32, out []Output) []Output {
	r := &l.st.Res[ri]
	sc := &l.st.Scopes[r.Scope]
	var v verdict
	if len(sc.Queue) == 0 && r.NotBefore <= l.st.Now {
		if l.grantFast(ri) {
			return l.emitGrant(out, ri, schemas.GDAdmitted)
		}
		v = l.check(r, false, false)
		if v.ok {
			l.grant(ri, v.borrowed)
			return l.emitGrant(out, ri, schemas.GDAdmitted)
		}
		l.waitPaced(r)
		l.enqueue(ri)
	} else {
		l.waitPaced(r)
		l.enqueue(ri)
		var granted bool
		out, v, granted = l.pump(r.Scope, out, ri)
		if granted {
			return out
		}
	}
	r = &l.st.Res[ri]
	if r.NotBefore > l.st.Now && v.why == whyNone {
		v.why, v.fitMs, v.limNode = whyBackoff, r.NotBefore, noIdx
	}
	if v.why == whyCooldown {
		// A deadline before the cooldown's end is refused by decide
		// (deadline_exceeded); otherwise the wait for the provider does
		// not count against the max wait.
		l.waitOutCooldown(r, v.fitMs)
	}
	d, deny := l.decide(r, &v)
	if !deny {
		r.FitMs = v.fitMs
		l.st.Stats.Queued++
		// The pump that computes wake times may not have run (empty queue).
		for _, w := range [2]int64{v.fitMs, r.ExpireMs} {
			if w > l.st.Now && (sc.WakeMs <= l.st.Now || w < sc.WakeMs) {
				sc.WakeMs = w
			}
		}
		return l.emit(out, r, d)
	}
	l.dequeue(ri)
	l.finish(ri, stDenied)
	l.st.Stats.Denied++
	out = l.emit(out, r, d)
	if len(sc.Queue) > 0 {
		// Its failed check may have held back later waiters in this pump.
		sc.Dirty = true
	}
	return out
}

// decide turns the verdict of a reservation that was not granted into a
// queued decision or (deny=true) a denial.
func (l *Ledger) decide(r *res, v *verdict) (d schemas.Decision, deny bool) {
	now := l.st.Now
	cl := &l.st.Config.Classes[r.ClassIdx]
	d = schemas.Decision{Status: schemas.StatusQueued, GatewayDecision: schemas.GDQueued, RetryClass: schemas.RetryCapacity}
	if v.limNode >= 0 {
		d.LimitPath = l.limitPath(r, v.limNode)
		d.LimitDimension = dimension(v.limDim)
		d.Needed, d.Available = v.needed, v.avail
	}
	if v.bud > 0 {
		// The budget and the lease that limited it (budgets.go).
		d.LimitPath = "budget:" + r.Bud[v.bud-1].ID + "/lease:" + l.st.Scopes[r.Scope].Name
		d.LimitDimension = l.budgetDimension(r, r.Bud[v.bud-1].ID)
		d.Needed, d.Available = v.needed, v.avail
	}
	if v.fitMs > now {
		d.RetryAfterMs = v.fitMs - now
	}
	d.Reason = whyReason[v.why]
	if v.why == whyCooldown && v.overload {
		d.Reason = schemas.ReasonCooldownOverloaded
		d.RetryClass = schemas.RetryOverload
	}
	refuse := func(reason schemas.Reason, class schemas.RetryClass, gd schemas.GatewayDecision) {
		d.Status, d.Reason, d.RetryClass, d.GatewayDecision = schemas.StatusDenied, reason, class, gd
		deny = true
	}
	switch {
	case v.why == whyNever:
		refuse(schemas.ReasonExceedsCapacity, schemas.RetryRequestError, schemas.GDRejectedLocally)
		d.RetryAfterMs = 0
	case v.why == whyBudgetOut:
		refuse(schemas.ReasonBudgetExhausted, schemas.RetryPolicy, schemas.GDRejectedPolicy)
		d.RetryAfterMs = 0
	case v.why == whyPolicy || (v.policyKind && v.fitMs > r.ExpireMs):
		refuse(schemas.ReasonQuotaExhausted, schemas.RetryPolicy, schemas.GDRejectedPolicy)
	case r.ExpireMs <= now:
		refuse(schemas.ReasonNoCapacity, d.RetryClass, schemas.GDRejectedLocally)
	case int(l.st.Scopes[r.Scope].Depth[r.ClassIdx]) > cl.MaxDepth:
		refuse(schemas.ReasonQueueFull, schemas.RetryOverload, schemas.GDRejectedLocally)
		d.FallbackAllowed = cl.Overload == OverloadFallback && r.Flags&fFallback != 0
	case v.fitMs > r.ExpireMs:
		if r.Deadline > 0 && v.fitMs > r.grantBy() {
			refuse(schemas.ReasonDeadlineExceeded, schemas.RetryDeadline, schemas.GDRejectedLocally)
			if v.fitMs <= r.Deadline {
				// It would fit in time, but not in time to be answered.
				d.Reason = schemas.ReasonDeadlineBelowService
			}
		} else {
			refuse(schemas.ReasonWaitExceedsMax, d.RetryClass, schemas.GDRejectedLocally)
		}
		d.FallbackAllowed = cl.Overload == OverloadFallback && r.Flags&fFallback != 0
	}
	return d, deny
}

func (l *Ledger) emitGrant(out []Output, ri int32, gd schemas.GatewayDecision) []Output {
	r := &l.st.Res[ri]
	ttl := l.st.Config.HoldTTLMs
	if r.Flags&fStreaming != 0 {
		ttl = l.st.Config.StreamHoldTTLMs
	}
	out, d := l.emitTo(out, r)
	d.Status, d.Borrowed, d.GatewayDecision, d.HoldTTLMs = schemas.StatusGranted, r.Flags&fBorrowed != 0, gd, ttl
	if gd != schemas.GDEmergencyAdmitted { // an emergency admission was sent before the ledger saw it
		d.SendAtMs = l.sendAt(r)
	}
	if l.cc.anyShadow {
		d.Shadow = l.shadowGrant(ri)
	}
	return out
}

// ---- check and grant ----

// Why a reservation was not granted.
const (
	whyNone uint8 = iota
	whyCapacity
	whyNever
	whyPolicy
	whyCooldown
	whyBlocked
	whyReclaim
	whyBackoff
	whyBudgetLease // a budget's lease cannot cover it yet (budgets.go)
	whyBudgetOut   // a budget has less left than it costs
	whySlowStart   // the scope's slow-start window is full (learn.go)
)

var whyReason = [...]schemas.Reason{
	whyNone:        "",
	whyCapacity:    schemas.ReasonCapacity,
	whyNever:       schemas.ReasonExceedsCapacity,
	whyPolicy:      schemas.ReasonQuotaExhausted,
	whyCooldown:    schemas.ReasonCooldownLimited,
	whyBlocked:     schemas.ReasonWaitingBehind,
	whyReclaim:     schemas.ReasonReclaimed,
	whyBackoff:     schemas.ReasonRetryBackoff,
	whyBudgetLease: schemas.ReasonBudgetLease,
	whyBudgetOut:   schemas.ReasonBudgetExhausted,
	whySlowStart:   schemas.ReasonCapacity,
}

type verdict struct {
	ok         bool
	borrowed   bool
	why        uint8
	overload   bool
	policyKind bool // the limiting bucket is a fixed or rolling window
	limDim     uint8
	limNode    int32
	needed     int64
	avail      int64
	fitMs      int64 // when it may fit; 0 = only an event can free capacity
	bud        uint8 // 1 + the index of the budget that limited it (res.Bud); 0 none
}

// check evaluates whether r could be granted now. In a pump (marks=true),
// buckets marked by an earlier waiter block r, and buckets r lacks are
// marked for later waiters. reclaim forbids borrowing.
func (l *Ledger) check(r *res, marks, reclaim bool) verdict {
	now := l.st.Now
	sc := &l.st.Scopes[r.Scope]
	v := verdict{limNode: noIdx}
	if sc.CoolPolicy > now {
		v.why, v.fitMs = whyPolicy, sc.CoolPolicy
		return v
	}
	cool := sc.CoolAll
	for d := 0; d < numDims; d++ {
		if r.Need[d] > 0 && sc.CoolDim[d] > cool {
			cool = sc.CoolDim[d]
		}
	}
	if cool > now {
		v.why, v.fitMs = whyCooldown, cool
		v.overload = sc.CoolAll == cool && sc.CoolAllOverload
		return v
	}
	if hold := l.stormHold(r, sc); hold > now {
		v.why, v.fitMs = whyCooldown, hold
		return v
	}
	if sc.Slow > 0 && sc.Flight >= sc.Slow {
		// Slow start (learn.go, slowArm): only an answer frees it.
		v.why = whySlowStart
		return v
	}
	if l.checkBuckets(r, marks, &v) {
		return v // never: larger than a bucket can hold
	}
	if v.why != whyNone {
		return v
	}
	if v.borrowed && reclaim {
		v.why = whyReclaim
		return v
	}
	if len(r.Bud) > 0 {
		if bv, ok := l.budgetCheck(r); !ok {
			bv.borrowed = v.borrowed
			return bv
		}
	}
	v.ok = true
	return v
}

// checkBuckets is check's walk over the buckets of r's path: refill,
// impossibility, borrowing, capacity, each bucket's fit time into v. It
// reports true when a bucket can never hold r (v says which). A capacity
// whose fit time is unknown leaves v.fitMs 0.
func (l *Ledger) checkBuckets(r *res, marks bool, v *verdict) (never bool) {
	now := l.st.Now
	unknown := false
	// One pass: refill, impossibility, borrowing, capacity. A second pass
	// applies borrow reserves when the grant turned out to be borrowed.
	// The loops below run for every bucket of every request: the slices
	// are held in locals (nothing here appends to them) so that their
	// headers are not reloaded through l on every bucket.
	nodes, buckets, specs := l.st.Nodes, l.st.Buckets, l.cc.specs
	for pass := 0; pass < 2; pass++ {
		withReserve := pass == 1
		for _, ni := range r.Path[:r.NPath] {
			n := &nodes[ni]
			bs := buckets[n.First : n.First+n.N]
			for k := range bs {
				b := &bs[k]
				sp := &specs[b.Spec]
				var reserve int64
				if withReserve {
					if sp.reserve == 0 {
						continue
					}
					reserve = sp.reserve
				} else {
					l.refill(b, sp, now)
				}
				a := sp.amount(r)
				if a <= 0 {
					continue
				}
				if a > sp.maxUnits {
					v.why, v.limNode, v.limDim, v.needed, v.avail = whyNever, ni, sp.dim, a, sp.maxUnits
					return true
				}
				if sp.guaranteed > 0 && b.Base < min(a*sp.period, sp.gBurst) {
					// The baseline, like the level, covers a request
					// larger than its window when it is full (fits).
					v.borrowed = true
				}
				fit := l.fits(b, sp, a, reserve)
				var slideAt int64
				if fit && sp.slide && !withReserve {
					// A remaining-only bucket's trailing window (slide.go).
					if slideAt = l.slideFitAt(ni, sp, a); slideAt > now {
						fit = false
					}
				}
				if fit {
					if marks && b.mark == l.epoch && v.why == whyNone {
						v.why, v.limNode, v.limDim, v.needed, v.avail = whyBlocked, ni, sp.dim, a, l.available(b, sp)
					}
					continue
				}
				if v.why == whyNone || v.why == whyBlocked {
					v.why, v.limNode, v.limDim, v.needed, v.avail = whyCapacity, ni, sp.dim, a, l.available(b, sp)
					v.policyKind = sp.kind == kFixed || sp.kind == kRolling
				}
				if marks {
					b.mark = l.epoch
				}
				if f := max(l.fitAt(b, sp, a, reserve, now), slideAt); f == 0 {
					unknown = true
				} else if f > v.fitMs {
					v.fitMs = f
				}
			}
		}
		if !v.borrowed || !l.cc.anyReserve {
			break
		}
	}
	if v.why == whyCapacity && unknown {
		v.fitMs = 0
	}
	return false
}

// stormHold returns when a waiter that the storm hold keeps back may go
// (0: it is not held). While the scope recovers from a provider 429, a
// waiter goes once its slack is down to RecoverSlackMs, room for
// StormHoldAttempts attempts a Retry-After apart, or when the recovery
// ends. Slack is the time to its deadline, or to its queue expiry if it has
// none. Least slack goes first: the rest would meet the same storm, and
// each rejection costs a retry and closes the scope again.
func (l *Ledger) stormHold(r *res, sc *scopeState) int64 {
	now := l.st.Now
	if sc.RecoverMs <= now {
		return 0
	}
	due := r.grantBy()
	if due == 0 {
		due = r.ExpireMs
		if r.Flags&fOwnWait == 0 {
			// Waiting out the provider does not count against the
			// class's max wait (waitOutCooldown), so the expiry this
			// hold leads to is the recovery's end plus that wait. Taken
			// from ExpireMs alone, each pump's hold moved the expiry on
			// and the next pump's hold with it: the same pump run twice
			// decided differently (TestSimAppliedTwice).
			due = max(due, sc.RecoverMs+l.st.Config.Classes[r.ClassIdx].MaxWaitMs)
		}
	}
	if due-now <= sc.RecoverSlackMs {
		return 0
	}
	return min(sc.RecoverMs, due-sc.RecoverSlackMs)
}

// grant debits every bucket on r's path (all of them: the caller checked
// that each covers its amount, or forces an emergency admission).
func (l *Ledger) grant(ri int32, borrowed bool) {
	r := &l.st.Res[ri]
	now := l.st.Now
	emergency := r.Flags&fEmergency != 0
	nodes, buckets, specs := l.st.Nodes, l.st.Buckets, l.cc.specs // see check
	for _, ni := range r.Path[:r.NPath] {
		n := &nodes[ni]
		bs := buckets[n.First : n.First+n.N]
		for k := range bs {
			b := &bs[k]
			sp := &specs[b.Spec]
			if emergency {
				l.refill(b, sp, now)
			}
			a := sp.amount(r)
			if a <= 0 {
				continue
			}
			b.Held += a
			if sp.kind == kToken {
				// debit's token case, inline: the hot path.
				d := min(a, sp.maxUnits) * sp.period
				b.Level = clampSat(b.Level - d)
				if sp.guaranteed > 0 && !borrowed {
					b.Base -= d
				}
				if sp.slide {
					l.slideCharge(ni, sp, min(a, sp.maxUnits))
				}
				continue
			}
			l.debit(b, sp, min(a, sp.maxUnits), now)
			if sp.guaranteed > 0 && !borrowed {
				b.Base -= min(a, sp.maxUnits) * sp.period
			}
			if sp.kind == kRamp {
				l.st.Ramps[b.Ext].Grants[0]++
			}
		}
	}
	if len(r.Bud) > 0 {
		l.budgetCharge(r)
	}
	l.granted(ri, borrowed)
}

// grantFast is arrive's fast path for a reservation with nobody waiting
// ahead of it: one pass over the path refills each bucket, checks that it
// covers its amount and debits it, which is what check followed by grant
// does in two (the buckets of a path are distinct, so the order of the
// per-bucket steps does not matter). It handles the common case only: no
// cooldown, no borrowing, token, fixed and concurrency buckets. On anything
// else, or a bucket that cannot cover its amount, it gives back what it
// debited (exactly: a covered debit never saturates) and returns false,
// leaving the decision to check and grant; the refills it did are the ones
// check does first, and refilling again at the same time changes nothing.
func (l *Ledger) grantFast(ri int32) bool {
	r := &l.st.Res[ri]
	now := l.st.Now
	sc := &l.st.Scopes[r.Scope]
	if sc.CoolPolicy > now || sc.CoolAll > now || sc.RecoverMs > now || (sc.Slow > 0 && sc.Flight >= sc.Slow) {
		return false
	}
	for d := range numDims {
		if r.Need[d] > 0 && sc.CoolDim[d] > now {
			return false
		}
	}
	if !l.debitFast(r, !l.cc.anyArrivalRule) {
		return false
	}
	if len(r.Bud) > 0 {
		// Every bucket covered it; its budgets' leases must too, else
		// the debits go back and check decides (budget_lease, exhausted).
		if _, ok := l.budgetCheck(r); !ok {
			if r.NPath > 0 {
				last := int(r.NPath) - 1
				l.ungrantFast(r, last, int(l.st.Nodes[r.Path[last]].N))
			}
			return false
		}
		l.budgetCharge(r)
	}
	l.granted(ri, false)
	return true
}

// debitFast is grantFast's loop over r's path: it debits every bucket or,
// on the first that cannot cover its amount (or is of a kind it does not
// handle), gives back what it debited and returns false. plain says no
// bucket of the document is max_tokens_on_arrival (compiled.anyArrivalRule
// false). A function of its own, apart from grantFast's cooldown checks,
// so that the loop's values keep their registers (see settle): about 90
// instructions fewer per grant (cachegrind, issue 25).
func (l *Ledger) debitFast(r *res, plain bool) bool {
	nodes, buckets, specs := l.st.Nodes, l.st.Buckets, l.cc.specs // see check
	now := l.st.Now
	for i, ni := range r.Path[:r.NPath] {
		n := &nodes[ni]
		bs := buckets[n.First : n.First+n.N]
		for k := range bs {
			b := &bs[k]
			sp := &specs[b.Spec]
			if sp.kind == kToken && !sp.slide {
				// The token case below, on a branch of its own: the
				// most common bucket, tested and debited with one
				// decision each way (about 170 instructions a grant
				// fewer on a 24-bucket path, cachegrind, issue 25).
				refillToken(b, sp, now)
				var a int64
				if plain {
					a = sp.amountPlain(r)
				} else {
					a = sp.amount(r)
				}
				if a <= 0 {
					continue
				}
				d := a * sp.period
				// A request larger than the window needs it full (fits).
				if a > sp.maxUnits || b.Level < min(d, sp.burst) || (sp.guaranteed != 0 && b.Base < min(d, sp.gBurst)) {
					l.ungrantFast(r, i, k)
					return false
				}
				b.Level -= d
				if sp.guaranteed > 0 {
					b.Base -= d
				}
				b.Held += a
				continue
			}
			// Refill first, whatever the amount, as check does.
			switch {
			case sp.slide:
				// A trailing window to check (slide.go): check decides.
				l.ungrantFast(r, i, k)
				return false
			case sp.kind == kToken:
				refillToken(b, sp, now)
			case sp.kind == kConcurrency || sp.kind == kFixed:
				l.refill(b, sp, now)
			default:
				l.ungrantFast(r, i, k)
				return false
			}
			var a int64
			if plain {
				a = sp.amountPlain(r)
			} else {
				a = sp.amount(r)
			}
			if a <= 0 {
				continue
			}
			ok := a <= sp.maxUnits
			if ok && sp.kind == kToken {
				d := a * sp.period
				// A request larger than the window needs it full (fits).
				if ok = b.Level >= min(d, sp.burst) && (sp.guaranteed == 0 || b.Base >= min(d, sp.gBurst)); ok {
					b.Level -= d
					if sp.guaranteed > 0 {
						b.Base -= d
					}
				}
			} else if ok {
				if ok = b.Level >= a; ok {
					b.Level -= a
				}
			}
			if !ok {
				l.ungrantFast(r, i, k)
				return false
			}
			b.Held += a
		}
	}
	return true
}

// ungrantFast gives back the debits grantFast made on r's path before
// bucket k of path node i.
func (l *Ledger) ungrantFast(r *res, i, k int) {
	nodes, buckets, specs := l.st.Nodes, l.st.Buckets, l.cc.specs
	for pi, ni := range r.Path[:i+1] {
		n := &nodes[ni]
		bs := buckets[n.First : n.First+n.N]
		if pi == i {
			bs = bs[:k]
		}
		for k := range bs {
			b := &bs[k]
			sp := &specs[b.Spec]
			a := sp.amount(r)
			if a <= 0 {
				continue
			}
			b.Held -= a
			if sp.kind == kToken {
				b.Level += a * sp.period
				if sp.guaranteed > 0 {
					b.Base += a * sp.period
				}
			} else {
				b.Level += a
			}
		}
	}
}

// granted moves r to granted once its path is debited.
func (l *Ledger) granted(ri int32, borrowed bool) {
	r := &l.st.Res[ri]
	now := l.st.Now
	r.State = stGranted
	r.GrantMs = now
	r.Gen = l.st.Gen
	l.st.Scopes[r.Scope].Flight++
	if borrowed {
		r.Flags |= fBorrowed
		l.st.Stats.Borrowed++
	}
	ttl := l.st.Config.HoldTTLMs
	if r.Flags&fStreaming != 0 {
		ttl = l.st.Config.StreamHoldTTLMs
	}
	r.HoldExpMs = now + ttl
	l.holdPush(ri, ttl)
	l.st.Stats.Granted++
	if !l.st.Config.Learn.Off {
		l.learnGrant(r, now)
	}
}

// settle ends a grant: each bucket gets back its estimate minus the actual
// usage (negative: debt) and its held amount drops by the estimate. A
// max_tokens_on_arrival bucket keeps its whole charge when the attempt was
// sent (the provider counted it on arrival): it only takes overage as
// debt. sent is false when the attempt never reached the provider's
// counter (provider-rejected, released without usage, retried unsettled).
func (l *Ledger) settle(ri int32, actual *[numDims]int64, cached int64, state uint8, sent bool) {
	r := &l.st.Res[ri]
	now := l.st.Now
	l.holdRemove(ri)
	if len(r.Bud) > 0 {
		l.budgetSettle(r, actual, sent)
	}
	if l.cc.anyArrivalRule {
		l.settleRules(r, actual, cached, sent, now)
	} else {
		l.settlePlain(r, actual, cached, now)
	}
	if r.Flags&fShadowHeld != 0 {
		l.shadowSettle(r, actual, cached, sent)
	}
	l.finish(ri, state)
	sc := &l.st.Scopes[r.Scope]
	sc.Flight = max(0, sc.Flight-1)
	sc.Dirty = true
}

// settlePlain is settle's loop over r's path for a document without a
// max_tokens_on_arrival or refund-unsent bucket. A function of its own
// (as debitFast is), apart from settle's hold, budget, shadow and scope
// bookkeeping, so that the loop's values keep their registers: inside
// settle the compiler reloaded several of them from the stack on every
// bucket (issue 25). With the rules' branches in the same loop it cost
// about fifteen instructions more per bucket (cachegrind), hence
// settleRules.
func (l *Ledger) settlePlain(r *res, actual *[numDims]int64, cached, now int64) {
	nodes, buckets, specs := l.st.Nodes, l.st.Buckets, l.cc.specs // see check
	for _, ni := range r.Path[:r.NPath] {
		n := &nodes[ni]
		bs := buckets[n.First : n.First+n.N]
		for k := range bs {
			b := &bs[k]
			if b.Gen > r.Gen {
				continue // created after the grant: never debited
			}
			sp := &specs[b.Spec]
			a := sp.amountPlain(r)
			if a <= 0 {
				continue
			}
			act := actual[sp.dim]
			if sp.exclCached {
				act = max(0, act-cached)
			}
			b.Held -= a
			if sp.kind == kToken {
				// refill and credit's token case, inline: the hot path.
				refillToken(b, sp, now)
				if delta := a - act; delta != 0 {
					b.Level = min(sp.burst, clampSat(b.Level+mulSat(delta, sp.period)))
				}
				continue
			}
			l.refill(b, sp, now)
			l.credit(b, sp, a-act, r.GrantMs, now)
		}
	}
}

// settleRules is settle's loop over r's path for a document with a
// max_tokens_on_arrival or refund-unsent bucket (compiled.anyArrivalRule).
func (l *Ledger) settleRules(r *res, actual *[numDims]int64, cached int64, sent bool, now int64) {
	nodes, buckets, specs := l.st.Nodes, l.st.Buckets, l.cc.specs // see check
	for _, ni := range r.Path[:r.NPath] {
		n := &nodes[ni]
		bs := buckets[n.First : n.First+n.N]
		for k := range bs {
			b := &bs[k]
			if b.Gen > r.Gen {
				continue // created after the grant: never debited
			}
			sp := &specs[b.Spec]
			a := sp.amount(r)
			if a <= 0 {
				continue
			}
			act := actual[sp.dim]
			if sp.exclCached {
				act = max(0, act-cached)
			}
			if sp.arrival && sent {
				act = max(act, a)
			}
			if sp.refundUnsent && !sent {
				act = 0
			}
			b.Held -= a
			if sp.kind == kToken {
				refillToken(b, sp, now)
				if delta := a - act; delta != 0 {
					b.Level = min(sp.burst, clampSat(b.Level+mulSat(delta, sp.period)))
				}
				continue
			}
			l.refill(b, sp, now)
			l.credit(b, sp, a-act, r.GrantMs, now)
		}
	}
}

// ---- hold TTL lists ----

func (l *Ledger) holdPush(ri int32, ttl int64) {
	li := -1
	for i := range l.st.Lists {
		if l.st.Lists[i].TTL == ttl {
			li = i
			break
		}
	}
	if li < 0 {
		l.st.Lists = append(l.st.Lists, holdList{TTL: ttl, Head: noIdx, Tail: noIdx})
		li = len(l.st.Lists) - 1
	}
	hl := &l.st.Lists[li]
	r := &l.st.Res[ri]
	r.List, r.Prev, r.Next = int32(li), hl.Tail, noIdx
	if hl.Tail != noIdx {
		l.st.Res[hl.Tail].Next = ri
	} else {
		hl.Head = ri
	}
	hl.Tail = ri
}

func (l *Ledger) holdRemove(ri int32) {
	r := &l.st.Res[ri]
	if r.List < 0 {
		return
	}
	hl := &l.st.Lists[r.List]
	if r.Prev != noIdx {
		l.st.Res[r.Prev].Next = r.Next
	} else {
		hl.Head = r.Next
	}
	if r.Next != noIdx {
		l.st.Res[r.Next].Prev = r.Prev
	} else {
		hl.Tail = r.Prev
	}
	r.List, r.Prev, r.Next = noIdx, noIdx, noIdx
}

// expireHolds expires grants held past their TTL without reconcile or
// release (abandoned): their full estimate stays charged.
func (l *Ledger) expireHolds(out []Output) []Output {
	for li := range l.st.Lists {
		for {
			h := l.st.Lists[li].Head
			if h == noIdx || l.st.Res[h].HoldExpMs > l.st.Now {
				break
			}
			r := &l.st.Res[h]
			actual := r.Need
			actual[dConcurrency] = 0
			l.settle(h, &actual, r.Cached, stExpired, true)
			l.st.Stats.Abandoned++
			out = l.emit(out, r, schemas.Decision{
				Status: schemas.StatusHoldExpired, Reason: schemas.ReasonHoldAbandoned,
				GatewayDecision: admittedGD(r), Borrowed: r.Flags&fBorrowed != 0,
			})
		}
	}
	return out
}

func admittedGD(r *res) schemas.GatewayDecision {
	switch {
	case r.Flags&fDegraded != 0:
		return schemas.GDDegradedAdmitted
	case r.Flags&fEmergency != 0:
		return schemas.GDEmergencyAdmitted
	case r.Flags&fWasQueued != 0:
		return schemas.GDQueuedThenAdmitted
	}
	return schemas.GDAdmitted
}

// ---- lifecycle events ----

func (l *Ledger) lookup(ev *schemas.Event) (int32, bool) {
	att := ev.Attempt
	if att <= 0 {
		att = 1
	}
	return l.resFind(ev.RequestID, att)
}

// reconcile replaces a grant's estimate with the actual usage.
func (l *Ledger) reconcile(ev *schemas.Event, out []Output) []Output {
	ri, ok := l.lookup(ev)
	if !ok {
		return out
	}
	r := &l.st.Res[ri]
	if neverGranted(r) {
		l.chargeUngranted(ri, ev.Reconciled) // see debt.go
	}
	switch r.State {
	case stGranted:
		rc := ev.Reconciled
		in := max(0, min(rc.InputTokens, maxAmount))
		o := max(0, min(rc.OutputTokens, maxAmount))
		cached := max(0, min(rc.CachedInputTokens, in))
		actual := [numDims]int64{
			dRequests: 1, dInput: in, dOutput: o, dTotal: in + o, dConcurrency: 0,
			dRequestsPerDay: 1, dSpend: max(0, min(rc.SpendMicros, maxAmount)), dRamp: 1,
		}
		if l.cc.anyRamp {
			l.recordLatency(r, rc.TotalMs)
		}
		if rc.TotalMs > 0 {
			// recordService ignores a reconcile without a timing; the
			// test here saves the call on the hot path.
			l.recordService(r, rc.TotalMs, rc.FirstByteMs, o, rc.HTTPStatus, rc.Partial)
		}
		if rc.HTTPStatus >= 200 && rc.HTTPStatus < 300 {
			l.learnSuccess(r)
			slowAccepted(&l.st.Scopes[r.Scope])
		}
		l.settle(ri, &actual, cached, stReconciled, true)
		l.st.Stats.Reconciled++
	case stQueued:
		return l.cancel(ri, out)
	}
	return out
}

// release gives back a grant without usage (or with the partial usage
// given), or cancels a queued reservation.
func (l *Ledger) release(ev *schemas.Event, out []Output) []Output {
	ri, ok := l.lookup(ev)
	if !ok {
		return out
	}
	r := &l.st.Res[ri]
	switch r.State {
	case stGranted:
		rl := ev.Released
		in := max(0, min(rl.InputTokens, maxAmount))
		o := max(0, min(rl.OutputTokens, maxAmount))
		actual := [numDims]int64{dRequests: 1, dInput: in, dOutput: o, dTotal: in + o, dRequestsPerDay: 1, dRamp: 1}
		if in+o > 0 {
			actual[dSpend] = r.Need[dSpend]
		}
		// An attempt abandoned in flight (its client went away, or its
		// deadline passed, during the upstream call) reached the
		// provider, which counted it on arrival: taken as unsent, a
		// max_tokens_on_arrival bucket gave its whole charge back and
		// the next grant went into a window the provider had already
		// spent (noisy-neighbor-handwritten's Azure fallback, whose
		// late attempts are mostly abandoned).
		inFlight := rl.Reason == schemas.ReasonClientDisconnect || rl.Reason == schemas.ReasonDeadline
		l.settle(ri, &actual, 0, stReleased, in+o > 0 || inFlight)
		l.st.Stats.Released++
	case stQueued:
		return l.cancel(ri, out)
	}
	return out
}

func (l *Ledger) cancel(ri int32, out []Output) []Output {
	l.dequeue(ri)
	l.finish(ri, stCancelled)
	l.st.Stats.Cancelled++
	r := &l.st.Res[ri]
	return l.emit(out, r, schemas.Decision{
		Status: schemas.StatusCancelled, Reason: schemas.ReasonReleasedWhileQueued,
		GatewayDecision: schemas.GDQueued, RetryClass: schemas.RetryRequestError,
	})
}

func (l *Ledger) recordLatency(r *res, totalMs int64) {
	for i := 0; i < int(r.NPath); i++ {
		n := &l.st.Nodes[r.Path[i]]
		for bi := n.First; bi < n.First+n.N; bi++ {
			b := &l.st.Buckets[bi]
			if sp := &l.cc.specs[b.Spec]; sp.kind == kRamp {
				rampRoll(&l.st.Ramps[b.Ext], l.st.Now, sp.period)
				l.st.Ramps[b.Ext].Lat[0][latBin(max(0, totalMs))]++
			}
		}
	}
}
