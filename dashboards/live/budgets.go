package live

import (
	"encoding/json"
	"sort"

	"github.com/sluice-dev/sluice/schemas"
)

// BudgetRow is one budget across providers (ledger.budget) as the live
// view follows it on sluice.requests: its config (the newest
// ConfigChanged) and the lease messages between its budget partition and
// the scopes that hold it (ledger/budget README).
type BudgetRow struct {
	ID      string `json:"id"`
	Level   string `json:"level"`
	Subject string `json:"subject"`
	Unit    string `json:"unit"`
	Window  string `json:"window"`
	Limit   int64  `json:"limit"`
	// Spent is the sum over holders of the Used of their newest message
	// in the current window.
	Spent  int64      `json:"spent"`
	Leases []LeaseRow `json:"leases"`
}

// LeaseRow is what one scope holds of a budget in its current window.
type LeaseRow struct {
	Scope         string `json:"scope"`
	WindowStartMs int64  `json:"window_start_ms"`
	Granted       int64  `json:"granted"`
	Returned      int64  `json:"returned"`
	Used          int64  `json:"used"`
	// Held is Granted − Returned − Used (not below 0): the lease's unspent
	// part.
	Held   int64 `json:"held"`
	Target int64 `json:"target"`
}

type budgetDef struct {
	Level   string `json:"level"`
	Subject string `json:"subject"`
	Unit    string `json:"unit"`
	Window  string `json:"window"`
	Limit   int64  `json:"limit"`
}

type leaseState struct {
	row LeaseRow
	seq int64 // the holder's newest Seq applied
}

// budgetEvent applies a ConfigChanged or a lease message. The caller holds
// p.mu.
func (p *Projection) budgetEvent(ev *schemas.Event) {
	holder := func(budget, scope string, windowMs int64) *leaseState {
		k := [2]string{budget, scope}
		ls := p.leases[k]
		if ls == nil {
			if len(p.leases) >= maxFlight {
				return nil
			}
			ls = &leaseState{row: LeaseRow{Scope: scope, WindowStartMs: windowMs}}
			p.leases[k] = ls
		}
		if windowMs > ls.row.WindowStartMs { // a new window: counters restart
			ls.row = LeaseRow{Scope: scope, WindowStartMs: windowMs}
		}
		if windowMs < ls.row.WindowStartMs {
			return nil // an older window's message
		}
		return ls
	}
	switch {
	case ev.ConfigChanged != nil:
		var doc struct {
			Budget *struct {
				Budgets []struct {
					ID string `json:"id"`
					budgetDef
				} `json:"budgets"`
			} `json:"budget"`
		}
		if json.Unmarshal(ev.ConfigChanged.Ledger, &doc) != nil {
			return
		}
		p.budgetDefs = map[string]budgetDef{}
		if doc.Budget != nil {
			for _, b := range doc.Budget.Budgets {
				p.budgetDefs[b.ID] = b.budgetDef
			}
		}
	case ev.LeaseRequested != nil:
		m := ev.LeaseRequested
		if ls := holder(m.Budget, m.Holder, m.WindowStartMs); ls != nil && m.Seq > ls.seq {
			ls.seq, ls.row.Used, ls.row.Returned = m.Seq, m.Used, m.Returned
		}
	case ev.LeaseReturned != nil:
		m := ev.LeaseReturned
		if ls := holder(m.Budget, m.Holder, m.WindowStartMs); ls != nil && m.Seq > ls.seq {
			ls.seq, ls.row.Used, ls.row.Returned = m.Seq, m.Used, m.Returned
		}
	case ev.LeaseGranted != nil:
		m := ev.LeaseGranted
		if ls := holder(m.Budget, m.Holder, m.WindowStartMs); ls != nil && m.Granted >= ls.row.Granted {
			ls.row.Granted, ls.row.Target = m.Granted, m.Target
		}
	}
}

// budgetRows lists the budgets (a tenant's view: only its own tenant
// budgets, since the view does not know which teams and keys are its).
// The caller holds p.mu.
func (p *Projection) budgetRows(tenant string, filter bool) []BudgetRow {
	out := []BudgetRow{}
	for id, d := range p.budgetDefs {
		if filter && (d.Level != "tenant" || d.Subject != tenant) {
			continue
		}
		r := BudgetRow{ID: id, Level: d.Level, Subject: d.Subject, Unit: d.Unit, Window: d.Window, Limit: d.Limit, Leases: []LeaseRow{}}
		for k, ls := range p.leases {
			if k[0] != id {
				continue
			}
			l := ls.row
			l.Held = max(0, l.Granted-l.Returned-l.Used)
			r.Spent += l.Used
			r.Leases = append(r.Leases, l)
		}
		sort.Slice(r.Leases, func(i, j int) bool { return r.Leases[i].Scope < r.Leases[j].Scope })
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
