package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/apierr/httperr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/httpmux"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// LevelSource tells the usage endpoint what the ledger last reported for
// a bucket node. The gateway does not keep quota itself (the ledger is the
// single writer), so what it shows is an observation: Levels returns the
// node's buckets projected to atMs by refill alone, the ledger log time
// the observation is from, and whether any ledger partition reported the
// scope at all (false: nothing is known, and remaining is left out).
type LevelSource interface {
	Levels(scope, level, id string, atMs int64) (levels []ledger.BucketLevel, observedAtMs int64, scopeKnown bool)
}

// WithLevels sets where GET /v1/sluice/usage reads remaining quota from
// (SnapshotLevels in production); without it the endpoint shows limits
// only.
func WithLevels(src LevelSource) Option { return func(s *Server) { s.levels = src } }

// Usage is the body of GET /v1/sluice/usage: the calling key's own limits
// (tenant, team and key levels, in every scope the gateway routes to) and
// what remains of them. It never shows another tenant's, nor the org level
// (a partner's allotment is shared by its tenants).
type Usage struct {
	Object string `json:"object"` // "sluice.usage"
	Tenant string `json:"tenant"`
	KeyID  string `json:"key_id"`
	Team   string `json:"team,omitempty"`
	Class  string `json:"class,omitempty"`
	Paused bool   `json:"paused"`
	// NowMs is the gateway's clock when it answered.
	NowMs  int64        `json:"now_ms"`
	Limits []UsageLimit `json:"limits"`
	// DailyHeadroom repeats the limits whose window is a day or longer
	// (requests per day, spend), with the share that is left.
	DailyHeadroom []Headroom `json:"daily_headroom"`
	// Staleness explains how old Remaining may be.
	Staleness string `json:"staleness"`
	// ProviderCapacity is the provider's own quota (the scope and
	// deployment levels' rate buckets, shared by every tenant): the
	// configured capacity against the one the ledger learned from the
	// provider (ledger/README.md, "Capacity learned from the provider").
	ProviderCapacity []ProviderCapacity `json:"provider_capacity"`
	// Budgets are the budgets across every provider (ledger.budget) of
	// the caller's tenant, team or key, with their leases per scope.
	Budgets []UsageBudget `json:"budgets"`
}

// ProviderCapacity is one provider bucket, configured against learned.
type ProviderCapacity struct {
	Scope      string            `json:"scope"`
	Level      string            `json:"level"`
	ID         string            `json:"id"`
	Dimension  schemas.Dimension `json:"dimension"`
	PeriodMs   int64             `json:"period_ms"`
	Configured int64             `json:"configured_capacity"`
	// Learned is the capacity the ledger enforces; equal to Configured
	// when nothing was learned (Source "configured") or learning has
	// brought it back to the bound.
	Learned int64 `json:"learned_capacity"`
	// Reported is the limit the provider's headers reported, per period.
	Reported int64 `json:"reported_limit,omitempty"`
	// Source: configured (no ledger snapshot learned anything for it) or
	// learned (a snapshot holds a learned capacity).
	Source       string `json:"source"`
	ObservedAtMs int64  `json:"observed_at_ms,omitempty"`
	// SubScopes, for a scope split over partitions, are the sub-scopes
	// the row stands for. A deployment's rate limit is one budget that
	// they lease shares of (ledger/split.go), so it is shown once, not
	// summed, with Learned the lowest any sub-scope enforces (each learns
	// from the same provider's headers) and ObservedAtMs the oldest
	// observation. A scope-level bucket is divided among the sub-scopes
	// (ledger.SplitLimit), each enforcing its share, so the shares are
	// summed.
	SubScopes []string `json:"sub_scopes,omitempty"`
}

// LearnedSource is what a LevelSource also offers when it can tell the
// capacities the ledger learned (SnapshotLevels does).
type LearnedSource interface {
	Learned(scope string) (learned []ledger.LearnedBucket, observedAtMs int64, scopeKnown bool)
}

