package config_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
)

// budgetDoc is the base document with a cross-scope budget in its ledger
// section (ledger.Config.Budget): the gateway publishes it with the rest
// of the quota document, and the ledger runs it (ledger/budget).
func budgetDoc(budget string) string {
	return strings.Replace(doc(`  - {model: m, provider: oa}`, ""), "ledger:\n", "ledger:\n  budget:\n"+budget, 1)
}

func TestBudgetConfigPublished(t *testing.T) {
	c, err := config.Load(strings.NewReader(budgetDoc(`    term_ms: 3000
    budgets:
      - {id: t-daily, level: tenant, subject: t, unit: spend_micros, limit: 200000000, window: day}
`)))
	if err != nil {
		t.Fatal(err)
	}
	var lc struct {
		Budget struct {
			TermMs  int64 `json:"term_ms"`
			RetryMs int64 `json:"retry_ms"`
			Budgets []struct {
				ID    string `json:"id"`
				Limit int64  `json:"limit"`
			} `json:"budgets"`
		} `json:"budget"`
	}
	if err := json.Unmarshal(c.LedgerJSON(), &lc); err != nil {
		t.Fatal(err)
	}
	b := lc.Budget
	if b.TermMs != 3000 || b.RetryMs != 500 || len(b.Budgets) != 1 || b.Budgets[0].ID != "t-daily" || b.Budgets[0].Limit != 200000000 {
		t.Fatalf("published budget %+v (want term 3000, the default retry 500, t-daily of 200000000)", b)
	}
}

func TestBudgetConfigProblemsPlaced(t *testing.T) {
	_, err := config.Load(strings.NewReader(budgetDoc(`    budgets:
      - {id: t-daily, level: provider, subject: t, unit: dollars, limit: 5, window: week}
`)))
	var ve *config.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("bad budget accepted: %v", err)
	}
	for _, want := range []string{"budgets[0].level", "budgets[0].unit", "budgets[0].window"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
	for _, p := range ve.Problems {
		if p.Pos.Line == 0 {
			t.Errorf("problem without a position: %s", ve.Line(p))
		}
	}
}
