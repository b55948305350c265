package ledger

import (
	"fmt"

	"github.com/sluice-dev/sluice/internal/invariants"
	"github.com/sluice-dev/sluice/schemas"
)

// checkStep panics when the state breaks an invariant after Apply applied
// ev, in a build with -tags invariants; without the tag it is empty and
// inlined away, so Apply keeps its zero allocations. A broken invariant is
// a programmer error: the panic names the record, and the seed or step
// table that produced it reproduces it.
func (l *Ledger) checkStep(ev *schemas.Event) {
	if !invariants.Enabled {
		return
	}
	if err := l.checkInvariants(); err != nil {
		typ := schemas.Type("tick")
		if ev != nil {
			typ = ev.Type
		}
		panic(fmt.Sprintf("ledger invariant broken after offset %d (%s) at %d ms: %v", l.offset, typ, l.st.Now, err))
	}
}

// checkInvariants audits the whole state: conservation of held amounts per
// bucket, concurrency accounting, queue order and depth, hold lists and the
// reservation index. Tests call it after every step, and so does Apply in
// a build with -tags invariants (checkStep). It allocates: never call it
// on the hot path outside that build.
func (l *Ledger) checkInvariants() error {
	inList, err := l.checkHoldLists()
	if err != nil {
		return err
	}
	queued, err := l.checkQueues()
	if err != nil {
		return err
	}
	if err := l.checkFlight(); err != nil {
		return err
	}
	held, shadowHeld, err := l.checkReservations(inList, queued)
	if err != nil {
		return err
	}
	return l.checkHeld(held, shadowHeld)
}

// checkHoldLists: every hold list links granted reservations in expiry
// order, each in one list only. It returns the reservations listed.
func (l *Ledger) checkHoldLists() (map[int32]bool, error) {
	st := &l.st
	inList := map[int32]bool{}
	for li, hl := range st.Lists {
		prevExp := int64(-1 << 62)
		prev := noIdx
		for ri := hl.Head; ri != noIdx; ri = st.Res[ri].Next {
			r := &st.Res[ri]
			if r.State != stGranted || r.List != int32(li) || r.Prev != prev {
				return nil, fmt.Errorf("hold list %d: bad entry %d (state %d)", li, ri, r.State)
			}
			if r.HoldExpMs < prevExp {
				return nil, fmt.Errorf("hold list %d not in expiry order", li)
			}
			prevExp, prev = r.HoldExpMs, ri
			if inList[ri] {
				return nil, fmt.Errorf("reservation %d twice in hold lists", ri)
			}
			inList[ri] = true
		}
		if hl.Tail != prev {
			return nil, fmt.Errorf("hold list %d: bad tail", li)
		}
	}
	return inList, nil
}

// checkQueues: every scope's queue is in order and holds its own queued
// reservations, and the class depths count them. It returns how often
// each reservation is queued.
func (l *Ledger) checkQueues() (map[int32]int, error) {
	st := &l.st
	queued := map[int32]int{}
	for si := range st.Scopes {
		sc := &st.Scopes[si]
		depth := make([]int32, len(st.Config.Classes))
		for i, ri := range sc.Queue {
			if i > 0 && !l.less(sc.Queue[i-1], ri) {
				return nil, fmt.Errorf("scope %s: queue out of order at %d", sc.Name, i)
			}
			r := &st.Res[ri]
			if r.State != stQueued || r.Scope != int32(si) {
				return nil, fmt.Errorf("scope %s: queue holds reservation %d in state %d", sc.Name, ri, r.State)
			}
			queued[ri]++
			depth[r.ClassIdx]++
		}
		for c := range depth {
			if depth[c] != sc.Depth[c] {
				return nil, fmt.Errorf("scope %s: class %d depth %d, counted %d", sc.Name, c, sc.Depth[c], depth[c])
			}
		}
	}
	return queued, nil
}

// checkFlight: each scope's in-flight count is its granted reservations.
func (l *Ledger) checkFlight() error {
	st := &l.st
	flight := make([]int64, len(st.Scopes))
	for i := range st.Res {
		if r := &st.Res[i]; r.State == stGranted {
			flight[r.Scope]++
		}
	}
	for si := range st.Scopes {
		if st.Scopes[si].Flight != flight[si] {
			return fmt.Errorf("scope %s: %d in flight, %d granted", st.Scopes[si].Name, st.Scopes[si].Flight, flight[si])
		}
	}
	return nil
}

