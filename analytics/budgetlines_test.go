package analytics

import "testing"

// TestBudgetLines: a ConfigChanged's budgets become one flat JSON object a
// line (what budget_burn reads on 18.16, which cannot decode the payload's
// base64 ledger document); documents without budgets give "".
func TestBudgetLines(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"two budgets", `{"scopes":[],"budget":{"term_ms":2000,"budgets":[` +
			`{"id":"acme-daily","level":"tenant","subject":"acme","unit":"requests","limit":100,"window":"day"},` +
			`{"id":"k-roll","level":"key","subject":"k1","unit":"tokens","limit":5,"window":"rolling","rolling_ms":3600000,"slots":6}]}}`,
			`{"id":"acme-daily","level":"tenant","subject":"acme","unit":"requests","limit":100,"window":"day"}` + "\n" +
				`{"id":"k-roll","level":"key","subject":"k1","unit":"tokens","limit":5,"window":"rolling"}`},
		{"no budget section", `{"scopes":[]}`, ""},
		{"empty", ``, ""},
		{"not json", `{`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := BudgetLines([]byte(c.doc)); got != c.want {
				t.Errorf("BudgetLines = %q, want %q", got, c.want)
			}
		})
	}
}
