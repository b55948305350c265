package live

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestProjectionBudgets: the view follows a budget's leases per scope
// from the lease messages, keeps a holder's newest counters (a repeated
// or older message changes nothing), restarts them in a new window, and
// shows a tenant only its own tenant budgets.
func TestProjectionBudgets(t *testing.T) {
	c := newClock()
	p := NewProjection(0, c.Now)
	cfg := eventid.New(schemas.TypeConfigChanged, 0)
	cfg.ConfigChanged = &schemas.ConfigChanged{Ledger: []byte(`{"budget":{"budgets":[
	 {"id":"acme-daily","level":"tenant","subject":"acme","unit":"requests","limit":100,"window":"day"},
	 {"id":"zeta-daily","level":"tenant","subject":"zeta","unit":"tokens","limit":9,"window":"day"}]}}`)}
	req := func(holder string, win, seq, used, returned int64) *schemas.Event {
		ev := eventid.New(schemas.TypeLeaseRequested, 0)
		ev.LeaseRequested = &schemas.LeaseRequested{Budget: "acme-daily", Holder: holder, WindowStartMs: win, Seq: seq, Used: used, Returned: returned}
		return ev
	}
	grant := func(holder string, win, granted, target int64) *schemas.Event {
		ev := eventid.New(schemas.TypeLeaseGranted, 0)
		ev.LeaseGranted = &schemas.LeaseGranted{Budget: "acme-daily", Holder: holder, WindowStartMs: win, Granted: granted, Target: target}
		return ev
	}
	ret := eventid.New(schemas.TypeLeaseReturned, 0)
	ret.LeaseReturned = &schemas.LeaseReturned{Budget: "acme-daily", Holder: "openai:a", WindowStartMs: 1000, Seq: 3, Used: 30, Returned: 10}
	p.Apply(cfg, req("openai:a", 1000, 1, 0, 0), grant("openai:a", 1000, 40, 40), req("openai:a", 1000, 2, 25, 0),
		ret, req("openai:a", 1000, 2, 99, 0), // a repeat of an older Seq: ignored
		grant("openai:a", 1000, 35, 35), // an older grant: ignored
		req("anthropic:b", 1000, 1, 0, 0), grant("anthropic:b", 1000, 20, 20), req("anthropic:b", 1000, 2, 12, 0))
	b := p.Snapshot().Budgets
	if len(b) != 2 || b[0].ID != "acme-daily" || b[0].Limit != 100 || b[0].Spent != 42 || len(b[0].Leases) != 2 {
		t.Fatalf("budgets %+v", b)
	}
	want := []LeaseRow{{Scope: "anthropic:b", WindowStartMs: 1000, Granted: 20, Used: 12, Held: 8, Target: 20},
		{Scope: "openai:a", WindowStartMs: 1000, Granted: 40, Returned: 10, Used: 30, Held: 0, Target: 40}}
	for i := range want {
		if b[0].Leases[i] != want[i] {
			t.Errorf("lease %d %+v, want %+v", i, b[0].Leases[i], want[i])
		}
	}
	// A new window restarts the holder's counters.
	p.Apply(req("openai:a", 2000, 4, 1, 0))
	if l := p.Snapshot().Budgets[0].Leases[1]; l.WindowStartMs != 2000 || l.Used != 1 || l.Granted != 0 {
		t.Errorf("new window %+v", l)
	}
	if tb := p.TenantSnapshot("zeta").Budgets; len(tb) != 1 || tb[0].ID != "zeta-daily" || len(tb[0].Leases) != 0 {
		t.Errorf("zeta's view %+v, want its budget only", tb)
	}
}
