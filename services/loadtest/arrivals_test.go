package loadtest

import (
	"math"
	"reflect"
	"testing"
	"time"
)

func arrivalScenario(t *testing.T) *Scenario {
	t.Helper()
	sc, err := ParseScenario([]byte(`name: gen
duration: 100s
tenants:
  - {id: a, rate: 5}
  - {id: b, rate: 2, ramp_to: 8, cancel_fraction: 0.25, cancel_after: 1s}
  - id: c
    rate: 1
    start: 10s
    end: 60s
    bursts: [{at: 20s, for: 5s, rate: 40}]
`), "gen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestScheduleDeterministic(t *testing.T) {
	sc := arrivalScenario(t)
	a := Schedule(sc, 42, 100*time.Second)
	b := Schedule(sc, 42, 100*time.Second)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different schedules")
	}
	c := Schedule(sc, 43, 100*time.Second)
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same schedule")
	}
	for i := 1; i < len(a); i++ {
		if a[i].At < a[i-1].At {
			t.Fatalf("schedule not sorted at %d", i)
		}
	}
	// A tenant's arrivals do not depend on the other tenants.
	one := TenantArrivals(sc, 0, 42, 100*time.Second)
	var fromAll []Arrival
	for _, x := range a {
		if x.Tenant == 0 {
			fromAll = append(fromAll, x)
		}
	}
	if !reflect.DeepEqual(one, fromAll) {
		t.Fatal("tenant 0's arrivals change when merged")
	}
}

func TestArrivalRates(t *testing.T) {
	sc := arrivalScenario(t)
	dur := 100 * time.Second
	// With a fixed seed the counts are fixed; check they are near the mean
	// (Poisson: sd = sqrt(mean); allow 4 sd).
	for i := range sc.Tenants {
		arr := TenantArrivals(sc, i, 7, dur)
		mean := OfferedRate(&sc.Tenants[i], dur) * dur.Seconds()
		if d := math.Abs(float64(len(arr)) - mean); d > 4*math.Sqrt(mean) {
			t.Errorf("tenant %s: %d arrivals, mean %.1f", sc.Tenants[i].ID, len(arr), mean)
		}
	}
	// OfferedRate: a constant 5; b ramps 2→8 (mean 5); c = 1 × 50 s + 40 × 5 s over 100 s = 2.5.
	for i, want := range []float64{5, 5, 2.5} {
		if got := OfferedRate(&sc.Tenants[i], dur); math.Abs(got-want) > 0.01 {
			t.Errorf("offered rate of %s = %v, want %v", sc.Tenants[i].ID, got, want)
		}
	}
	// Tenant c: nothing outside [10s, 60s); the burst is dense.
	burst := 0
	for _, x := range TenantArrivals(sc, 2, 7, dur) {
		if x.At < 10*time.Second || x.At >= 60*time.Second {
			t.Fatalf("arrival at %s outside the active interval", x.At)
		}
		if x.At >= 20*time.Second && x.At < 25*time.Second {
			burst++
		}
	}
	if burst < 150 || burst > 260 {
		t.Errorf("burst window arrivals %d, want about 205", burst)
	}
	// Cancels: about a quarter of b's requests, each within cancel_after.
	arr := TenantArrivals(sc, 1, 7, dur)
	n := 0
	for _, x := range arr {
		if x.Cancel {
			n++
			if x.CancelAt < 0 || x.CancelAt >= time.Second {
				t.Fatalf("cancel at %s", x.CancelAt)
			}
		}
	}
	if f := float64(n) / float64(len(arr)); f < 0.18 || f > 0.32 {
		t.Errorf("cancel fraction %.2f, want about 0.25", f)
	}
}
