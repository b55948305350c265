package loadtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/sim"
)

// Names used in the generated gateway config.
const (
	simProviderName = "sim-openai"
	simScope        = "sim-openai"
	warmupTenant    = "loadtest-warmup"
)

// Keys maps tenant id → API key for a generated gateway config.
type Keys map[string]string

// NewKeys makes one random API key per tenant (plus the warm-up tenant).
func NewKeys(sc *Scenario) Keys {
	k := Keys{}
	for _, t := range append([]string{warmupTenant}, tenantIDs(sc)...) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		k[t] = "sk-loadtest-" + t + "-" + hex.EncodeToString(b[:])
	}
	return k
}

func tenantIDs(sc *Scenario) []string {
	out := make([]string, len(sc.Tenants))
	for i, t := range sc.Tenants {
		out[i] = t.ID
	}
	return out
}

// SluiceQuota is the governor's effective deployment quota for a scenario,
// recorded in the report's run conditions.
type SluiceQuota struct {
	Factor               float64 `json:"factor"`
	RequestsPerMin       int64   `json:"requests_per_min,omitempty"`
	TokensPerMin         int64   `json:"tokens_per_min,omitempty"`
	InputTokensPerMin    int64   `json:"input_tokens_per_min,omitempty"`
	OutputTokensPerMin   int64   `json:"output_tokens_per_min,omitempty"`
	RequestsPerDay       int64   `json:"requests_per_day,omitempty"`
	WindowMs             int64   `json:"window_ms"`
	Concurrency          int64   `json:"concurrency,omitempty"`
	TenantRequestsPerDay int64   `json:"tenant_requests_per_day,omitempty"`
	RampPeriodMs         int64   `json:"ramp_period_ms,omitempty"`
	RampStart            int64   `json:"ramp_start_per_period,omitempty"`
	RampStep             int64   `json:"ramp_step_per_period,omitempty"`
	Disabled             bool    `json:"disabled,omitempty"`
}

// EffectiveQuota derives Sluice's limits: explicit values, else Factor × the
// simulator's limit for the model (rounded down).
func EffectiveQuota(sc *Scenario) SluiceQuota {
	sl := sc.Sluice
	lim := sc.ProviderLimits()
	f := sl.Factor
	der := func(explicit, provider int64) int64 {
		if explicit > 0 {
			return explicit
		}
		return int64(math.Floor(float64(provider) * f))
	}
	q := SluiceQuota{
		Factor:               f,
		RequestsPerMin:       der(sl.RequestsPerMin, lim.RPM),
		TokensPerMin:         der(sl.TokensPerMin, lim.TPM),
		InputTokensPerMin:    der(sl.InputTokensPerMin, lim.ITPM),
		OutputTokensPerMin:   der(sl.OutputTokensPerMin, lim.OTPM),
		RequestsPerDay:       der(sl.RequestsPerDay, lim.RPD),
		Concurrency:          sl.Concurrency,
		TenantRequestsPerDay: sl.TenantRequestsPerDay,
		Disabled:             sl.Disabled,
	}
	w := sl.Window.D()
	if w == 0 {
		w = lim.Window.D()
	}
	if w <= 0 || w > time.Minute {
		w = time.Second
	}
	q.WindowMs = w.Milliseconds()
	if r := sl.Ramp; r != nil {
		q.RampPeriodMs, q.RampStart, q.RampStep = r.Period.D().Milliseconds(), r.Start, r.Step
	} else if a := lim.Acceleration; a != nil {
		// The simulator admits max(floor, factor × previous window's
		// admitted); a linear ramp from f×floor growing by half of what the
		// factor allows stays inside it even when demand lags the ramp.
		per := a.Window.D()
		if per <= 0 {
			per = time.Minute
		}
		q.RampPeriodMs = per.Milliseconds()
		q.RampStart = max(1, int64(math.Floor(float64(a.Floor)*f)))
		q.RampStep = int64(math.Floor(float64(q.RampStart) * (a.Factor - 1) / 2))
	}
	return q
}

