package ledger

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/sluice-dev/sluice/ledger/budget"
	"github.com/sluice-dev/sluice/schemas"
)

// The scope partition's side of cross-scope budgets (ledger/budget,
// README.md there). A request whose path names a budget's level and
// subject spends it: after every bucket covers it, each of its budgets'
// leases must too (Holder.Check). A lease that cannot cover it queues it
// (budget_lease) and asks the budget partition for more; a budget that
// has less left than it costs denies it (budget_exhausted). Decisions name
// the budget and the lease in limit_path: "budget:<id>/lease:<scope>".
// The lease messages the holders produce are LeaseOutputs of the Apply
// that caused them, for the service to produce keyed by budget id.

// maxBudgets bounds the budgets one request spends (org, tenant, team,
// key: one each).
const maxBudgets = 4

// budRef is one budget a reservation spends: its id, its cost in the
// budget's unit and the window it was charged in (0: not charged).
type budRef struct {
	ID   string `json:"id"`
	Cost int64  `json:"c"`
	Win  int64  `json:"w,omitempty"`
}

// budgetSide holds the leases of the partition's scopes (one Holder per
// scope, by name) and the budget partition of the budgets whose id keys
// records into this partition of sluice.requests: a partition of the
// request log is both a scope partition and a budget partition, so the
// lease messages ride the same transactions, snapshots, takeovers and
// replay as the decisions. Not part of st: snapshots carry their own
// encodings (Freeze).
type budgetSide struct {
	holders []*budget.Holder
	bp      *budget.Partition
	cfgKey  string
	out     []budget.Msg // lease messages of the current Apply
}

// LeaseOutput is one lease message produced by the last Apply: a
// LeaseRequested or LeaseReturned for a budget partition, or a
// LeaseGranted for a holder. It goes to sluice.requests keyed by Key.
// Index orders it among the Apply's lease messages.
type LeaseOutput struct {
	Msg   budget.Msg
	Index int32
}

// LeaseOutputs returns the lease messages of the last Apply (valid until
// the next one).
func (l *Ledger) LeaseOutputs() []LeaseOutput {
	if len(l.bud.out) == 0 {
		return nil
	}
	out := make([]LeaseOutput, len(l.bud.out))
	for i, m := range l.bud.out {
		out[i] = LeaseOutput{Msg: m, Index: int32(i)}
	}
	return out
}

// Key is the record key of o: the budget id for the budget partition,
// the holder's scope for a grant.
func (o *LeaseOutput) Key() string {
	switch {
	case o.Msg.Requested != nil:
		return o.Msg.Requested.Budget
	case o.Msg.Returned != nil:
		return o.Msg.Returned.Budget
	}
	return o.Msg.Granted.Holder
}

// Event converts o to a wire event with a deterministic id
// "l-<partition>-<input offset>-<index>", so a replay writes the same bytes.
func (o *LeaseOutput) Event(partition int32, offset, logTimeMs int64) *schemas.Event {
	b := make([]byte, 0, 40)
	b = append(b, "l-"...)
	b = strconv.AppendInt(b, int64(partition), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, offset, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(o.Index), 10)
	e := &schemas.Event{V: schemas.Version, ID: string(b), ProducedAtMs: logTimeMs}
	switch {
	case o.Msg.Requested != nil:
		e.Type, e.LeaseRequested, e.Scope = schemas.TypeLeaseRequested, o.Msg.Requested, o.Msg.Requested.Holder
	case o.Msg.Returned != nil:
		e.Type, e.LeaseReturned, e.Scope = schemas.TypeLeaseReturned, o.Msg.Returned, o.Msg.Returned.Holder
	default:
		e.Type, e.LeaseGranted, e.Scope = schemas.TypeLeaseGranted, o.Msg.Granted, o.Msg.Granted.Holder
	}
	return e
}

// budgetConfig returns the budgets in force (nil: none).
func (l *Ledger) budgetConfig() *budget.Config {
	if c := l.st.Config.Budget; c != nil && len(c.Budgets) > 0 {
		return c
	}
	return nil
}

