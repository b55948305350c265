package ledger

import (
	"slices"

	"github.com/sluice-dev/sluice/schemas"
)

// BucketLevel is one bucket's state as an observer sees it (the gateway's
// tenant usage endpoint reads it from a restored snapshot).
type BucketLevel struct {
	Dimension schemas.Dimension
	Refill    Refill
	Capacity  int64
	PeriodMs  int64
	// Remaining is what the bucket could grant at the asked time (negative
	// while it carries debt). For a concurrency bucket: free in-flight
	// slots.
	Remaining int64
	// FullAtMs is the log time at which the bucket is back at its capacity
	// if nothing more is charged: the token refill time, the next window of
	// a fixed bucket, the time a rolling window's charges have left it.
	// 0 when it is full already or only a release can free it
	// (concurrency).
	FullAtMs int64
}

// Levels reports the buckets that the node (scope, level, id) holds,
// projected to atMs by refill alone — as if nothing were charged after the
// ledger's own time — and the ledger's time they are read at. found is
// false when the ledger has no such node yet: none of its buckets was ever
// touched, so they are all full. It only reads state (the projection works
// on copies): calling it changes no decision.
func (l *Ledger) Levels(scope, level, id string, atMs int64) (levels []BucketLevel, found bool) {
	si, ok := l.scopeIdx[scope]
	if !ok {
		return nil, false
	}
	lv, ok := levelCode(level)
	if !ok {
		return nil, false
	}
	ni, ok := l.nodeIdx[nodeKey{si, lv, id}]
	if !ok {
		return nil, false
	}
	now := max(atMs, l.st.Now)
	n := &l.st.Nodes[ni]
	for bi := n.First; bi < n.First+n.N; bi++ {
		b := l.st.Buckets[bi] // a copy
		sp := &l.cc.specs[b.Spec]
		bl := BucketLevel{Dimension: dimension(sp.dim), Refill: kindName(sp.kind), Capacity: sp.capacity, PeriodMs: sp.period}
		switch sp.kind {
		case kToken:
			refillToken(&b, sp, now)
			bl.Remaining = floorDiv(b.Level, sp.period)
			if b.Level < sp.burst {
				bl.FullAtMs = now + (sp.burst-b.Level+sp.capacity-1)/sp.capacity
			}
		case kRamp:
			bl.Remaining = floorDiv(b.Level, sp.period)
		case kFixed:
			w := floorDiv(now-sp.offset, sp.period)
			if w > b.LastMs {
				b.Level = sp.capacity + min(b.Level, 0)
			}
			bl.Remaining = b.Level
			if b.Level < sp.capacity {
				bl.FullAtMs = (w+1)*sp.period + sp.offset
			}
		case kRolling:
			rs := l.st.Rolls[b.Ext]
			rs.Ring = slices.Clone(rs.Ring)
			l.rollAdvance(&rs, sp, now)
			bl.Remaining = sp.capacity - rs.Sum
			if rs.Sum > 0 {
				m := int64(len(rs.Ring))
				for s := rs.Cur; s > rs.Cur-m && s >= 0; s-- {
					if rs.Ring[s%m] != 0 {
						bl.FullAtMs = (s + m) * sp.slotMs // the newest charge leaves then
						break
					}
				}
			}
		default:
			bl.Remaining = b.Level
		}
		levels = append(levels, bl)
	}
	return levels, true
}

// HasScope reports whether this ledger has seen the provider scope name (a
// scope lives on the partition its name hashes to).
func (l *Ledger) HasScope(name string) bool {
	_, ok := l.scopeIdx[name]
	return ok
}