// DispatchJitterMs is how much later than its log time a grant of the
// scenario may reach the provider: the largest late-grant bound of its
// classes in the generated gateway config (the class's max wait within
// [config.LateGrantMinMs, config.LateGrantDefaultMaxMs]); a later grant is
// released and reserved again. The ledger counts in log time and the
// provider in wall time, so grants that a token bucket of burst B and rate
// r spaced in log time can reach the provider as a burst of B + r×J: the
// generated windows are the provider's minus J (DESIGN.md §11; without it,
// 4–5 provider 429s per noisy-neighbor run on a loaded machine,
// TestDispatchModelStallBurst).
func DispatchJitterMs(sc *Scenario) int64 {
	j := int64(config.LateGrantMinMs)
	for _, c := range sc.Classes {
		j = max(j, min(max(c.MaxWait.D().Milliseconds(), config.LateGrantMinMs), config.LateGrantDefaultMaxMs))
	}
	return j
}

// LedgerConfig is the ledger quota document generated from a scenario: one
// scope for the simulator's deployment, Sluice's deployment buckets, per
// tenant daily quotas, tenant weights and the scenario's classes.
func LedgerConfig(sc *Scenario) (ledger.Config, error) {
	q := EffectiveQuota(sc)
	bs := windowBuckets(sc, q)
	bs, err := periodBuckets(sc, q, bs)
	if err != nil {
		return ledger.Config{}, err
	}
	tenants, bs := scenarioTenants(sc, q, bs)
	classes := scenarioClasses(sc)
	doc := ledger.Config{
		Scopes:       []ledger.ScopeConfig{{Name: simScope, Buckets: bs, Tenants: tenants, DefaultTenantWeight: 1}},
		Classes:      classes,
		DefaultClass: classes[0].Name,
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return ledger.Config{}, err
	}
	out, err := ledger.ParseConfig(b)
	if err != nil {
		return ledger.Config{}, fmt.Errorf("generated ledger config: %w", err)
	}
	return out, nil
}

// windowBuckets are the deployment's per-minute buckets (requests and
// tokens), each with a window that holds at least one unit and leaves room
// for the grants that delivery bunches together.
func windowBuckets(sc *Scenario, q SluiceQuota) []ledger.BucketConfig {
	var bs []ledger.BucketConfig
	acct := simAccounting(sc.Provider, sc.SimConfig.Providers[sc.Provider])
	jitter := DispatchJitterMs(sc)
	tok := func(d schemas.Dimension, perMin int64) {
		if perMin <= 0 || q.Disabled {
			return
		}
		win := q.WindowMs
		// The window must hold at least one unit.
		for perMin*win < 60_000 && win < 60_000 {
			win = min(60_000, win*2)
		}
		// Leave room in the provider's window for the grants that
		// delivery bunches together: up to the late-grant bound J
		// after their log time (DispatchJitterMs), while still holding
		// one unit.
		win = max(win-jitter, min(win, (60_000+perMin-1)/perMin))
		b := ledger.BucketConfig{Level: ledger.LevelDeployment, ID: simProviderName, Dimension: d,
			Capacity: perMin, PeriodMs: 60_000, WindowMs: win}
		switch d {
		case schemas.DimRequests:
			// The simulator counts a request only when it admits it: a
			// refused one (429, 503) is not charged to its RPM.
			//
			// It is not refunded here (refund_unsent off) even so: after a
			// ledger failover the provider's window can be fuller than the
			// ledger's, and refunding each 429 then let the ledger send at
			// full rate into a full window (TestStackKillLedgerRealBroker:
			// 1,386 provider 429s). A refusal the ledger must learn from
			// keeps its charge.
			b.BorrowReserve = sc.Sluice.BorrowReserve
		case schemas.DimOutputTokens, schemas.DimTotalTokens:
			b.Accounting = acct.output
			b.ExcludeCachedInput = d == schemas.DimTotalTokens && acct.excludeCached
		case schemas.DimInputTokens:
			b.ExcludeCachedInput = acct.excludeCached
		}
		bs = append(bs, b)
	}
	tok(schemas.DimRequests, q.RequestsPerMin)
	tok(schemas.DimTotalTokens, q.TokensPerMin)
	tok(schemas.DimInputTokens, q.InputTokensPerMin)
	tok(schemas.DimOutputTokens, q.OutputTokensPerMin)
	return bs
}

