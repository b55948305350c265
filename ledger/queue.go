package ledger

import (
	"github.com/sluice-dev/sluice/schemas"
)

// Queue order. Each scope has one queue sorted by (Key, Seq). A key is a
// virtual-clock finish time in µs (WFQ between tenants: a tenant's
// consecutive queued requests are spaced FairCostMs/weight apart, starting
// no earlier than now) plus the class's AgeOffsetMs (aging: a batch request
// queued X ms ago outranks an interactive one arriving now once X exceeds
// the offset difference) minus Priority×PriorityStepMs. Keys never change
// after enqueue, so the order is static and replayable. The pump visits
// waiters in key order except where deadline rescue defers aged work behind
// a higher class that cannot wait (pumpPass).

func (l *Ledger) queueKey(r *res) int64 {
	sc := &l.st.Scopes[r.Scope]
	cfg := &l.st.Config
	ci, _ := l.cc.scopeFor(sc.Name)
	w := l.cc.scopes[ci].weight(r.Tenant)
	cost := max(1, cfg.FairCostMs*1000/w)
	nowUs := l.st.Now * 1000
	fk := flowKey{r.ClassIdx, r.Tenant}
	start := max(nowUs, sc.flows[fk])
	sc.flows[fk] = start + cost
	if len(sc.flows) > 2*sc.flowsPruned+1024 {
		// Flows whose finish time has passed are equivalent to absent ones.
		for k, v := range sc.flows {
			if v <= nowUs {
				delete(sc.flows, k)
			}
		}
		sc.flowsPruned = len(sc.flows)
	}
	return start + cost + cfg.Classes[r.ClassIdx].AgeOffsetMs*1000 - int64(r.Priority)*cfg.PriorityStepMs*1000
}

func (l *Ledger) less(a, b int32) bool {
	ra, rb := &l.st.Res[a], &l.st.Res[b]
	if ra.Key != rb.Key {
		return ra.Key < rb.Key
	}
	return ra.Seq < rb.Seq
}