// syncHolders makes the holders run the config in force, keeping what
// each holds of the budgets that still exist.
func (l *Ledger) syncHolders() {
	cfg := l.budgetConfig()
	if cfg == nil {
		l.bud.holders, l.bud.bp, l.bud.cfgKey = nil, nil, ""
		return
	}
	key, _ := json.Marshal(cfg)
	if string(key) == l.bud.cfgKey {
		return
	}
	l.bud.cfgKey = string(key)
	if l.bud.bp == nil {
		l.bud.bp, _ = budget.NewPartition(*cfg)
	} else if snap, err := l.bud.bp.MarshalSnapshot(); err == nil {
		if bp, err := budget.RestorePartition(*cfg, snap); err == nil {
			l.bud.bp = bp
		}
	}
	for i, h := range l.bud.holders {
		snap, err := h.MarshalSnapshot()
		if err == nil {
			if nh, err := budget.RestoreHolder(*cfg, snap); err == nil {
				l.bud.holders[i] = nh
			}
		}
	}
}

// holderOf returns scope si's holder, created on first use.
func (l *Ledger) holderOf(si int32) *budget.Holder {
	cfg := l.budgetConfig()
	if cfg == nil {
		return nil
	}
	name := l.st.Scopes[si].Name
	hs := l.bud.holders
	i := sort.Search(len(hs), func(i int) bool { return hs[i].Name() >= name })
	if i < len(hs) && hs[i].Name() == name {
		return hs[i]
	}
	h, err := budget.NewHolder(name, *cfg)
	if err != nil {
		return nil // Validate refused it before install
	}
	l.bud.holders = append(l.bud.holders, nil)
	copy(l.bud.holders[i+1:], l.bud.holders[i:])
	l.bud.holders[i] = h
	return h
}

// budgetsOf records the budgets r's path spends, with r's cost in each
// budget's unit: requests 1, tokens input plus the most output it may
// charge (so that a reconcile never overdraws), spend its estimate.
func (l *Ledger) budgetsOf(r *res, path []schemas.PathLevel) {
	r.Bud = nil
	h := l.holderOf(r.Scope)
	if h == nil {
		return
	}
	var ids [maxBudgets]string
	for _, id := range h.Budgets(path, ids[:0]) {
		if len(r.Bud) == maxBudgets {
			break
		}
		if r.Bud == nil {
			r.Bud = make([]budRef, 0, 1) // one allocation, for budgeted requests only
		}
		r.Bud = append(r.Bud, budRef{ID: id, Cost: budgetCost(h.Unit(id), &r.Need, r.MaxOut)})
	}
}

func budgetCost(u budget.Unit, need *[numDims]int64, maxOut int64) int64 {
	switch u {
	case budget.UnitRequests:
		return 1
	case budget.UnitTokens:
		return need[dInput] + max(maxOut, need[dOutput])
	case budget.UnitInputTokens:
		return need[dInput]
	case budget.UnitOutputTokens:
		return max(maxOut, need[dOutput])
	}
	return need[dSpend]
}

// budgetCheck is check's last step for a reservation with budgets: every
// lease must cover it. The verdict names the first budget that does not.
func (l *Ledger) budgetCheck(r *res) (verdict, bool) {
	h := l.holderOf(r.Scope)
	if h == nil {
		return verdict{}, true
	}
	now := l.st.Now
	for i := range r.Bud {
		b := &r.Bud[i]
		var bv budget.Verdict
		bv, l.bud.out = h.Check(now, b.ID, b.Cost, l.bud.out)
		if bv == budget.Fits || bv == budget.NoBudget {
			continue
		}
		ls, _ := h.Lease(b.ID)
		v := verdict{limNode: noIdx, bud: uint8(i + 1), needed: b.Cost, avail: max(0, ls.Granted-ls.Returned-ls.Used)}
		if bv == budget.Exhausted {
			v.why = whyBudgetOut
			v.avail = max(0, ls.Available)
			return v, false
		}
		v.why = whyBudgetLease // budgetWants asks for the lease
		return v, false
	}
	return verdict{}, true
}

// budgetDimension is the dimension a budget counts, for limit_dimension
// (so that the gateway's error says "quota exhausted on budget:… spend:
// needed …, available …").
func (l *Ledger) budgetDimension(r *res, id string) schemas.Dimension {
	h := l.holderOf(r.Scope)
	if h == nil {
		return ""
	}
	switch h.Unit(id) {
	case budget.UnitRequests:
		return schemas.DimRequests
	case budget.UnitTokens:
		return schemas.DimTotalTokens
	case budget.UnitInputTokens:
		return schemas.DimInputTokens
	case budget.UnitOutputTokens:
		return schemas.DimOutputTokens
	}
	return schemas.DimSpend
}