// periodBuckets adds the daily, concurrency and ramp buckets.
func periodBuckets(sc *Scenario, q SluiceQuota, bs []ledger.BucketConfig) ([]ledger.BucketConfig, error) {
	lim := sc.ProviderLimits()
	if q.RequestsPerDay > 0 && !q.Disabled {
		off, err := resetOffsetMs(lim.DailyReset)
		if err != nil {
			return nil, err
		}
		bs = append(bs, ledger.BucketConfig{Level: ledger.LevelDeployment, ID: simProviderName, Dimension: schemas.DimRequestsPerDay,
			Capacity: q.RequestsPerDay, PeriodMs: 86_400_000, ResetOffsetMs: off})
	}
	if q.Concurrency > 0 && !q.Disabled {
		bs = append(bs, ledger.BucketConfig{Level: ledger.LevelDeployment, ID: simProviderName, Dimension: schemas.DimConcurrency, Capacity: q.Concurrency})
	}
	if q.RampPeriodMs > 0 && !q.Disabled {
		capacity := q.RampStart + 10*q.RampStep
		if q.RequestsPerMin > 0 {
			capacity = max(q.RampStart, q.RequestsPerMin*q.RampPeriodMs/60_000)
		}
		win := min(1_000, q.RampPeriodMs)
		for q.RampStart*win < q.RampPeriodMs && win < q.RampPeriodMs {
			win = min(q.RampPeriodMs, win*2)
		}
		bs = append(bs, ledger.BucketConfig{Level: ledger.LevelDeployment, ID: simProviderName, Dimension: schemas.DimRamp,
			Capacity: capacity, PeriodMs: q.RampPeriodMs, WindowMs: win,
			Ramp: &ledger.RampConfig{StartPerPeriod: q.RampStart, StepPerPeriod: min(q.RampStep, capacity)}})
	}
	if q.TenantRequestsPerDay > 0 {
		bs = append(bs, ledger.BucketConfig{Level: ledger.LevelTenant, ID: "*", Dimension: schemas.DimRequestsPerDay,
			Capacity: q.TenantRequestsPerDay, PeriodMs: 86_400_000})
	}
	return bs, nil
}

// scenarioTenants are the scenario's tenants with their weights, and a
// guaranteed tenant's own requests bucket.
func scenarioTenants(sc *Scenario, q SluiceQuota, bs []ledger.BucketConfig) ([]ledger.TenantConfig, []ledger.BucketConfig) {
	var tenants []ledger.TenantConfig
	for _, t := range sc.Tenants {
		tenants = append(tenants, ledger.TenantConfig{ID: t.ID, Weight: t.Weight})
		// A guaranteed share: the tenant's own requests bucket, as large as
		// the deployment's, whose grants above the share are borrowed.
		if t.Guaranteed > 0 && q.RequestsPerMin > 0 && !q.Disabled {
			for _, d := range bs {
				if d.Dimension == schemas.DimRequests && d.Level == ledger.LevelDeployment {
					bs = append(bs, ledger.BucketConfig{Level: ledger.LevelTenant, ID: t.ID, Dimension: schemas.DimRequests,
						Capacity: d.Capacity, PeriodMs: d.PeriodMs, WindowMs: d.WindowMs,
						Guaranteed: max(1, int64(math.Round(t.Guaranteed*float64(d.Capacity))))})
					break
				}
			}
		}
	}
	return tenants, bs
}

// scenarioClasses are the scenario's traffic classes, in name order.
func scenarioClasses(sc *Scenario) []ledger.ClassConfig {
	var classes []ledger.ClassConfig
	for _, name := range sc.ClassNames() {
		c := sc.Classes[name]
		classes = append(classes, ledger.ClassConfig{Name: name, AgeOffsetMs: c.AgeOffset.D().Milliseconds(),
			MaxWaitMs: c.MaxWait.D().Milliseconds(), MaxDepth: c.MaxDepth, Overload: ledger.OverloadDeny})
	}
	return classes
}

// simCounting is how a simulator provider counts tokens, as ledger bucket
// settings.
type simCounting struct {
	output        ledger.Accounting // the accounting of output and total token buckets
	excludeCached bool              // cache reads are not counted against input
}

