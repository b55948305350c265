package loadtest

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Arrival is one logical request of the open-loop schedule.
type Arrival struct {
	At     time.Duration // offset from the start of the run
	Tenant int           // index into Scenario.Tenants
	Seq    int           // per-tenant sequence number
	// Cancel marks a request the client abandons at CancelAt after sending.
	Cancel   bool
	CancelAt time.Duration
	// Seed seeds this request's own randomness (retry jitter).
	Seed uint64
}

// rateAt is tenant t's arrival rate (requests/s) at offset x of a run of
// length dur: the base rate (linearly ramped to RampTo) over [Start, End)
// plus every active burst.
func rateAt(t *TenantSpec, x, dur time.Duration) float64 {
	end := t.End.D()
	if end == 0 || end > dur {
		end = dur
	}
	r := 0.0
	if x >= t.Start.D() && x < end {
		r = t.Rate
		if t.RampTo > 0 && end > t.Start.D() {
			frac := float64(x-t.Start.D()) / float64(end-t.Start.D())
			r = t.Rate + (t.RampTo-t.Rate)*frac
		}
	}
	for _, b := range t.Bursts {
		if x >= b.At.D() && x < b.At.D()+b.For.D() {
			r += b.Rate
		}
	}
	return r
}

func maxRate(t *TenantSpec) float64 {
	m := math.Max(t.Rate, t.RampTo)
	for _, b := range t.Bursts {
		m += b.Rate
	}
	return m
}

func tenantSeed(seed uint64, id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64() ^ seed
}

// TenantArrivals generates tenant i's arrivals over [0, dur): a Poisson
// process of rate rateAt (non-homogeneous processes by thinning), seeded
// by (seed, tenant id) so a tenant's schedule does not depend on the others.
func TenantArrivals(sc *Scenario, i int, seed uint64, dur time.Duration) []Arrival {
	t := &sc.Tenants[i]
	rng := rand.New(rand.NewPCG(seed, tenantSeed(seed, t.ID)))
	lmax := maxRate(t)
	if !(lmax > 0) {
		return nil
	}
	var out []Arrival
	x := 0.0 // seconds
	limit := dur.Seconds()
	for {
		x += rng.ExpFloat64() / lmax
		if x >= limit {
			break
		}
		at := time.Duration(x * float64(time.Second))
		u := rng.Float64()
		cu := rng.Float64()
		ca := rng.Float64()
		s := rng.Uint64()
		if u*lmax >= rateAt(t, at, dur) {
			continue
		}
		a := Arrival{At: at, Tenant: i, Seq: len(out), Seed: s}
		if cu < t.CancelFraction {
			a.Cancel = true
			a.CancelAt = time.Duration(ca * float64(t.CancelAfter.D()))
		}
		out = append(out, a)
	}
	return out
}

// Schedule merges every tenant's arrivals in time order.
func Schedule(sc *Scenario, seed uint64, dur time.Duration) []Arrival {
	var all []Arrival
	for i := range sc.Tenants {
		all = append(all, TenantArrivals(sc, i, seed, dur)...)
	}
	sort.SliceStable(all, func(a, b int) bool {
		if all[a].At != all[b].At {
			return all[a].At < all[b].At
		}
		return all[a].Tenant < all[b].Tenant
	})
	return all
}

// OfferedRate is tenant t's mean offered rate over [0, dur) (requests/s).
func OfferedRate(t *TenantSpec, dur time.Duration) float64 {
	const steps = 1000
	sum := 0.0
	for k := range steps {
		x := time.Duration((float64(k) + 0.5) / steps * float64(dur))
		sum += rateAt(t, x, dur)
	}
	return sum / steps
}
