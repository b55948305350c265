//go:build integration

package loadtest

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestStackBudgetTwoProvidersRealBroker is issue 23's headline run through
// the real gateway, two ledgers at their default settings and the
// simulator: tenant acme's one daily budget of 100 requests, spent by
// traffic on an OpenAI route and then an Anthropic route (each falling
// back to the other) at 3× the rate that spends it in the run. What the
// committed log says was spent never exceeds the budget (by the holders'
// counters and by the granted attempts that were not given back), the
// client saw no more successes than the budget, and the providers sent no
// 429. Timing (the share's follow time) is reported, not asserted.
func TestStackBudgetTwoProvidersRealBroker(t *testing.T) {
	sc, err := LoadScenario("budget-two-providers", "../../deploy/scenarios")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Brokers: bus.SplitBrokers(testenv.KafkaBrokers(t)), SluiceBin: buildSluice(t), Retries: -1,
		ConfigFile: "../../deploy/scenarios/gateway/budget-two-providers.yaml"}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	rep, err := Execute(ctx, sc, o, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	st := rep.Stack
	if st == nil || len(st.Budgets) != 1 {
		t.Fatalf("stack report without the one budget: %+v", st)
	}
	b := st.Budgets[0]
	t.Logf("budget %+v", b)
	t.Logf("provider_429 %d, served %d of %d, decisions %v", rep.Provider429, rep.Totals.Outcomes.Success, rep.Totals.Requests, rep.Totals.GatewayDecisions)
	if b.ID != "acme-daily" || b.Limit != 100 || b.Unit != "requests" {
		t.Fatalf("budget %s %d %s, want acme-daily 100 requests", b.ID, b.Limit, b.Unit)
	}
	if b.Overspend != 0 || b.Spent > b.Limit || b.GrantedAttempts > b.Limit {
		t.Errorf("overspend %d: spent %d, granted attempts %d of %d", b.Overspend, b.Spent, b.GrantedAttempts, b.Limit)
	}
	if s := int64(rep.Totals.Outcomes.Success); s > b.Limit {
		t.Errorf("%d requests served against a budget of %d requests", s, b.Limit)
	}
	if rep.Provider429 != 0 {
		t.Errorf("provider_429 = %d, want 0", rep.Provider429)
	}
	if len(b.Holders) != 2 {
		t.Errorf("holders %+v, want the OpenAI and the Anthropic scope", b.Holders)
	}
	for _, h := range b.Holders {
		if h.Spent == 0 {
			t.Errorf("scope %s spent nothing of the budget: the share did not follow its demand", h.Scope)
		}
	}
	if st.DecisionsDoubled != 0 {
		t.Errorf("decisions doubled %d, want 0", st.DecisionsDoubled)
	}
}