// budgetCharge charges r's budgets when it is granted (an emergency
// admission too, even past its lease: the overdraft is counted).
func (l *Ledger) budgetCharge(r *res) {
	h := l.holderOf(r.Scope)
	if h == nil {
		return
	}
	for i := range r.Bud {
		r.Bud[i].Win = h.Charge(r.Bud[i].ID, r.Bud[i].Cost)
	}
}

// budgetSettle gives r's budgets back what its settlement did not use.
func (l *Ledger) budgetSettle(r *res, actual *[numDims]int64, sent bool) {
	h := l.holderOf(r.Scope)
	if h == nil {
		return
	}
	for i := range r.Bud {
		b := &r.Bud[i]
		if b.Win == 0 {
			continue
		}
		used := int64(0)
		if sent {
			used = budgetCost(h.Unit(b.ID), actual, 0)
		}
		if !sent || used != b.Cost {
			h.Adjust(b.ID, b.Win, used-b.Cost)
		}
		b.Win = 0
	}
}

// budgetChargeUngranted charges usage this log never granted (debt.go)
// to r's budgets: it was spent at the provider, so it counts, even past
// the lease (an overdraft the budget partition learns of with the
// holder's next report, and takes out of the next grants).
func (l *Ledger) budgetChargeUngranted(r *res, actual *[numDims]int64) {
	h := l.holderOf(r.Scope)
	if h == nil {
		return
	}
	for i := range r.Bud {
		h.Charge(r.Bud[i].ID, budgetCost(h.Unit(r.Bud[i].ID), actual, 0))
	}
}

// BudgetLease returns what scope holds of budget id in this partition
// (the auditors' view; false: no such holder or budget).
func (l *Ledger) BudgetLease(scope, id string) (budget.Lease, bool) {
	for _, h := range l.bud.holders {
		if h.Name() == scope {
			return h.Lease(id)
		}
	}
	return budget.Lease{}, false
}

// BudgetUsed sums what this partition's holders have used of budget id in
// their current windows (ok false: no holder of it here): the what-if's
// spent figure, summed over partitions.
func (l *Ledger) BudgetUsed(id string) (used int64, ok bool) {
	for _, h := range l.bud.holders {
		if ls, found := h.Lease(id); found {
			used, ok = used+ls.Used, true
		}
	}
	return used, ok
}

// BudgetOutstanding returns, for budget id if this partition is its
// budget partition, what its holders used or may still spend and its
// limit (ok false: it has no state for it).
func (l *Ledger) BudgetOutstanding(id string) (outstanding, limit int64, ok bool) {
	if l.bud.bp == nil || !l.bud.bp.Active() {
		return 0, 0, false
	}
	return l.bud.bp.Outstanding(id)
}

// BudgetGranted returns what the budget partition has granted holder of
// budget id in its current window (ok false: not this partition's).
func (l *Ledger) BudgetGranted(id, holder string) (granted int64, windowStartMs int64, ok bool) {
	if l.bud.bp == nil {
		return 0, 0, false
	}
	return l.bud.bp.Granted(id, holder)
}

// leaseGranted applies a LeaseGranted record to its holder and lets the
// holder's scope pump again: its waiters may fit now, or be denied.
func (l *Ledger) leaseGranted(g *schemas.LeaseGranted) {
	if l.budgetConfig() == nil {
		return
	}
	si := l.scopeOf(g.Holder)
	if si < 0 {
		return
	}
	if h := l.holderOf(si); h != nil {
		l.bud.out = h.Apply(l.st.Now, g, l.bud.out)
		l.st.Scopes[si].Dirty = true
	}
}

// budgetPartitionApply applies a LeaseRequested or LeaseReturned record:
// this partition is the budget partition of its budget id.
func (l *Ledger) budgetPartitionApply(ev *schemas.Event) {
	if l.budgetConfig() == nil {
		return
	}
	if l.bud.bp == nil {
		l.syncHolders()
	}
	if l.bud.bp == nil {
		return
	}
	for _, o := range l.bud.bp.Apply(l.st.Now, ev, nil) {
		g := o.Grant
		l.bud.out = append(l.bud.out, budget.Msg{Granted: &g})
	}
}

