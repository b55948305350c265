package loadtest

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/services/sim"
)

// TestStormReport: successes by completion second against a capacity storm
// from 10 s to 30 s at 30 % of 600 RPM, offered 8 requests/s: 3 a second
// are allowed inside it (60), and the full rate (8/s) is back once two
// consecutive seconds reach 90 % of it.
func TestStormReport(t *testing.T) {
	sc := &Scenario{Provider: "openai", Model: "m", SimConfig: sim.Config{
		Providers: map[string]sim.ProviderConfig{"openai": {Limits: sim.Limits{RPM: 600}}},
		Storms: []sim.Storm{{Kind: sim.StormCapacity, Start: sim.Duration(10 * time.Second),
			End: sim.Duration(30 * time.Second), Fraction: 0.3}},
	}}
	var recs []record
	add := func(sec, n int) {
		for i := range n {
			recs = append(recs, record{outcome: "success", doneAt: time.Duration(sec)*time.Second + time.Duration(i)*time.Millisecond})
		}
	}
	for s := range 10 {
		add(s, 8)
	}
	for s := 10; s < 30; s++ {
		add(s, 2) // 40 inside the storm
	}
	add(30, 5)
	add(31, 6)
	add(32, 8) // 30+31: 11, 31+32: 14 (< 14.4), 32+33: 16: back 2 s after
	add(33, 8)
	recs = append(recs, record{outcome: "timeout", doneAt: 12 * time.Second})
	got := stormReport(sc, recs, 40*time.Second, 8)
	if got == nil {
		t.Fatal("no storm report")
	}
	if got.Served != 40 || got.Allowed != 60 || got.ServedRatio != ratio(40, 60) || got.FullRPS != 8 || got.RecoveredS != 2 {
		t.Errorf("served %d allowed %v ratio %v full %v recovered %v; want 40 60 %v 8 2",
			got.Served, got.Allowed, got.ServedRatio, got.FullRPS, got.RecoveredS, ratio(40, 60))
	}
	if n := len(got.ServedPerS); n != 41 || got.ServedPerS[12] != 2 {
		t.Errorf("served_per_s has %d seconds, [12] = %d; want 41, 2", n, got.ServedPerS[12])
	}
	// No capacity storm: no report.
	sc.SimConfig.Storms[0].Kind = "429"
	if stormReport(sc, recs, 40*time.Second, 8) != nil {
		t.Error("a counter storm got a capacity storm report")
	}
}