// simAccounting is how the scenario's simulator counts tokens: max tokens
// charged at admission and kept (OpenAI, Azure) is max_tokens_on_arrival;
// output charged after the response (Anthropic) is output_when_produced; a
// refunded reservation is plain reconcile. Cache reads are excluded where
// the simulator simulates caching (Anthropic) and does not count them.
func simAccounting(provider string, pc sim.ProviderConfig) simCounting {
	var a simCounting
	switch {
	case pc.ReserveMaxTokens && !pc.RefundUnused:
		a.output = ledger.AccountingMaxTokensOnArrival
	case !pc.ReserveMaxTokens:
		a.output = ledger.AccountingOutputWhenProduced
	default:
		a.output = ledger.AccountingReconcile
	}
	a.excludeCached = sim.ExcludesCacheReads(provider, pc)
	return a
}

func resetOffsetMs(hhmm string) (int64, error) {
	if hhmm == "" {
		return 0, nil
	}
	h, m, ok := strings.Cut(hhmm, ":")
	hh, e1 := strconv.Atoi(h)
	mm, e2 := strconv.Atoi(m)
	if !ok || e1 != nil || e2 != nil {
		return 0, fmt.Errorf("daily_reset %q: want HH:MM", hhmm)
	}
	return int64(hh)*3_600_000 + int64(mm)*60_000, nil
}

// GatewayConfigYAML is the gateway configuration generated from a scenario:
// the simulator as the one OpenAI provider, the scenario's model as the
// route, one key per tenant (stored as its SHA-256) and the ledger document.
func GatewayConfigYAML(sc *Scenario, simURL string, keys Keys) ([]byte, error) {
	for _, t := range sc.Tenants {
		if t.Model != "" && t.Model != sc.Model || t.Tenant != "" && t.Tenant != t.ID {
			return nil, fmt.Errorf("tenant %s: model and tenant other than the scenario's need a hand-written gateway config (--config): the generated one routes %s alone", t.ID, sc.Model)
		}
	}
	led, err := LedgerConfig(sc)
	if err != nil {
		return nil, err
	}
	lb, err := json.Marshal(led)
	if err != nil {
		return nil, err
	}
	var ledDoc any
	if err := json.Unmarshal(lb, &ledDoc); err != nil {
		return nil, err
	}
	type key struct {
		ID     string `yaml:"id"`
		SHA256 string `yaml:"sha256"`
		Team   string `yaml:"team"`
		Class  string `yaml:"class"`
	}
	type tenant struct {
		ID   string `yaml:"id"`
		Org  string `yaml:"org"`
		Keys []key  `yaml:"keys"`
	}
	maxOut := int64(4096)
	for _, t := range sc.Tenants {
		maxOut = max(maxOut, t.MaxTokens)
	}
	ts := []tenant{{ID: warmupTenant, Org: "loadtest", Keys: []key{{ID: warmupTenant + "-key", SHA256: config.HashKey(keys[warmupTenant]), Team: "warmup", Class: sc.ClassNames()[0]}}}}
	for _, t := range sc.Tenants {
		ts = append(ts, tenant{ID: t.ID, Org: "loadtest", Keys: []key{{ID: t.ID + "-key", SHA256: config.HashKey(keys[t.ID]), Team: t.ID, Class: t.Class}}})
	}
	doc := map[string]any{
		"node":              "gw-loadtest",
		"ledger_timeout_ms": 5000,
		"providers": []map[string]any{{
			"name": simProviderName, "kind": "openai", "scope": simScope,
			"base_url": strings.TrimRight(simURL, "/") + "/openai/v1",
		}},
		"routes": []map[string]any{{
			"model": sc.Model, "provider": simProviderName, "profile": sc.Model, "default_max_output_tokens": maxOut,
		}},
		"tenants": ts,
		"ledger":  ledDoc,
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// GatewayConfig parses GatewayConfigYAML into the gateway's config type.
func GatewayConfig(sc *Scenario, simURL string, keys Keys) (*config.Config, error) {
	y, err := GatewayConfigYAML(sc, simURL, keys)
	if err != nil {
		return nil, err
	}
	c, err := config.Load(bytes.NewReader(y))
	if err != nil {
		return nil, fmt.Errorf("generated gateway config: %w", err)
	}
	return c, nil
}