// UsageLimit is one bucket of the caller's path.
type UsageLimit struct {
	Scope     string            `json:"scope"`
	Level     string            `json:"level"`
	ID        string            `json:"id"`
	Dimension schemas.Dimension `json:"dimension"`
	Refill    ledger.Refill     `json:"refill"`
	Capacity  int64             `json:"capacity"`
	PeriodMs  int64             `json:"period_ms,omitempty"`
	// Unit says what Capacity counts, per what: "requests/min",
	// "total tokens/min", "requests/day", "micro-USD/day" (spend is in
	// millionths of a dollar), "requests in flight".
	Unit string `json:"unit"`
	// Max is the most the bucket holds at once, in the dimension's unit:
	// Capacity, except for a token (or ramp) bucket, which refills
	// continuously and holds one enforcement window's worth
	// (Capacity×window_ms/period_ms, e.g. 2 of 120 requests/min over 1 s).
	Max int64 `json:"max"`
	// Remaining is absent when no ledger observation covers the scope.
	Remaining *int64 `json:"remaining,omitempty"`
	// Used is Max − Remaining: what is taken and not yet refilled (absent
	// with Remaining).
	Used *int64 `json:"used,omitempty"`
	// Summary says it in words: "used 1 of 1000 requests/day, 999 left".
	Summary string `json:"summary"`
	// ResetsAtMs is when the bucket is full again if nothing more is
	// charged (unix ms); absent when full or unknown.
	ResetsAtMs int64 `json:"resets_at_ms,omitempty"`
	// ObservedAtMs is the ledger log time Remaining was read at; the
	// projection to NowMs adds refill only.
	ObservedAtMs int64 `json:"observed_at_ms,omitempty"`
	// Source: ledger_snapshot (a partition snapshot holds the bucket),
	// untouched (the snapshot holds the scope but nothing charged the
	// bucket yet: it is full), or unobserved (no snapshot of the scope).
	Source string `json:"source"`
	// SubScopes, for a scope split over partitions (ledger/split.go), are
	// the sub-scopes the row sums: each holds its share of a tenant's or
	// team's bucket (ledger.SplitLimit), so Capacity, Max, Remaining and
	// Used are their sums (ObservedAtMs the oldest observation, ResetsAtMs the latest).
	// Remaining is present when a snapshot holds any of them; one that no
	// snapshot holds yet (source unobserved: often one no request went to
	// yet) counts as full, the same overstatement as a stale snapshot's.
	// A key's requests all go to one sub-scope (ledger.PartitionScope),
	// so a key's row sums that one. Absent for a scope that is not split.
	SubScopes []UsageSubScope `json:"sub_scopes,omitempty"`
}

// UsageSubScope is one sub-scope's part of a split scope's UsageLimit.
type UsageSubScope struct {
	Scope        string `json:"scope"`
	Capacity     int64  `json:"capacity"`
	Max          int64  `json:"max"`
	Remaining    *int64 `json:"remaining,omitempty"`
	ResetsAtMs   int64  `json:"resets_at_ms,omitempty"`
	ObservedAtMs int64  `json:"observed_at_ms,omitempty"`
	Source       string `json:"source"`
}

// Headroom is a daily (or longer) limit and its share left.
type Headroom struct {
	Scope      string            `json:"scope"`
	Level      string            `json:"level"`
	Dimension  schemas.Dimension `json:"dimension"`
	Capacity   int64             `json:"capacity"`
	Unit       string            `json:"unit"`
	Remaining  *int64            `json:"remaining,omitempty"`
	Percent    *float64          `json:"percent_left,omitempty"`
	ResetsAtMs int64             `json:"resets_at_ms,omitempty"`
}

// UsageStaleness is Usage.Staleness.
const UsageStaleness = "remaining is read from the ledger's newest partition snapshot (written every snapshot-every events or snapshot-interval, default 10000 events / 30 s) and projected to now by refill only: charges made after observed_at_ms are not in it, so it can overstate what is left by up to that much traffic. Limits are exact: they are the configuration in force."

const dayMs = 86_400_000

// handleUsage answers GET /v1/sluice/usage for the presented API key.
func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg.Load()
	id, e := s.identify(cfg, r)
	if e != nil && e.Code != apierr.CodePaused {
		s.m.count(e.Code)
		httperr.Write(w, e, false)
		return
	}
	if id == nil { // paused: identify refuses it, but a paused tenant may read its usage
		id = cfg.Lookup(bearerKey(r))
	}
	if id == nil {
		httperr.Write(w, apierr.New(http.StatusUnauthorized, apierr.CodeInvalidKey, "invalid API key"), false)
		return
	}
	u := s.usage(cfg, id, time.Now().UnixMilli())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(u)
}

func bearerKey(r *http.Request) string {
	if k, ok := httpmux.BearerToken(r.Header.Get("Authorization")); ok {
		return k
	}
	return r.Header.Get("x-api-key")
}

