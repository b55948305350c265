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
	size := stateSize(100_000, 3)
	return map[string]any{
		"bench":                 "ledger",
		"workload":              "reserve+reconcile, 6-level path, 4 dimensions per level",
		"events":                res.Events,
		"decisions":             res.Decisions,
		"decisions_per_sec":     1e9 / nsPerDecision,
		"ns_per_decision":       nsPerDecision,
		"ns_per_event":          nsPerEvent,
		"allocs_per_decision":   allocs / float64(res.Decisions),
		"bytes_per_bucket":      size["bytes_per_bucket"],
		"state_100k_tenants_x3": size,
		"go":                    runtime.Version(),
	}, nil
}

// stateSize measures the live heap of a ledger holding tenants × profiles
// nodes in one scope (GC before and after, so only retained state counts).
func stateSize(tenants, profiles int) map[string]any {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := ledger.NewStateSizeLedger(tenants, profiles)
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := after.HeapAlloc - before.HeapAlloc
	// A tenant node and a tenant×profile node, 4 buckets each (see
	// ledger.NewStateSizeLedger).
	buckets := tenants * (1 + profiles) * 4
	runtime.KeepAlive(l)
	return map[string]any{"tenants": tenants, "profiles": profiles, "buckets": buckets,
		"heap_bytes": heap, "heap_mib": float64(heap) / (1 << 20), "bytes_per_bucket": float64(heap) / float64(buckets)}
}
