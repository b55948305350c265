package main

import (
	"runtime"

	"github.com/sluice-dev/sluice/ledger"
)

// benchLedger measures the pure state machine on one core: a reserve +
// reconcile workload over a 6-level path with 4 dimensions per level, and
// the state size of 100,000 tenants × 3 model profiles in one scope.
func benchLedger(n int) (any, error) {
	if n <= 0 {
		n = 2_000_000
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	w := ledger.NewBenchWorkload()
	w.Run(1 << 13) // warm up: fill the request-id pool and dedup window
	var res ledger.BenchResult
	ns, allocs := measure(1, func(int) { res = w.Run(n) })
	nsPerEvent := ns / float64(res.Events)
	nsPerDecision := ns / float64(res.Decisions)
	size := ledger.MeasureStateSize(100_000, 3)
	return map[string]any{
		"bench":                 "ledger",
		"workload":              "reserve+reconcile, 6-level path, 4 dimensions per level",
		"events":                res.Events,
		"decisions":             res.Decisions,
		"decisions_per_sec":     1e9 / nsPerDecision,
		"ns_per_decision":       nsPerDecision,
		"ns_per_event":          nsPerEvent,
		"allocs_per_decision":   allocs / float64(res.Decisions),
		"bytes_per_bucket":      size.BytesPerBucket,
		"state_100k_tenants_x3": size,
		"go":                    runtime.Version(),
	}, nil
}