func (s *Server) usage(cfg *config.Config, id *config.Identity, nowMs int64) (u Usage) {
	u = Usage{Object: "sluice.usage", Tenant: id.Tenant, KeyID: id.KeyID, Team: id.Team, Class: id.Class,
		Paused: id.Paused || id.TenantPaused, NowMs: nowMs, Limits: []UsageLimit{}, DailyHeadroom: []Headroom{}, Staleness: UsageStaleness,
		ProviderCapacity: []ProviderCapacity{}, Budgets: []UsageBudget{}}
	doc := ledgerDoc(cfg)
	if doc == nil {
		return u
	}
	defer func() { u.Budgets = s.usageBudgets(doc, id.Tenant, id.Team, id.KeyID, scopes(cfg)) }() // a split scope's sub-scopes hold its leases
	var provScopes []string
	for _, p := range cfg.Providers {
		if !slices.Contains(provScopes, p.Scope) {
			provScopes = append(provScopes, p.Scope)
		}
	}
	slices.Sort(provScopes)
	for _, scope := range provScopes {
		subs := cfg.LedgerScopes(scope)
		sc := scopeConfig(doc, subs[0])
		if sc == nil {
			continue
		}
		u.ProviderCapacity = append(u.ProviderCapacity, s.scopeCapacity(doc, scope, subs)...)
		for _, lv := range [...][2]string{{ledger.LevelTenant, id.Tenant}, {ledger.LevelTeam, id.Team}, {ledger.LevelKey, id.KeyID}} {
			if lv[1] == "" {
				continue
			}
			buckets := bucketsOf(sc, lv[0], lv[1])
			if len(buckets) == 0 {
				continue
			}
			over := subs
			if lv[0] == ledger.LevelKey && len(subs) > 1 {
				over = []string{ledger.PartitionScope(scope, len(subs), id.KeyID)}
			}
			for _, b := range buckets {
				ul := s.usageLimit(doc, scope, over, len(subs) > 1, lv[0], lv[1], b, nowMs)
				u.Limits = append(u.Limits, ul)
				if b.Dimension == schemas.DimRequestsPerDay || b.Dimension == schemas.DimSpend || b.PeriodMs >= dayMs {
					h := Headroom{Scope: scope, Level: lv[0], Dimension: b.Dimension, Capacity: ul.Capacity, Unit: ul.Unit, Remaining: ul.Remaining, ResetsAtMs: ul.ResetsAtMs}
					if ul.Remaining != nil && ul.Capacity > 0 {
						p := float64(max(*ul.Remaining, 0)) * 100 / float64(ul.Capacity)
						h.Percent = &p
					}
					u.DailyHeadroom = append(u.DailyHeadroom, h)
				}
			}
		}
	}
	return u
}

// usageLimit is bucket b of (level, id) in provider scope scope, summed
// over the ledger scopes over (scope itself, or sub-scopes of a split
// one: split true, and the parts are listed, each with its own bucket:
// a tenant's or team's limit is divided among them, ledger.SplitLimit).
func (s *Server) usageLimit(doc *ledger.Config, scope string, over []string, split bool, level, id string, b0 ledger.BucketConfig, nowMs int64) UsageLimit {
	b := b0
	ul := UsageLimit{Scope: scope, Level: level, ID: id, Dimension: b.Dimension, Refill: b.Refill,
		PeriodMs: b.PeriodMs, Unit: UsageUnit(b.Dimension, b.Refill, b.PeriodMs), Source: "unobserved"}
	parts := make([]UsageSubScope, 0, len(over))
	for _, sub := range over {
		b = b0
		if sc := scopeConfig(doc, sub); split && sc != nil {
			if i := slices.IndexFunc(bucketsOf(sc, level, id), func(x ledger.BucketConfig) bool {
				return x.Dimension == b0.Dimension && x.Refill == b0.Refill
			}); i >= 0 {
				b = bucketsOf(sc, level, id)[i] // this sub-scope's share
			}
		}
		part := UsageSubScope{Scope: sub, Capacity: b.Capacity, Max: bucketMax(b), Source: "unobserved"}
		var obs []ledger.BucketLevel
		known := false
		if s.levels != nil {
			obs, part.ObservedAtMs, known = s.levels.Levels(sub, level, id, nowMs)
		}
		if known {
			part.Source = "untouched"
			rem := part.Max // full: what it could grant at once
			for _, o := range obs {
				if o.Dimension == b.Dimension {
					rem, part.ResetsAtMs, part.Source = o.Remaining, o.FullAtMs, "ledger_snapshot"
				}
			}
			part.Remaining = &rem
		} else {
			part.ObservedAtMs = 0
		}
		parts = append(parts, part)
	}
	observed := false
	var rem int64
	for _, part := range parts {
		ul.Capacity += part.Capacity
		ul.Max += part.Max
		if part.Remaining == nil {
			rem += part.Max // no snapshot holds it: no traffic yet, or not snapshotted yet
			continue
		}
		observed = true
		rem += *part.Remaining
		ul.ResetsAtMs = max(ul.ResetsAtMs, part.ResetsAtMs)
		if ul.ObservedAtMs == 0 || part.ObservedAtMs < ul.ObservedAtMs {
			ul.ObservedAtMs = part.ObservedAtMs
		}
		if ul.Source != "ledger_snapshot" {
			ul.Source = part.Source
		}
	}
	if observed {
		used := ul.Max - rem
		ul.Remaining, ul.Used = &rem, &used
	} else {
		ul.Source, ul.ObservedAtMs, ul.ResetsAtMs = "unobserved", 0, 0
	}
	if split {
		ul.SubScopes = parts
	}
	ul.Summary = usageSummary(ul)
	return ul
}

