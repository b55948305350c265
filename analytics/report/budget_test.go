package report

import (
	"testing"

	"github.com/sluice-dev/sluice/analytics"
)

// TestBudgetSummary: the budget_burn sentence adds each budget's holders
// up per window (spent, % of the limit, by provider, leased unspent) and
// says so when a budget is overspent or has no limit in the log.
func TestBudgetSummary(t *testing.T) {
	cols := []string{"budget", "unit", "window_start_ms", "holder", "provider", "budget_limit", "spent", "granted", "returned", "outstanding", "pct_of_limit", "lease_messages"}
	const day = int64(1795392000000) // 2026-11-23
	for _, c := range []struct {
		name string
		rows [][]any
		want string
	}{
		{"none", nil, "No lease messages in this range: no cross-scope budget (ledger.budget) was spent."},
		{"two providers", [][]any{
			{"acme-daily", "requests", day, "anthropic:acme", "anthropic", int64(100), int64(25), int64(40), int64(0), int64(15), 25.0, int64(3)},
			{"acme-daily", "requests", day, "openai:acme", "openai", int64(100), int64(40), int64(60), int64(20), int64(0), 40.0, int64(5)},
		}, "acme-daily (window from 2026-11-23): 65 of 100 requests spent (65.0 %) — anthropic 25, openai 40; 15 leased and not spent."},
		{"overspent, no limit", [][]any{
			{"b1", "tokens", day, "openai:x", "openai", int64(10), int64(12), int64(12), int64(0), int64(0), 120.0, int64(2)},
			{"b2", "", day, "openai:x", "openai", int64(0), int64(7), int64(9), int64(0), int64(2), 0.0, int64(2)},
		}, "b1 (window from 2026-11-23): 12 of 10 tokens spent (120.0 %), OVERSPENT by 2 — openai 12; b2 (window from 2026-11-23): 7 spent (no limit in the log's config) — openai 7; 2 leased and not spent."},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := budgetSummary(&analytics.Result{Columns: cols, Rows: c.rows}); got != c.want {
				t.Errorf("budgetSummary =\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}
