package gateway

import (
	"testing"

	"github.com/sluice-dev/sluice/admission/lifecycle"
	"github.com/sluice-dev/sluice/ledger"
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