// ledgerDoc is the parsed ledger document of cfg, cached per configuration
// (a reload or an admin change installs a new *config.Config).
func ledgerDoc(cfg *config.Config) *ledger.Config {
	docCache.Lock()
	defer docCache.Unlock()
	if docCache.cfg == cfg {
		return docCache.doc
	}
	lc, err := ledger.ParseConfig(cfg.LedgerJSON())
	if err != nil {
		return nil
	}
	docCache.cfg, docCache.doc = cfg, &lc
	return &lc
}

var docCache struct {
	sync.Mutex
	cfg *config.Config
	doc *ledger.Config
}

// scopeConfig is the scope's configuration, or the "*" template's.
func scopeConfig(doc *ledger.Config, scope string) *ledger.ScopeConfig {
	var tmpl *ledger.ScopeConfig
	for i := range doc.Scopes {
		switch doc.Scopes[i].Name {
		case scope:
			return &doc.Scopes[i]
		case "*":
			tmpl = &doc.Scopes[i]
		}
	}
	return tmpl
}

// bucketsOf lists the buckets the ledger stamps for (level, id): the exact
// entries, and the template's ("*") for dimensions without one.
func bucketsOf(sc *ledger.ScopeConfig, level, id string) []ledger.BucketConfig {
	var out []ledger.BucketConfig
	for _, b := range sc.Buckets {
		if b.Level == level && b.ID == id {
			out = append(out, b)
		}
	}
	for _, b := range sc.Buckets {
		if b.Level == level && b.ID == "*" && !slices.ContainsFunc(out, func(x ledger.BucketConfig) bool { return x.Dimension == b.Dimension }) {
			out = append(out, b)
		}
	}
	return out
}

// UsageUnit names what a bucket's capacity counts, per what period.
func UsageUnit(d schemas.Dimension, refill ledger.Refill, periodMs int64) string {
	var what string
	switch d {
	case schemas.DimRequests, schemas.DimRequestsPerDay, schemas.DimRamp:
		what = "requests"
	case schemas.DimInputTokens:
		what = "input tokens"
	case schemas.DimOutputTokens:
		what = "output tokens"
	case schemas.DimTotalTokens:
		what = "total tokens"
	case schemas.DimSpend:
		what = "micro-USD"
	case schemas.DimConcurrency:
		return "requests in flight"
	default:
		what = string(d)
	}
	if refill == ledger.RefillConcurrency || periodMs <= 0 {
		return what + " in flight"
	}
	return what + "/" + periodName(periodMs)
}

