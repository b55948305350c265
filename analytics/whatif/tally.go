package whatif

import (
	"maps"
	"math"
	"slices"

	"github.com/sluice-dev/sluice/internal/quantile"
	"github.com/sluice-dev/sluice/schemas"
)

// Tally counts one side (recorded or what-if) of a run.
type Tally struct {
	Decisions int64
	// Grants counts granted decisions (every kind of admission).
	Grants int64
	// Denials counts refusals by reason: denied, and queued then expired.
	Denials map[schemas.Reason]int64
	// Queued counts reservations that waited in a queue.
	Queued int64
	// waits holds, per class, the queue wait (log ms from the first
	// decision to the grant) of every grant.
	waits map[string][]int64
	// queuedAt is the log time a still-waiting reservation was queued.
	queuedAt map[resKey]int64
	tenants  map[string]*TenantStat
	// ShadowLimited counts grants a shadow bucket on a provider level (the
	// scope root or a deployment) could not cover: predicted provider
	// rejections. ShadowOther counts those of other shadow buckets.
	ShadowLimited, ShadowOther int64
	// ProviderRateLimited counts recorded ProviderRejected inputs of kind
	// rate_limited (what the provider really refused).
	ProviderRateLimited int64
}

type resKey struct {
	id      string
	attempt int32
}

// TenantStat is one tenant's demand and grants.
type TenantStat struct {
	Requests int64 `json:"requests"` // first attempts that reached a decision
	Grants   int64 `json:"grants"`
}

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{Denials: map[schemas.Reason]int64{}, waits: map[string][]int64{}, queuedAt: map[resKey]int64{}, tenants: map[string]*TenantStat{}}
}

// Input counts what an input says about the provider.
func (t *Tally) Input(ev *schemas.Event) {
	if pr := ev.ProviderRejected; pr != nil && ev.Type == schemas.TypeProviderRejected && pr.Kind == schemas.KindRateLimited {
		t.ProviderRateLimited++
	}
}

func (t *Tally) tenant(name string) *TenantStat {
	ts, ok := t.tenants[name]
	if !ok {
		ts = &TenantStat{}
		t.tenants[name] = ts
	}
	return ts
}

// Decision counts one decision of request id/attempt. A request is
// counted (Requests of its tenant) at its first attempt's first decision.
func (t *Tally) Decision(id string, attempt int32, tenant, class string, d *schemas.Decision) {
	t.Decisions++
	k := resKey{id, attempt}
	at, wasQueued := t.queuedAt[k]
	arrival := attempt <= 1 && !wasQueued
	switch d.Status {
	case schemas.StatusQueued:
		t.Queued++
		if !wasQueued {
			t.queuedAt[k] = d.LogTimeMs
		}
	case schemas.StatusGranted:
		t.Grants++
		t.tenant(tenant).Grants++
		var wait int64
		if wasQueued {
			wait = d.LogTimeMs - at
			delete(t.queuedAt, k)
		}
		t.waits[class] = append(t.waits[class], wait)
		if sv := d.Shadow; sv != nil && sv.Limited {
			if ProviderLevel(sv.LimitPath) {
				t.ShadowLimited++
			} else {
				t.ShadowOther++
			}
		}
	case schemas.StatusDenied, schemas.StatusExpired:
		t.Denials[d.Reason]++
		delete(t.queuedAt, k)
	case schemas.StatusCancelled:
		delete(t.queuedAt, k)
		arrival = false
	default: // hold_expired, conflict: not an answer to an arrival
		arrival = false
	}
	if arrival {
		t.tenant(tenant).Requests++
	}
}

// Waits summarises the queue wait of one class.
type Waits struct {
	Grants int64 `json:"grants"`
	P50Ms  int64 `json:"p50_ms"`
	P99Ms  int64 `json:"p99_ms"`
}

// Summary is a tally's figures, ready to print or encode.
type Summary struct {
	Decisions int64                    `json:"decisions"`
	Grants    int64                    `json:"grants"`
	Queued    int64                    `json:"queued"`
	Denials   map[schemas.Reason]int64 `json:"denials_by_reason"`
	Denied    int64                    `json:"denied"`
	Waits     map[string]Waits         `json:"queue_wait_by_class"`
	Tenants   map[string]TenantShare   `json:"tenants"`
	// Jain is Jain's fairness index over the tenants' served fractions
	// (grants ÷ requests): 1 when every tenant got the same fraction of
	// its demand, 1/n when one tenant got everything.
	Jain float64 `json:"jain_index"`
	// PredictedProviderExceeded counts grants that the provider's known
	// limits (the recorded config's scope and deployment buckets) could
	// not have covered; ProviderRateLimited the provider 429s recorded.
	PredictedProviderExceeded int64 `json:"predicted_provider_exceeded"`
	ShadowLimitedOther        int64 `json:"shadow_limited_other,omitempty"`
	ProviderRateLimited       int64 `json:"provider_rate_limited_recorded"`
}

// TenantShare is one tenant's part of the grants.
type TenantShare struct {
	TenantStat
	Share  float64 `json:"share"`  // of all grants
	Served float64 `json:"served"` // grants ÷ requests
}

// Summary computes the figures. It sorts the wait samples in place.
func (t *Tally) Summary() Summary {
	s := Summary{
		Decisions: t.Decisions, Grants: t.Grants, Queued: t.Queued, Denials: t.Denials,
		Waits: map[string]Waits{}, Tenants: map[string]TenantShare{},
		PredictedProviderExceeded: t.ShadowLimited, ShadowLimitedOther: t.ShadowOther, ProviderRateLimited: t.ProviderRateLimited,
	}
	for _, n := range t.Denials {
		s.Denied += n
	}
	for c, w := range t.waits {
		slices.Sort(w)
		s.Waits[c] = Waits{Grants: int64(len(w)), P50Ms: quantile.Nearest(w, 0.50), P99Ms: quantile.Nearest(w, 0.99)}
	}
	var sum, sumSq float64
	n := 0
	// In name order: a float sum in map order would differ between runs.
	for _, name := range slices.Sorted(maps.Keys(t.tenants)) {
		ts := t.tenants[name]
		sh := TenantShare{TenantStat: *ts}
		if t.Grants > 0 {
			sh.Share = float64(ts.Grants) / float64(t.Grants)
		}
		if ts.Requests > 0 {
			sh.Served = math.Min(1, float64(ts.Grants)/float64(ts.Requests))
			sum += sh.Served
			sumSq += sh.Served * sh.Served
			n++
		}
		s.Tenants[name] = sh
	}
	if n > 0 && sumSq > 0 {
		s.Jain = sum * sum / (float64(n) * sumSq)
	}
	return s
}

// Merge adds o's counts to t (partitions of one run).
func (t *Tally) Merge(o *Tally) {
	t.Decisions += o.Decisions
	t.Grants += o.Grants
	t.Queued += o.Queued
	t.ShadowLimited += o.ShadowLimited
	t.ShadowOther += o.ShadowOther
	t.ProviderRateLimited += o.ProviderRateLimited
	for r, n := range o.Denials {
		t.Denials[r] += n
	}
	for c, w := range o.waits {
		t.waits[c] = append(t.waits[c], w...)
	}
	for name, ts := range o.tenants {
		x := t.tenant(name)
		x.Requests += ts.Requests
		x.Grants += ts.Grants
	}
}