// budgetTick advances every holder's clock (terms, window rolls,
// resends); a holder that rolled a window may have room again. The
// budget partition's clock moves too: stale demand frees shares.
func (l *Ledger) budgetTick() {
	if l.bud.bp != nil && l.bud.bp.Active() {
		for _, o := range l.bud.bp.Apply(l.st.Now, nil, nil) {
			g := o.Grant
			l.bud.out = append(l.bud.out, budget.Msg{Granted: &g})
		}
	}
	for _, h := range l.bud.holders {
		n := len(l.bud.out)
		l.bud.out = h.Tick(l.st.Now, l.bud.out)
		if len(l.bud.out) > n {
			if si := l.scopeOf(h.Name()); si >= 0 {
				l.st.Scopes[si].Dirty = true
			}
		}
	}
}

// budgetWants states every holder's queued demand after an Apply: per
// budget, the sum and the smallest of the costs of its scope's waiters
// that spend it. A holder asks for a lease when they are short of it, and
// stops counting what is no longer queued (denied, expired, granted).
func (l *Ledger) budgetWants() {
	now := l.st.Now
	for _, h := range l.bud.holders {
		si := l.scopeOf(h.Name())
		if si < 0 {
			continue
		}
		var sum, need [maxBudgets * 4]int64
		var ids [maxBudgets * 4]string
		n := 0
		for _, ri := range l.st.Scopes[si].Queue {
			r := &l.st.Res[ri]
			for i := range r.Bud {
				k := 0
				for k < n && ids[k] != r.Bud[i].ID {
					k++
				}
				if k == n {
					if n == len(ids) {
						continue
					}
					ids[k] = r.Bud[i].ID
					n++
				}
				sum[k] += r.Bud[i].Cost
				if need[k] == 0 || r.Bud[i].Cost < need[k] {
					need[k] = r.Bud[i].Cost
				}
			}
		}
		l.bud.out = h.WantAll(now, ids[:n], sum[:n], need[:n], l.bud.out)
	}
}

// budgetWakeMs is the earliest time a holder has work.
func (l *Ledger) budgetWakeMs() (ms int64, ok bool) {
	for _, h := range l.bud.holders {
		if w, hok := h.NextWakeMs(); hok && (!ok || w < ms) {
			ms, ok = w, true
		}
	}
	return ms, ok
}

// freezeBudgetPartition encodes the budget partition for a snapshot.
func (l *Ledger) freezeBudgetPartition() json.RawMessage {
	if l.bud.bp == nil || !l.bud.bp.Active() {
		return nil
	}
	b, _ := l.bud.bp.MarshalSnapshot()
	return b
}

// freezeHolders encodes the holders for a snapshot.
func (l *Ledger) freezeHolders() []json.RawMessage {
	var out []json.RawMessage
	for _, h := range l.bud.holders {
		b, err := h.MarshalSnapshot()
		if err != nil {
			continue
		}
		out = append(out, b)
	}
	return out
}

// restoreHolders rebuilds the holders and the budget partition of a
// snapshot.
func (l *Ledger) restoreHolders(raw []json.RawMessage, bp json.RawMessage) error {
	cfg := l.budgetConfig()
	l.bud = budgetSide{}
	if cfg == nil {
		return nil
	}
	key, _ := json.Marshal(cfg)
	l.bud.cfgKey = string(key)
	var err error
	if len(bp) > 0 {
		l.bud.bp, err = budget.RestorePartition(*cfg, bp)
	} else {
		l.bud.bp, err = budget.NewPartition(*cfg)
	}
	if err != nil {
		return fmt.Errorf("budget partition: %w", err)
	}
	for i, b := range raw {
		h, err := budget.RestoreHolder(*cfg, b)
		if err != nil {
			return fmt.Errorf("budget holder %d: %w", i, err)
		}
		l.bud.holders = append(l.bud.holders, h)
	}
	sort.Slice(l.bud.holders, func(i, j int) bool { return l.bud.holders[i].Name() < l.bud.holders[j].Name() })
	return nil
}

// denyQueued denies a waiter whose verdict says waiting cannot help.
func (l *Ledger) denyQueued(ri int32, v *verdict, out []Output) []Output {
	r := &l.st.Res[ri]
	d, _ := l.decide(r, v)
	l.finish(ri, stDenied)
	l.st.Stats.Denied++
	return l.emit(out, r, d)
}
