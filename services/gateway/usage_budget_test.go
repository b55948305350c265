package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger/budget"
	"github.com/sluice-dev/sluice/schemas"
)

// budgetLevels is a BudgetSource over one real ledger that is both the
// budget partition and the holder of every scope, as SnapshotLevels is
// over restored snapshots.
type budgetLevels struct{ ledgerLevels }

func (s budgetLevels) Budget(id string, scopes []string) (int64, []budget.Lease, []string, int64, bool) {
	o, _, ok := s.l.BudgetOutstanding(id)
	var leases []budget.Lease
	var names []string
	for _, sc := range scopes {
		if l, found := s.l.BudgetLease(sc, id); found {
			leases, names = append(leases, l), append(names, sc)
		}
	}
	return o, leases, names, s.l.NowMs(), ok
}

// TestUsageShowsTheCallersBudgets: /v1/sluice/usage lists the budgets of
// the caller's tenant with what each provider scope's lease holds and has
// spent, and never another tenant's budget.
func TestUsageShowsTheCallersBudgets(t *testing.T) {
	y := strings.NewReplacer("KEYT", config.HashKey("sk-t"), "KEYU", config.HashKey("sk-u"),
		"  - {name: p, kind: openai, scope: s, base_url: \"http://127.0.0.1:1/v1\"}\n",
		"  - {name: p, kind: openai, scope: s, base_url: \"http://127.0.0.1:1/v1\"}\n"+
			"  - {name: a, kind: anthropic, scope: s2, base_url: \"http://127.0.0.1:1/v1\"}\n",
		"ledger:\n", "ledger:\n  budget:\n    budgets:\n"+
			"      - {id: t-daily, level: tenant, subject: t, unit: requests, limit: 10, window: day}\n"+
			"      - {id: u-daily, level: tenant, subject: u, unit: requests, limit: 5, window: day}\n").Replace(usageYAML) +
		"    - name: s2\n      buckets:\n        - {level: tenant, id: \"*\", dimension: requests, capacity: 600}\n"
	cfg := mustLoad(t, y)
	now := time.Now().UnixMilli()
	ul := newUsageLedger(t, cfg, now)
	for i, scope := range []string{"s", "s", "s2"} {
		id := "r" + string(rune('0'+i))
		ev := usageReserve(id, scope, "t", "k", schemas.PathLevel{Level: "org", ID: "shared-org"}, schemas.PathLevel{Level: "tenant", ID: "t"}, schemas.PathLevel{Level: "key", ID: "k"})
		ev.ReserveRequested.MaxWaitMs = 1000
		ul.apply(ev)
	}
	s := New(cfg, nil, nil, WithLevels(budgetLevels{ledgerLevels{ul.l}}))
	req := httptest.NewRequest("GET", "/v1/sluice/usage", nil)
	req.Header.Set("Authorization", "Bearer sk-t")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var u Usage
	if err := json.Unmarshal(rec.Body.Bytes(), &u); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rec.Body.String(), "u-daily") {
		t.Fatalf("t sees u's budget: %s", rec.Body.String())
	}
	if len(u.Budgets) != 1 {
		t.Fatalf("budgets %s", rec.Body.String())
	}
	b := u.Budgets[0]
	if b.ID != "t-daily" || b.Limit != 10 || b.Source != "ledger_snapshot" || b.Spent == nil || *b.Spent != 3 || *b.Remaining != 7 ||
		b.Outstanding == nil || *b.Outstanding < 3 || *b.Outstanding > 10 || len(b.Leases) != 2 {
		t.Fatalf("budget %s", rec.Body.String())
	}
	for i, want := range []struct {
		scope string
		used  int64
	}{{"s", 2}, {"s2", 1}} {
		if le := b.Leases[i]; le.Scope != want.scope || le.Used != want.used || le.Held != le.Granted-le.Returned-le.Used {
			t.Errorf("lease %d %+v, want scope %s used %d", i, le, want.scope, want.used)
		}
	}

	// Without a level source: the budget's limit, its use unobserved.
	rec = httptest.NewRecorder()
	New(cfg, nil, nil).ServeHTTP(rec, req)
	if !strings.Contains(rec.Body.String(), `"t-daily"`) || strings.Contains(rec.Body.String(), `"spent"`) {
		t.Errorf("without observations: %s", rec.Body.String())
	}
}

// TestAdminBudgetsOperatorOnly: GET /admin/v1/budgets lists every budget
// to the operator, and nothing without the operator token.
func TestAdminBudgetsOperatorOnly(t *testing.T) {
	y := strings.NewReplacer("KEYT", config.HashKey("sk-t"), "KEYU", config.HashKey("sk-u"),
		"ledger:\n", "ledger:\n  budget:\n    budgets:\n"+
			"      - {id: t-daily, level: tenant, subject: t, unit: requests, limit: 10, window: day}\n"+
			"      - {id: org-month, level: org, subject: shared-org, unit: spend_micros, limit: 5000000, window: month}\n").Replace(usageYAML)
	s := New(mustLoad(t, y), nil, nil)
	get := func(auth string) (int, string) {
		req := httptest.NewRequest("GET", "/admin/v1/budgets", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, _ := get("operator-token-0123456789"); code != 404 {
		t.Errorf("without an operator token configured: %d, want 404", code)
	}
	s.SetOperatorToken("operator-token-0123456789")
	for _, auth := range []string{"", "sk-t", "wrong-token-0123456789"} {
		if code, body := get(auth); code != 401 {
			t.Errorf("auth %q: %d %s, want 401", auth, code, body)
		}
	}
	code, body := get("operator-token-0123456789")
	var ab AdminBudgets
	if err := json.Unmarshal([]byte(body), &ab); err != nil || code != 200 || len(ab.Budgets) != 2 {
		t.Fatalf("%d %s", code, body)
	}
	if ab.Budgets[1].ID != "org-month" || ab.Budgets[1].Subject != "shared-org" || ab.Budgets[1].Source != "unobserved" {
		t.Errorf("org budget %+v", ab.Budgets[1])
	}
}
