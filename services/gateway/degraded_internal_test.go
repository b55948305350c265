package gateway

import (
	"testing"

	"github.com/sluice-dev/sluice/admission/lifecycle"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/ledger/budget"
	"github.com/sluice-dev/sluice/schemas"
)

// TestDegradedBucketFromConfigAndSnapshot: how a configured bucket and the
// snapshot's observation of it become the budget's view: the burst is the
// token bucket's enforcement window (the most the ledger lets out at
// once), a window bucket's whole period; what the snapshot says is left
// wins over "untouched, full"; ramp buckets are the ledger's alone.
func TestDegradedBucketFromConfigAndSnapshot(t *testing.T) {
	pl := schemas.PathLevel{Level: ledger.LevelDeployment, ID: "d"}
	tests := []struct {
		name string
		bc   ledger.BucketConfig
		obs  []ledger.BucketLevel
		want lifecycle.DegradedBucket
		skip bool
	}{
		{"token, default window, untouched", ledger.BucketConfig{Dimension: schemas.DimRequests, Capacity: 600},
			nil, lifecycle.DegradedBucket{Capacity: 600, PeriodMs: 60_000, BurstUnits: 10, Remaining: 10}, false},
		{"token, 10 s window, observed in debt", ledger.BucketConfig{Dimension: schemas.DimInputTokens, Capacity: 60_000, PeriodMs: 60_000, WindowMs: 10_000},
			[]ledger.BucketLevel{{Dimension: schemas.DimRequests, Remaining: 3}, {Dimension: schemas.DimInputTokens, Remaining: -50}},
			lifecycle.DegradedBucket{Capacity: 60_000, PeriodMs: 60_000, BurstUnits: 10_000, Remaining: -50}, false},
		{"requests per day: fixed window", ledger.BucketConfig{Dimension: schemas.DimRequestsPerDay, Capacity: 1000},
			[]ledger.BucketLevel{{Dimension: schemas.DimRequestsPerDay, Remaining: 40}},
			lifecycle.DegradedBucket{Capacity: 1000, PeriodMs: 86_400_000, BurstUnits: 1000, Remaining: 40}, false},
		{"concurrency", ledger.BucketConfig{Dimension: schemas.DimConcurrency, Capacity: 16},
			nil, lifecycle.DegradedBucket{Concurrency: true, Capacity: 16, Remaining: 16}, false},
		{"ramp", ledger.BucketConfig{Dimension: schemas.DimRamp, Capacity: 5}, nil, lifecycle.DegradedBucket{}, true},
	}
	for _, tc := range tests {
		got, ok := degradedBucket("s", pl, &tc.bc, tc.obs)
		if ok == tc.skip {
			t.Errorf("%s: used = %v, want %v", tc.name, ok, !tc.skip)
			continue
		}
		if tc.skip {
			continue
		}
		tc.want.Key = "s/deployment:d/" + string(tc.bc.Dimension)
		if got != tc.want {
			t.Errorf("%s:\n got  %+v\n want %+v", tc.name, got, tc.want)
		}
	}
	req := &lifecycle.Request{Estimate: lifecycle.Usage{InputTokens: 100, OutputTokens: 50}, MaxOutputTokens: 200}
	tg := &lifecycle.Target{InputCostPerMTok: 1, OutputCostPerMTok: 2}
	for dim, want := range map[schemas.Dimension]int64{schemas.DimRequests: 1, schemas.DimConcurrency: 1, schemas.DimInputTokens: 100,
		schemas.DimOutputTokens: 200, schemas.DimTotalTokens: 300, schemas.DimSpend: 200, schemas.DimRamp: 0} {
		if got := degradedNeed(dim, req, tg); got != want {
			t.Errorf("need of %s = %d, want %d", dim, got, want)
		}
	}
}

// budgetLeases is a LevelSource and BudgetSource that knows one lease
// per scope of every budget (nil: none), and no bucket levels.
type budgetLeases map[string]budget.Lease

func (budgetLeases) Levels(string, string, string, int64) ([]ledger.BucketLevel, int64, bool) {
	return nil, 0, true
}

func (b budgetLeases) Budget(id string, scopes []string) (int64, []budget.Lease, []string, int64, bool) {
	var ls []budget.Lease
	var ss []string
	for _, s := range scopes {
		if l, ok := b[s]; ok && l.Budget == id {
			ls, ss = append(ls, l), append(ss, s)
		}
	}
	return 0, ls, ss, 1, len(ls) > 0
}

// TestDegradedBudgets: a degraded admission is bounded by what the
// scope's lease of each budget its path spends still held at the last
// snapshot, with no refill; a budget whose lease no snapshot holds leaves
// the scope nothing; a budget the path does not name is not charged. The
// lifecycle's share then admits Share × held (1 gateway, share 0.5: 2 of
// a lease holding 4).
func TestDegradedBudgets(t *testing.T) {
	doc := &ledger.Config{Budget: &budget.Config{Budgets: []budget.Budget{
		{ID: "acme-daily", Level: ledger.LevelTenant, Subject: "acme", Unit: budget.UnitRequests, Limit: 100, Window: budget.WindowDay}}}}
	req := &lifecycle.Request{Estimate: lifecycle.Usage{InputTokens: 100, OutputTokens: 50}, MaxOutputTokens: 200}
	acme := &lifecycle.Target{Scope: "openai:o/main", Path: []schemas.PathLevel{{Level: ledger.LevelTenant, ID: "acme"}}}
	other := &lifecycle.Target{Scope: "openai:o/main", Path: []schemas.PathLevel{{Level: ledger.LevelTenant, ID: "beta"}}}
	held4 := budgetLeases{"openai:o/main": {Budget: "acme-daily", Granted: 10, Returned: 2, Used: 4}}
	tests := []struct {
		name      string
		src       LevelSource
		t         *lifecycle.Target
		want      []lifecycle.DegradedBucket
		known     bool
		admitted  int
		wantShare bool
	}{
		{"lease holds 4", held4, acme, []lifecycle.DegradedBucket{{Key: "budget:acme-daily/lease:openai:o/main", BurstUnits: 4, Remaining: 4, Need: 1}}, true, 2, true},
		{"no lease in any snapshot", budgetLeases{}, acme, nil, false, 0, false},
		{"no budget source", nil, acme, nil, false, 0, false},
		{"budget not on the path", held4, other, nil, true, 0, false},
	}
	for _, tc := range tests {
		s := &Server{levels: tc.src}
		got, ok := s.degradedBudgets(doc, tc.t, req)
		if ok != tc.known || len(got) != len(tc.want) {
			t.Errorf("%s: %+v known %v, want %+v known %v", tc.name, got, ok, tc.want, tc.known)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: bucket %+v, want %+v", tc.name, got[i], tc.want[i])
			}
		}
		if !tc.wantShare {
			continue
		}
		d := lifecycle.NewDegraded(lifecycle.DegradedConfig{Share: 0.5, MaxMs: 60_000})
		n := 0
		for range 10 {
			if d.Admit(1000, tc.t.Scope, true, 1, got) == lifecycle.DegradedAdmitted {
				n++
			}
		}
		if n != tc.admitted {
			t.Errorf("%s: %d admitted of 10, want %d", tc.name, n, tc.admitted)
		}
	}
}