// periodName is "min", "h", "day", or a duration ("90s") for others.
func periodName(ms int64) string {
	switch ms {
	case 1_000:
		return "s"
	case 60_000:
		return "min"
	case 3_600_000:
		return "h"
	case dayMs:
		return "day"
	case 7 * dayMs:
		return "week"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// bucketMax is the most b holds at once: a token or ramp bucket holds one
// enforcement window of its rate.
func bucketMax(b ledger.BucketConfig) int64 {
	if (b.Refill == ledger.RefillToken || b.Refill == ledger.RefillRamp) && b.PeriodMs > 0 && b.WindowMs > 0 && b.WindowMs < b.PeriodMs {
		return max(1, b.Capacity*b.WindowMs/b.PeriodMs)
	}
	return b.Capacity
}

// usageSummary is UsageLimit.Summary.
func usageSummary(ul UsageLimit) string {
	of := fmt.Sprintf("%d %s", ul.Capacity, ul.Unit)
	if ul.Max != ul.Capacity {
		of = fmt.Sprintf("%d (the burst of %d %s)", ul.Max, ul.Capacity, ul.Unit)
	}
	if len(ul.SubScopes) > 1 {
		of += fmt.Sprintf(" over %d sub-scopes", len(ul.SubScopes))
	}
	if ul.Remaining == nil {
		return "limit " + of + "; use not yet observed"
	}
	return fmt.Sprintf("used %d of %s, %d left", *ul.Used, of, *ul.Remaining)
}

// scopeCapacity is providerCapacity of provider scope scope, one row per
// bucket over the ledger scopes subs that decide it (ProviderCapacity.SubScopes).
func (s *Server) scopeCapacity(doc *ledger.Config, scope string, subs []string) []ProviderCapacity {
	if len(subs) == 1 {
		return s.providerCapacity(scopeConfig(doc, scope), scope)
	}
	var out []ProviderCapacity
	for _, sub := range subs {
		sc := scopeConfig(doc, sub)
		if sc == nil {
			continue
		}
		for _, pc := range s.providerCapacity(sc, sub) {
			pc.Scope = scope
			if pc.Level == ledger.LevelScope {
				pc.ID = scope
			}
			i := slices.IndexFunc(out, func(o ProviderCapacity) bool {
				return o.Level == pc.Level && o.ID == pc.ID && o.Dimension == pc.Dimension && o.PeriodMs == pc.PeriodMs
			})
			if i < 0 {
				pc.SubScopes = []string{sub}
				out = append(out, pc)
				continue
			}
			o := &out[i]
			o.SubScopes = append(o.SubScopes, sub)
			if pc.Level == ledger.LevelScope {
				o.Configured, o.Learned, o.Reported = o.Configured+pc.Configured, o.Learned+pc.Learned, o.Reported+pc.Reported
			} else {
				o.Learned, o.Reported = min(o.Learned, pc.Learned), max(o.Reported, pc.Reported)
			}
			if pc.Source == "learned" {
				if o.Source != "learned" || pc.ObservedAtMs < o.ObservedAtMs {
					o.ObservedAtMs = pc.ObservedAtMs
				}
				o.Source = "learned"
			}
		}
	}
	return out
}

// providerCapacity lists the scope's provider buckets (scope and
// deployment levels, rate dimensions), configured against learned.
func (s *Server) providerCapacity(sc *ledger.ScopeConfig, scope string) []ProviderCapacity {
	var learned []ledger.LearnedBucket
	var at int64
	if src, ok := s.levels.(LearnedSource); ok && s.levels != nil {
		learned, at, _ = src.Learned(scope)
	}
	var out []ProviderCapacity
	for _, b := range sc.Buckets {
		if (b.Level != ledger.LevelScope && b.Level != ledger.LevelDeployment) || (b.ID == "*" && b.Level == ledger.LevelDeployment) || b.Shadow {
			continue
		}
		switch b.Dimension {
		case schemas.DimRequests, schemas.DimInputTokens, schemas.DimOutputTokens, schemas.DimTotalTokens:
		default:
			continue
		}
		switch b.Refill {
		case ledger.RefillFixed, ledger.RefillRolling, ledger.RefillConcurrency, ledger.RefillRamp:
			continue
		}
		id := b.ID
		if b.Level == ledger.LevelScope {
			id = scope
		}
		pc := ProviderCapacity{Scope: scope, Level: b.Level, ID: id, Dimension: b.Dimension, PeriodMs: b.PeriodMs,
			Configured: b.Capacity, Learned: b.Capacity, Source: "configured"}
		for i, lb := range learned {
			if lb.Level == b.Level && lb.ID == id && lb.Dimension == b.Dimension {
				pc.Learned, pc.Reported, pc.Source, pc.ObservedAtMs = lb.Learned, lb.Reported, "learned", at
				learned[i].Level = "" // shown
			}
		}
		out = append(out, pc)
	}
	// Buckets stamped from a "*" template (one per deployment id).
	for _, lb := range learned {
		if lb.Level != "" {
			out = append(out, ProviderCapacity{Scope: scope, Level: lb.Level, ID: lb.ID, Dimension: lb.Dimension, PeriodMs: lb.PeriodMs,
				Configured: lb.Configured, Learned: lb.Learned, Reported: lb.Reported, Source: "learned", ObservedAtMs: at})
		}
	}
	return out
}
