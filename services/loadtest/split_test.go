package loadtest

import (
	"encoding/json"
	"testing"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// TestSplitGuaranteedShares: noisy-neighbor's generated ledger document
// with its scope split over 2 and 4 partitions loads, and each
// sub-scope keeps the guaranteed tenant's fraction of its share (bulk's
// baseline is half its requests bucket there, as in the whole scope),
// the baselines summing to the whole's; the deployment's borrow reserve
// shrinks with its burst. Before the split divided baselines, the 2-way
// split gave bulk a baseline equal to its whole share (nothing it took
// there was borrowed) and the 4-way split was refused at load. What the
// division does not change: each tenant has one key, so it is confined
// to one sub-scope and its requests bucket there (services/loadtest
// README, "Split scopes").
func TestSplitGuaranteedShares(t *testing.T) {
	sc, err := LoadScenario("noisy-neighbor", "")
	if err != nil {
		t.Fatal(err)
	}
	whole, err := LedgerConfig(sc)
	if err != nil {
		t.Fatal(err)
	}
	var tb ledger.BucketConfig
	for _, b := range whole.Scopes[0].Buckets {
		if b.Level == ledger.LevelTenant && b.ID == "bulk" {
			tb = b
		}
	}
	if tb.Guaranteed == 0 {
		t.Fatal("no guaranteed bucket for bulk")
	}
	for _, n := range []int{2, 4} {
		doc := whole
		doc.Scopes = append([]ledger.ScopeConfig(nil), whole.Scopes...)
		doc.Scopes[0].Partitions = n
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ledger.ParseConfig(b)
		if err != nil {
			t.Fatalf("%d partitions: %v", n, err)
		}
		var gSum int64
		for i := range n {
			for _, sc := range cfg.Scopes {
				if sc.Name != ledger.SubScope(simScope, i) {
					continue
				}
				for _, b := range sc.Buckets {
					switch {
					case b.Level == ledger.LevelTenant && b.ID == "bulk":
						if 2*b.Guaranteed < b.Capacity-1 || 2*b.Guaranteed > b.Capacity+1 {
							t.Errorf("%d partitions, sub-scope %d: bulk's baseline %d of %d, want half", n, i, b.Guaranteed, b.Capacity)
						}
						gSum += b.Guaranteed
					case b.Level == ledger.LevelDeployment && b.Dimension == schemas.DimRequests:
						if b.BorrowReserve > b.Capacity*b.WindowMs/b.PeriodMs {
							t.Errorf("%d partitions: a borrow reserve of %d is above the sub-scope's burst", n, b.BorrowReserve)
						}
					}
				}
			}
		}
		if gSum != tb.Guaranteed {
			t.Errorf("%d partitions: bulk's baselines sum to %d, want %d", n, gSum, tb.Guaranteed)
		}
	}
}