// checkReservations: every live reservation is in the index, a queued one
// in its queue once, a granted one in a hold list. It returns what the
// granted ones hold of each bucket and shadow bucket.
func (l *Ledger) checkReservations(inList map[int32]bool, queued map[int32]int) (held, shadowHeld []int64, err error) {
	st := &l.st
	held = make([]int64, len(st.Buckets))
	shadowHeld = make([]int64, len(st.Shadow))
	live := 0
	for i := range st.Res {
		ri := int32(i)
		r := &st.Res[i]
		if r.State == stFree {
			continue
		}
		live++
		if got, ok := l.resFind(r.RequestID, r.Attempt); !ok || got != ri {
			return nil, nil, fmt.Errorf("reservation %d (%s/%d) missing from index", ri, r.RequestID, r.Attempt)
		}
		switch r.State {
		case stQueued:
			if queued[ri] != 1 {
				return nil, nil, fmt.Errorf("queued reservation %s/%d is in the queue %d times", r.RequestID, r.Attempt, queued[ri])
			}
		case stGranted:
			if !inList[ri] {
				return nil, nil, fmt.Errorf("granted reservation %s/%d is in no hold list", r.RequestID, r.Attempt)
			}
			for p := 0; p < int(r.NPath); p++ {
				n := &st.Nodes[r.Path[p]]
				for bi := n.First; bi < n.First+n.N; bi++ {
					if st.Buckets[bi].Gen <= r.Gen {
						held[bi] += l.cc.specs[st.Buckets[bi].Spec].amount(r)
					}
				}
				for bi := n.SFirst; bi < n.SFirst+n.SN && r.Flags&fShadowHeld != 0; bi++ {
					if st.Shadow[bi].Gen <= r.Gen {
						shadowHeld[bi] += l.cc.specs[st.Shadow[bi].Spec].amount(r)
					}
				}
			}
		}
	}
	if live != l.resIdx.n {
		return nil, nil, fmt.Errorf("index has %d reservations, state %d", l.resIdx.n, live)
	}
	return held, shadowHeld, nil
}

// checkHeld: each bucket holds what its grants charged, concurrency
// buckets free plus held make the capacity, and shadow and enforced specs
// stay apart.
func (l *Ledger) checkHeld(held, shadowHeld []int64) error {
	st := &l.st
	for bi := range st.Shadow {
		b := &st.Shadow[bi]
		sp := &l.cc.specs[b.Spec]
		if !sp.shadow {
			return fmt.Errorf("shadow bucket %d has an enforced spec", bi)
		}
		if b.Held != shadowHeld[bi] {
			return fmt.Errorf("shadow bucket %d: held %d, shadow-charged grants %d", bi, b.Held, shadowHeld[bi])
		}
		if sp.kind == kConcurrency && b.Level+b.Held != sp.capacity {
			return fmt.Errorf("shadow concurrency bucket %d: free %d + held %d != capacity %d", bi, b.Level, b.Held, sp.capacity)
		}
	}
	for bi := range st.Buckets {
		b := &st.Buckets[bi]
		if !l.cc.anyPace && onePerWindow(&l.cc.specs[b.Spec]) {
			return fmt.Errorf("bucket %d paces one request a window but compiled.anyPace is false (sendAt would skip it)", bi)
		}
		if l.cc.specs[b.Spec].shadow {
			return fmt.Errorf("bucket %d has a shadow spec", bi)
		}
		if b.Held != held[bi] {
			return fmt.Errorf("bucket %d: held %d, granted−settled %d", bi, b.Held, held[bi])
		}
		sp := &l.cc.specs[b.Spec]
		if sp.kind == kConcurrency && b.Level+b.Held != sp.capacity {
			return fmt.Errorf("concurrency bucket %d: free %d + held %d != capacity %d", bi, b.Level, b.Held, sp.capacity)
		}
	}
	return nil
}
