package ledger

import (
	"github.com/sluice-dev/sluice/schemas"
)

// Queue order. Each scope has one queue sorted by (Key, Seq). A key is a
// virtual-clock finish time in µs (WFQ between tenants: a tenant's
// consecutive queued requests are spaced FairCostMs/weight apart, starting
// no earlier than now) plus the class's AgeOffsetMs (aging: a batch request
// queued X ms ago outranks an interactive one arriving now once X exceeds
// the offset difference, so no class starves) minus Priority×PriorityStepMs.
// Keys never change after enqueue, so the order is static and replayable.

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

func (l *Ledger) pumpPass(si int32, out []Output, arrival int32, allowBorrow bool) (_ []Output, av verdict, granted, borrowers, plainWaiting bool) {
	sc := &l.st.Scopes[si]
	now := l.st.Now
	l.epoch++
	if l.epoch == 0 {
		// Marks wrapped: clear them so that no stale mark matches.
		for i := range l.st.Buckets {
			l.st.Buckets[i].mark = 0
		}
		l.epoch = 1
	}
	var wake int64
	setWake := func(t int64) {
		if t > now && (wake == 0 || t < wake) {
			wake = t
		}
	}
	minWaitingOffset := int64(-1) // smallest class age offset among waiters
	for i := 0; i < len(sc.Queue); {
		ri := sc.Queue[i]
		r := &l.st.Res[ri]
		if ri != arrival && r.ExpireMs <= now {
			l.removeAt(sc, i)
			out = l.expireQueued(ri, out)
			continue
		}
		if r.NotBefore > now {
			setWake(r.NotBefore)
			setWake(r.ExpireMs)
			if ri == arrival {
				av = verdict{why: whyBackoff, fitMs: r.NotBefore, limNode: noIdx}
			}
			i++
			continue
		}
		off := l.st.Config.Classes[r.ClassIdx].AgeOffsetMs
		reclaim := !allowBorrow || (minWaitingOffset >= 0 && minWaitingOffset < off)
		v := l.check(r, true, reclaim)
		if v.ok {
			l.removeAt(sc, i)
			l.grant(ri, v.borrowed)
			gd := schemas.GDQueuedThenAdmitted
			if ri == arrival {
				gd, granted = schemas.GDAdmitted, true
			} else {
				l.st.Res[ri].Flags |= fWasQueued
			}
			out = l.emitGrant(out, ri, gd)
			continue
		}
		if ri == arrival {
			av = v
		}
		if v.why == whyReclaim {
			borrowers = true
		} else if !v.borrowed {
			plainWaiting = true
		}
		if minWaitingOffset < 0 || off < minWaitingOffset {
			minWaitingOffset = off
		}
		setWake(r.ExpireMs)
		setWake(v.fitMs)
		i++
	}
	sc.WakeMs, sc.Dirty = wake, false
	return out, av, granted, borrowers, plainWaiting
}

// expireQueued ends a reservation that waited past its max wait.
func (l *Ledger) expireQueued(ri int32, out []Output) []Output {
	l.finish(ri, stExpired)
	l.st.Stats.Expired++
	r := &l.st.Res[ri]
	class, reason := schemas.RetryCapacity, schemas.ReasonMaxWaitExceeded
	if r.Deadline > 0 && r.Deadline <= l.st.Now {
		class, reason = schemas.RetryDeadline, schemas.ReasonDeadlineExceeded
	}
	return l.emit(out, r, schemas.Decision{
		Status: schemas.StatusExpired, Reason: reason,
		GatewayDecision: schemas.GDQueuedThenExpired, RetryClass: class,
		FallbackAllowed: l.st.Config.Classes[r.ClassIdx].Overload == OverloadFallback && r.Flags&fFallback != 0,
	})
}
