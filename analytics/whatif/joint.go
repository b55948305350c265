package whatif

import (
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// Joint replays every partition of a log together, for a configuration
// with cross-scope budgets (ledger.budget). A budget's lease machine runs
// between partitions: a scope partition asks the budget partition for a
// share (LeaseRequested), which grants it (LeaseGranted) out of the
// budget's limit. Replayed one partition at a time, each scope would read
// the recorded grants, made under the recorded limit, and a changed limit
// would change nothing. Joint instead feeds every partition's inputs in
// log order, drops the recorded lease messages, and delivers the lease
// messages the what-if ledgers produce to the partition their key hashes
// to (route), so a changed limit changes what every scope may spend.
//
// One more approximation than Partition's, said here once: the what-if's
// lease messages are delivered at once, in the log time of the input that
// caused them, where the recorded ones took a round trip through the
// broker (0.4–1 s). A scope's first requests may then be granted sooner
// than they were; the budget's totals are what the lease machine allows.
type Joint struct {
	parts map[int32]*Partition
	route func(key string) int32
	// sub counts the lease messages applied after each partition's last
	// recorded input (its ledger offset's low bits).
	sub  map[int32]int64
	last map[int32]int64 // each partition's last recorded input offset
	// recorded: each holder's newest recorded lease counters, by budget.
	recorded map[[2]string]recordedLease
	// Dropped counts the recorded lease messages not applied.
	Dropped int64
	// Overflow counts what-if lease messages that found no room between
	// two recorded inputs (more than jointSub − 1 of them) and were
	// dropped; non-zero means the what-if is wrong.
	Overflow int64
}

type recordedLease struct{ seq, used int64 }

// jointShift leaves 1<<jointShift − 1 ledger offsets between two
// recorded inputs for the what-if's lease messages.
const jointShift = 10

// NeedsJoint reports whether a what-if under ledger document doc must be
// replayed jointly: doc has cross-scope budgets.
func NeedsJoint(doc []byte) bool {
	if doc == nil {
		return false
	}
	c, err := ledger.ParseConfig(doc)
	return err == nil && c.Budget != nil && len(c.Budget.Budgets) > 0
}

// NewJoint returns the joint replay of parts under o; route maps a lease
// message's key to its partition (the gateways' partitioner).
func NewJoint(parts []int32, o Options, route func(key string) int32) (*Joint, error) {
	j := &Joint{parts: map[int32]*Partition{}, route: route, sub: map[int32]int64{}, last: map[int32]int64{},
		recorded: map[[2]string]recordedLease{}}
	for _, p := range parts {
		pt, err := NewPartition(p, o)
		if err != nil {
			return nil, err
		}
		pt.shift = jointShift
		j.parts[p] = pt
	}
	return j, nil
}

// Partition returns partition p's replay (nil: not in the run).
func (j *Joint) Partition(p int32) *Partition { return j.parts[p] }

// Input applies one recorded input of partition p, in log order across
// partitions (by log time, then partition, then offset), and delivers the
// lease messages it causes.
func (j *Joint) Input(p int32, offset, logTimeMs int64, ev *schemas.Event) {
	pt := j.parts[p]
	if pt == nil {
		return
	}
	j.last[p], j.sub[p] = offset, 0
	switch {
	case ev.LeaseRequested != nil:
		j.recordLease(ev.LeaseRequested.Budget, ev.LeaseRequested.Holder, ev.LeaseRequested.Seq, ev.LeaseRequested.Used)
	case ev.LeaseReturned != nil:
		j.recordLease(ev.LeaseReturned.Budget, ev.LeaseReturned.Holder, ev.LeaseReturned.Seq, ev.LeaseReturned.Used)
	}
	switch ev.Type {
	case schemas.TypeLeaseRequested, schemas.TypeLeaseGranted, schemas.TypeLeaseReturned:
		// The what-if's own lease machine replaces the recorded one; the
		// offset still moves on, as an empty input.
		j.Dropped++
		pt.Inputs++
		pt.apply(offset<<jointShift, logTimeMs, &schemas.Event{V: schemas.Version, Type: schemas.TypeTick, ID: ev.ID, Tick: &schemas.Tick{Reason: "whatif_lease_dropped"}})
	default:
		pt.Input(offset, logTimeMs, ev)
	}
	j.deliver(p, offset, logTimeMs)
}

// deliver applies the lease messages of partition from's last Apply to
// the partitions they go to, and theirs in turn, breadth first.
func (j *Joint) deliver(from int32, offset, logTimeMs int64) {
	type msg struct {
		to int32
		ev *schemas.Event
	}
	var queue []msg
	collect := func(p int32, off int64) {
		los := j.parts[p].l.LeaseOutputs()
		for i := range los {
			queue = append(queue, msg{to: j.route(los[i].Key()), ev: los[i].Event(p, off, logTimeMs)})
		}
	}
	collect(from, offset)
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		pt := j.parts[m.to]
		if pt == nil {
			continue
		}
		if j.sub[m.to]++; j.sub[m.to] >= 1<<jointShift {
			j.Overflow++
			continue
		}
		pt.apply(j.last[m.to]<<jointShift|j.sub[m.to], logTimeMs, m.ev)
		collect(m.to, j.last[m.to])
	}
}

func (j *Joint) recordLease(budget, holder string, seq, used int64) {
	k := [2]string{budget, holder}
	if r, ok := j.recorded[k]; !ok || seq > r.seq {
		j.recorded[k] = recordedLease{seq, used}
	}
}

// BudgetEffect is one budget of the what-if's configuration: its limit
// there, what the recorded run spent of the budget of the same id (the
// holders' newest lease reports, all windows the log holds summed as one)
// and what the what-if spent in the budget's current window.
//
// WhatIfSpent can exceed the limit, and that is no overspend of the
// what-if's grants: the recorded reconciles of attempts the what-if did
// not grant still arrive (the package's approximation), and the ledger
// charges usage it never granted, since the provider served it (an
// overdraft, ledger/debt.go). The limit's effect is in the what-if's
// grants and its budget_exhausted denials.
type BudgetEffect struct {
	ID            string `json:"id"`
	Unit          string `json:"unit"`
	Limit         int64  `json:"limit"`
	RecordedSpent int64  `json:"recorded_spent"`
	WhatIfSpent   int64  `json:"whatif_spent"`
	// Holders are the scopes that spent it, in order.
	Holders []string `json:"holders"`
}

// Budgets reports the effect of the what-if's budgets (doc: the what-if's
// ledger document).
func (j *Joint) Budgets(doc []byte) ([]BudgetEffect, error) {
	c, err := ledger.ParseConfig(doc)
	if err != nil {
		return nil, fmt.Errorf("what-if ledger config: %w", err)
	}
	if c.Budget == nil {
		return nil, nil
	}
	ps := make([]int32, 0, len(j.parts))
	for p := range j.parts {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	var out []BudgetEffect
	for _, b := range c.Budget.Budgets {
		e := BudgetEffect{ID: b.ID, Unit: string(b.Unit), Limit: b.Limit, Holders: []string{}}
		for _, p := range ps {
			if u, ok := j.parts[p].l.BudgetUsed(b.ID); ok {
				e.WhatIfSpent += u
			}
		}
		for k, r := range j.recorded {
			if k[0] == b.ID {
				e.RecordedSpent += r.used
				e.Holders = append(e.Holders, k[1])
			}
		}
		slices.Sort(e.Holders)
		out = append(out, e)
	}
	return out, nil
}