// enqueue inserts a reservation into its scope's queue.
func (l *Ledger) enqueue(ri int32) {
	r := &l.st.Res[ri]
	r.State = stQueued
	r.Key = l.queueKey(r)
	sc := &l.st.Scopes[r.Scope]
	lo, hi := 0, len(sc.Queue)
	for lo < hi {
		m := (lo + hi) / 2
		if l.less(sc.Queue[m], ri) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	sc.Queue = append(sc.Queue, 0)
	copy(sc.Queue[lo+1:], sc.Queue[lo:])
	sc.Queue[lo] = ri
	sc.Depth[r.ClassIdx]++
}

// dequeue removes a reservation from its scope's queue if it is there.
func (l *Ledger) dequeue(ri int32) {
	r := &l.st.Res[ri]
	sc := &l.st.Scopes[r.Scope]
	for i, q := range sc.Queue {
		if q == ri {
			l.removeAt(sc, i)
			return
		}
	}
}

func (l *Ledger) removeAt(sc *scopeState, i int) {
	ri := sc.Queue[i]
	copy(sc.Queue[i:], sc.Queue[i+1:])
	sc.Queue = sc.Queue[:len(sc.Queue)-1]
	if c := l.st.Res[ri].ClassIdx; int(c) < len(sc.Depth) {
		sc.Depth[c]--
	}
}

// pumpAll pumps every scope whose queue may have changed or whose wake time
// has come.
func (l *Ledger) pumpAll(out []Output) []Output {
	for i := range l.st.Scopes {
		sc := &l.st.Scopes[i]
		if len(sc.Queue) == 0 {
			sc.Dirty, sc.WakeMs = false, 0
			continue
		}
		if sc.Dirty || (sc.WakeMs > 0 && l.st.Now >= sc.WakeMs) {
			out, _, _ = l.pump(int32(i), out, noIdx)
		}
	}
	return out
}

// pump walks a scope's queue in order: it expires waiters past their max
// wait, grants those every bucket can cover, and lets a waiter that cannot
// be covered hold back later waiters that need the same bucket (marks), so
// capacity goes to the earliest key first. Borrowed grants are refused while
// a non-borrowing waiter or a higher class waits (reclaim). arrival, if not
// -1, is a reservation that arrived with this event: its verdict is
// returned, and its grant is reported as admitted rather than
// queued_then_admitted.
func (l *Ledger) pump(si int32, out []Output, arrival int32) ([]Output, verdict, bool) {
	// Pass 1 grants only what needs no borrowing. Only if no waiter within
	// its baseline is left does pass 2 let borrowers in (reclaim).
	out, av, granted, borrowers, plain := l.pumpPass(si, out, arrival, false)
	if borrowers && !plain {
		var av2 verdict
		var g2 bool
		out, av2, g2, _, _ = l.pumpPass(si, out, arrival, true)
		if !granted {
			av, granted = av2, g2
		}
	}
	return out, av, granted
}

// pumpWalk is one pass's running state (see pumpPass).
type pumpWalk struct {
	allowBorrow, granted, borrowers, plainWaiting bool
	guard                                         bool // deferral is off in this round (RescueMax reached)
	av                                            verdict
	arrival                                       int32
	wake                                          int64
	minWaitingOffset                              int64 // smallest class age offset among waiters; -1 none
	backlog                                       bool  // a waiter visited so far waits out a provider pause
}

func (w *pumpWalk) setWake(t, now int64) {
	if t > now && (w.wake == 0 || t < w.wake) {
		w.wake = t
	}
}

// pumpPass walks the scope's queue once. The order is the queue's (key)
// order, with one exception, deadline rescue: a waiter W that aging put
// ahead of a waiter U of a higher class (smaller age offset) is deferred,
// i.e. visited after every waiter that is not deferred, when
// U.expiry + U.offset < W.expiry + W.offset. With the usual offsets that is
// every fresh interactive waiter against aged agent or batch work: the
// older request could still wait, or its class's slack counts for less by
// the difference of the offsets, and the interactive one cannot. Bucket
// marks carry over from one round of the walk to the next, so a deferred
// waiter takes no capacity that an earlier visited waiter was short of.
// The scope counts rescues (grants made while a deferred waiter was ahead
// in key order; a grant in key order resets the count); after RescueMax of
// them in a row deferral is off and key order holds until a grant resets
// the count: the starvation guard, which keeps at least one in RescueMax+1
// contested grants for the aged work.
func (l *Ledger) pumpPass(si int32, out []Output, arrival int32, allowBorrow bool) (_ []Output, av verdict, granted, borrowers, plainWaiting bool) {
	sc := &l.st.Scopes[si]
	l.epoch++
	if l.epoch == 0 {
		// Marks wrapped: clear them so that no stale mark matches.
		for i := range l.st.Buckets {
			l.st.Buckets[i].mark = 0
		}
		for i := range l.st.Res {
			l.st.Res[i].walked, l.st.Res[i].deferred = 0, 0
		}
		l.epoch = 1
	}
	w := pumpWalk{allowBorrow: allowBorrow, arrival: arrival, minWaitingOffset: -1}
	// Rounds: each visits, in key order, the waiters not yet visited that
	// are not deferred; the rule is then applied again among those left (a
	// batch waiter may have been deferred behind an agent waiter that was
	// itself deferred behind an interactive one). Every round visits the
	// last unvisited waiter in key order at least, and a waiter is deferred
	// only behind a class with a smaller offset, so there are at most as
	// many rounds as classes.
	for {
		marked := l.markDeferred(sc)
		deferOn := marked && sc.Rescued < l.st.Config.RescueMax
		w.guard = marked && !deferOn
		skipped := false
		for i := 0; i < len(sc.Queue); {
			r := &l.st.Res[sc.Queue[i]]
			if r.walked == l.epoch {
				i++
				continue
			}
			if deferOn && r.deferred == l.epoch {
				skipped = true
				i++
				continue
			}
			n := len(out)
			var removed bool
			out, removed = l.visit(sc, i, out, &w)
			if !removed {
				i++
				continue
			}
			if len(out) == n || out[n].Decision.Status != schemas.StatusGranted {
				continue
			}
			if !skipped {
				sc.Rescued = 0 // a grant in key order
			} else if sc.Rescued++; sc.Rescued >= l.st.Config.RescueMax {
				// The guard: the rest of the walk is in key order.
				deferOn, w.guard = false, true
			}
		}
		if !skipped {
			break
		}
	}
	sc.WakeMs, sc.Dirty = w.wake, false
	return out, w.av, w.granted, w.borrowers, w.plainWaiting
}

// markDeferred sets r.deferred = epoch on every waiter r of sc not yet
// visited in this pass that has, later in key order and also not yet
// visited, a waiter u of a class with a smaller age offset that could be
// granted now (not in backoff, not expired or judged late: lateExpiry) and
// u.ExpireMs + u.offset < r.ExpireMs + r.offset; it clears the mark of the
// other unvisited waiters. It reports whether any waiter was marked.
func (l *Ledger) markDeferred(sc *scopeState) bool {
	classes := l.st.Config.Classes
	if len(classes) < 2 || len(sc.Queue) < 2 {
		return false
	}
	now := l.st.Now
	// sufMin[c]: earliest expiry among eligible class-c waiters later in
	// key order (0 = none). Config validation allows at most 64 classes.
	var sufMin [64]int64
	any := false
	for i := len(sc.Queue) - 1; i >= 0; i-- {
		r := &l.st.Res[sc.Queue[i]]
		if r.walked == l.epoch {
			continue
		}
		r.deferred = 0
		if (r.ExpireMs <= now && !l.lateExpiry(r)) || r.NotBefore > now {
			// A waiter judged late (lateExpiry) takes part: on time it
			// would have met the rule at its expiry.
			continue
		}
		off := classes[r.ClassIdx].AgeOffsetMs
		for c := range classes {
			if e := sufMin[c]; e != 0 && classes[c].AgeOffsetMs < off && e+classes[c].AgeOffsetMs < r.ExpireMs+off {
				r.deferred = l.epoch
				any = true
				break
			}
		}
		if e := sufMin[r.ClassIdx]; e == 0 || r.ExpireMs < e {
			sufMin[r.ClassIdx] = r.ExpireMs
		}
	}
	return any
}

// visit decides the waiter at queue position i: expired, still in backoff,
// granted, or left waiting (marking the buckets it is short of for later
// waiters). removed reports that it left the queue.
func (l *Ledger) visit(sc *scopeState, i int, out []Output, w *pumpWalk) (_ []Output, removed bool) {
	now := l.st.Now
	ri := sc.Queue[i]
	r := &l.st.Res[ri]
	r.walked = l.epoch
	if r.Deadline > 0 && r.SvcMs == 0 {
		// Its route's service time was not known when it arrived (too
		// few samples): it is now, or the waiter would be granted up to
		// its deadline. Under overload every grant is made at the last
		// moment it may be, so the waiters queued while the route was
		// new were the ones sent for nothing (noisy-neighbor-handwritten:
		// 8 of 74 upstream calls cancelled in flight).
		if svc := l.expectedService(r); svc > 0 {
			r.SvcMs = svc
			r.ExpireMs = min(r.ExpireMs, r.grantBy())
		}
	}
	late := false
	if ri != w.arrival && r.ExpireMs <= now {
		if !l.lateExpiry(r) {
			l.removeAt(sc, i)
			return l.expireQueued(ri, out), true
		}
		late = true
	}
	if r.NotBefore > now {
		w.setWake(r.NotBefore, now)
		w.setWake(r.ExpireMs, now)
		if ri == w.arrival {
			w.av = verdict{why: whyBackoff, fitMs: r.NotBefore, limNode: noIdx}
		}
		return out, false
	}
	off := l.st.Config.Classes[r.ClassIdx].AgeOffsetMs
	reclaim := !w.allowBorrow || (w.minWaitingOffset >= 0 && w.minWaitingOffset < off)
	v := l.check(r, !late, reclaim)
	if late && !v.ok {
		// Nothing for it at the end of the step either: it expires as it
		// would have at its expiry, leaving no mark on the buckets for
		// the waiters behind it.
		l.removeAt(sc, i)
		return l.expireQueued(ri, out), true
	}
	if v.why == whyCooldown && ri != w.arrival {
		if l.waitOutCooldown(r, v.fitMs) {
			l.removeAt(sc, i)
			return l.cooldownPastDeadline(ri, out), true
		}
	}
	if (v.why == whyCapacity || v.why == whyBlocked) && w.backlog {
		// Queued behind the backlog a provider pause built: that backlog
		// flows out at the recovering rate, and this waiter's wait is the
		// same wait for the provider, bounded by its deadline.
		l.waitOutCooldown(r, now)
	}
	if v.why == whyBudgetOut && ri != w.arrival {
		// Its budget ran out while it waited: waiting cannot help.
		l.removeAt(sc, i)
		return l.denyQueued(ri, &v, out), true
	}
	if v.ok {
		l.removeAt(sc, i)
		l.grant(ri, v.borrowed)
		r = &l.st.Res[ri]
		if r.deferred == l.epoch && w.guard {
			// Deferral would have made it wait: the guard let it through
			// (the simulation's auditor checks every other grant).
			r.Flags |= fGuard
		}
		gd := schemas.GDQueuedThenAdmitted
		if ri == w.arrival {
			gd, w.granted = schemas.GDAdmitted, true
		} else {
			r.Flags |= fWasQueued
		}
		return l.emitGrant(out, ri, gd), true
	}
	if ri == w.arrival {
		w.av = v
	}
	r.FitMs = v.fitMs
	if v.why == whyReclaim {
		w.borrowers = true
	} else if !v.borrowed {
		w.plainWaiting = true
	}
	if w.minWaitingOffset < 0 || off < w.minWaitingOffset {
		w.minWaitingOffset = off
	}
	if r.Flags&fWaitedOut != 0 {
		w.backlog = true
	}
	w.setWake(r.ExpireMs, now)
	w.setWake(v.fitMs, now)
	return out, false
}

// lateExpiry reports whether waiter r, whose queue expiry has passed, is
// judged once more at the end of this record's step before it expires: its
// expiry fell inside the step (after the clock the previous record left),
// the pump last found it waiting for buckets that would hold it by its
// expiry (FitMs), it is its class's max wait that ran out (not its
// deadline, nor a wait it named itself), and it is out of backoff. The
// ledger sees time only through the log, so when the records that would
// have woken it stop coming for a while — a broker or machine pause, after
// which the next record's append time jumps — a refill that fell before the expiry and the expiry itself
// are seen in the same step. Expiring first then refused a waiter that on
// time would have been granted: an interactive request of
// TestStackNoisyNeighborRealBroker on a loaded CI machine (a 467 ms gap in
// the decisions' log time, one of 241 expired). When its buckets hold what
// it needs now it is granted — never more than its class's max wait past
// its expiry, nor past its deadline less the route's service time; when
// they do not, it expires. With the log's records on time the expiry step
// is a Tick at the expiry, and this decides as before but for a refill
// that lands in the same millisecond. After a gap it is exact for the first
// such waiter; one behind it may take a refill that came after its own
// expiry (its FitMs was found before the grant ahead of it), within the
// same bound.
func (l *Ledger) lateExpiry(r *res) bool {
	now := l.st.Now
	if r.ExpireMs <= l.prevNow || r.Flags&fOwnWait != 0 || r.NotBefore > now ||
		r.FitMs <= 0 || r.FitMs > r.ExpireMs || now-r.ExpireMs > l.st.Config.Classes[r.ClassIdx].MaxWaitMs {
		return false
	}
	return r.Deadline == 0 || r.grantBy() > now
}

// expireQueued ends a reservation that waited past its max wait.
func (l *Ledger) expireQueued(ri int32, out []Output) []Output {
	l.finish(ri, stExpired)
	l.st.Stats.Expired++
	r := &l.st.Res[ri]
	class, reason := schemas.RetryCapacity, schemas.ReasonMaxWaitExceeded
	var needed, avail int64
	if r.Deadline > 0 && r.grantBy() <= l.st.Now {
		class, reason = schemas.RetryDeadline, schemas.ReasonDeadlineExceeded
		if r.Deadline > l.st.Now {
			// Time is left, but less than the route takes to answer:
			// both times named, as refuseShortDeadline does (a fallback
			// carries the service time to its own ledger:
			// ReserveRequested.ServicePriorMs).
			reason, needed, avail = schemas.ReasonDeadlineBelowService, r.SvcMs, r.Deadline-l.st.Now
		}
	}
	return l.emit(out, r, schemas.Decision{
		Status: schemas.StatusExpired, Reason: reason, Needed: needed, Available: avail,
		GatewayDecision: schemas.GDQueuedThenExpired, RetryClass: class,
		FallbackAllowed: l.st.Config.Classes[r.ClassIdx].Overload == OverloadFallback && r.Flags&fFallback != 0,
	})
}

// waitOutCooldown applies the storm rule to a waiter that a provider
// cooldown (until, from Retry-After) or the storm hold keeps back: waiting
// for the provider does not count against its class's max wait, so its
// queue expiry moves to its deadline (until + max wait if it has none), and
// it flows out when the provider takes work again instead of expiring while
// the scope is closed.
// A max wait the request named itself is kept. It reports true when the
// deadline comes before the cooldown ends: the waiter can never be granted
// in time and is refused at once.
func (l *Ledger) waitOutCooldown(r *res, until int64) (pastDeadline bool) {
	if r.Deadline > 0 && r.grantBy() <= until {
		return true
	}
	if r.Flags&fOwnWait != 0 {
		return false // the caller's own bound on queueing holds
	}
	e := until + l.st.Config.Classes[r.ClassIdx].MaxWaitMs
	if r.Deadline > 0 {
		// The backlog the pause built flows out at the provider's
		// recovering rate, which can take longer than a class's max wait:
		// the deadline is the bound.
		e = r.grantBy()
	}
	if e > r.ExpireMs {
		r.ExpireMs = e
		r.Flags |= fWaitedOut
	}
	return false
}

// cooldownPastDeadline refuses a waiter whose deadline passes before the
// provider's cooldown ends: a clear answer now (fallback where its class
// and request allow) rather than an expiry at its deadline.
func (l *Ledger) cooldownPastDeadline(ri int32, out []Output) []Output {
	l.finish(ri, stExpired)
	l.st.Stats.Expired++
	r := &l.st.Res[ri]
	sc := &l.st.Scopes[r.Scope]
	d := schemas.Decision{
		Status: schemas.StatusExpired, Reason: schemas.ReasonDeadlineExceeded,
		GatewayDecision: schemas.GDQueuedThenExpired, RetryClass: schemas.RetryDeadline,
		FallbackAllowed: l.st.Config.Classes[r.ClassIdx].Overload == OverloadFallback && r.Flags&fFallback != 0,
	}
	if c := max(sc.CoolAll, sc.CoolPolicy); c > l.st.Now {
		d.RetryAfterMs = c - l.st.Now
	}
	return l.emit(out, r, d)
}

// paceMs is the pacing interval of r's path: over the token and ramp
// buckets it needs whose window is shorter than their period, the longest
// time that one grant of r's size into a full bucket keeps a second grant
// of that size from fitting. It is 0 when every such bucket's window holds
// two requests of r's size. Otherwise the
// bucket (or the provider it mirrors) takes one such request per interval
// at most, and a request arriving just after a grant waits that long
// whatever the order of the queue (README, "Queues": the pacing interval).
func (l *Ledger) paceMs(r *res) int64 {
	var pace int64
	nodes, buckets, specs := l.st.Nodes, l.st.Buckets, l.cc.specs
	for _, ni := range r.Path[:r.NPath] {
		n := &nodes[ni]
		bs := buckets[n.First : n.First+n.N]
		for k := range bs {
			b := &bs[k]
			sp := &specs[b.Spec]
			rate, burst := sp.capacity, sp.burst
			switch sp.kind {
			case kToken:
			case kRamp:
				rate = l.st.Ramps[b.Ext].Rate
				burst = rampBurst(rate, sp.window)
			default:
				continue
			}
			a := sp.amount(r)
			if a <= 0 || rate <= 0 || sp.window >= sp.period {
				// A window of the whole period is a quota, not pacing
				// (1 request an hour: the next one an hour later).
				continue
			}
			// From full, a grant leaves burst − a; a second fits at
			// min(a, burst) (fits), so the refill needed between them
			// is min(a, burst) + a − burst, in scaled units.
			scaled := mulSat(a, sp.period)
			if need := min(scaled, burst) + scaled - burst; need > 0 {
				pace = max(pace, (need+rate-1)/rate)
			}
		}
	}
	return pace
}

// waitPaced lets a request that is not granted at once wait its path's
// pacing interval (paceMs) on top of its class's max wait, within its
// deadline's grant bound: the max wait bounds the wait behind other work,
// not the provider's own spacing. No order of the queue can grant a
// request sooner than one interval after a grant of its size without
// leaving the provider idle in every interval; with the interval longer
// than the max wait (40 RPM over a 1 s window: one request per 1.5 s,
// against interactive's 300 ms), every higher-class arrival after a
// lower-class grant was refused at once, although deadline rescue gives
// it the next refill ahead of the aged backlog. A max wait the request
// named itself is kept, as in waitOutCooldown.
func (l *Ledger) waitPaced(r *res) {
	if r.Flags&fOwnWait != 0 {
		return
	}
	pace := l.paceMs(r)
	if pace == 0 {
		return
	}
	e := max(l.st.Now, r.NotBefore) + l.st.Config.Classes[r.ClassIdx].MaxWaitMs + pace
	if r.Deadline > 0 {
		e = min(e, r.grantBy())
	}
	if e > r.ExpireMs {
		r.ExpireMs = e
	}
}
