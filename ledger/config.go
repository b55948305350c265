package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/internal/problems"
	"github.com/sluice-dev/sluice/ledger/budget"
	"github.com/sluice-dev/sluice/schemas"
)

// Levels of the bucket hierarchy, widest first. LevelScope is implicit: its
// node (id = the provider scope) is the first hop of every request's path.
const (
	LevelScope      = "scope"
	LevelOrg        = "org"
	LevelTenant     = "tenant"
	LevelTeam       = "team"
	LevelKey        = "key"
	LevelProfile    = "profile"
	LevelDeployment = "deployment"
)

// levelNames lists the levels in path order; a level's index is its code.
var levelNames = [...]string{LevelScope, LevelOrg, LevelTenant, LevelTeam, LevelKey, LevelProfile, LevelDeployment}

const numLevels = len(levelNames)

func levelCode(s string) (uint8, bool) {
	for i, n := range levelNames {
		if n == s {
			return uint8(i), true
		}
	}
	return 0, false
}

// Refill is a bucket's kind: how its capacity comes back. The zero value
// ("") takes the default, RefillToken.
type Refill string

// Refill kinds of a bucket.
const (
	// RefillToken is a continuous token bucket: Capacity per PeriodMs,
	// refilled continuously, holding at most Capacity×WindowMs/PeriodMs (the
	// enforcement window: 600/min with a 1 s window never grants more than
	// 10 at once, plus what refills meanwhile).
	RefillToken Refill = "token"
	// RefillFixed resets to Capacity at every period boundary
	// (t − ResetOffsetMs) mod PeriodMs == 0; debt carries over.
	RefillFixed Refill = "fixed"
	// RefillRolling counts charges over the last PeriodMs in Slots slots; a
	// charge stays counted until its whole slot has left the window.
	RefillRolling Refill = "rolling"
	// RefillConcurrency holds Capacity in-flight units, returned on
	// reconcile, release or expiry.
	RefillConcurrency Refill = "concurrency"
	// RefillRamp is a token bucket whose rate grows from Ramp.StartPerPeriod
	// by Ramp.StepPerPeriod every PeriodMs up to Capacity, pausing on stress.
	RefillRamp Refill = "ramp"
)

// Accounting is a bucket's accounting mode. The zero value ("") takes the
// default, AccountingReconcile.
type Accounting string

// Accounting modes of a bucket: how the provider whose quota the bucket
// mirrors counts a request's output tokens. A bucket that counts the way
// its provider does neither over-admits (refunding what the provider keeps)
// nor strands capacity (keeping what the provider returns).
const (
	// AccountingReconcile holds the estimate from grant to reconcile, then
	// charges the actual usage: unused capacity returns at once, overage
	// becomes debt. The default, and the rule for Sluice's own buckets
	// (tenant, team, key budgets).
	AccountingReconcile Accounting = "reconcile"
	// AccountingMaxTokensOnArrival charges the request's max output tokens
	// (ReserveRequested.MaxOutputTokens, at least the estimate) when it is
	// granted and never refunds it: the provider counted max_tokens when
	// the request arrived, so the capacity stays consumed until the bucket
	// refills. Usage above the charge is still debt. An attempt that never
	// reached the provider (provider-rejected, released without usage, retried
	// before dispatch) gets its charge back. OpenAI and Azure OpenAI TPM.
	AccountingMaxTokensOnArrival Accounting = "max_tokens_on_arrival"
	// AccountingOutputWhenProduced: the provider counts output as it is
	// produced (Anthropic OTPM). The ledger holds the estimate while the
	// request runs (the output will come) and charges the actual output at
	// reconcile: the arithmetic of AccountingReconcile, named so that the
	// config says which provider rule a bucket mirrors.
	AccountingOutputWhenProduced Accounting = "output_when_produced"
)

// Overload is what a class does with a request that would exceed its
// queue (depth or wait).
type Overload string

// Overload actions of a class.
const (
	OverloadDeny     Overload = "deny"     // deny with retry_after_ms
	OverloadFallback Overload = "fallback" // deny, marked fallback_allowed if the request allows it
)

// Config is the ledger's configuration document. It arrives as JSON inside
// schemas.ConfigChanged.Ledger. The zero value is not usable; ParseConfig
// fills defaults and validates.
type Config struct {
	// Scopes lists the provider scopes this ledger knows. A scope named "*"
	// is the template for any scope not listed.
	Scopes []ScopeConfig `json:"scopes"`
	// Classes are the traffic classes; DefaultClass is used when a request
	// names none.
	Classes      []ClassConfig `json:"classes"`
	DefaultClass string        `json:"default_class"`

	// HoldTTLMs is how long a grant stays held without reconcile or release
	// before it expires as abandoned; StreamHoldTTLMs for streaming grants.
	HoldTTLMs       int64 `json:"hold_ttl_ms"`
	StreamHoldTTLMs int64 `json:"stream_hold_ttl_ms"`
	// DedupTTLMs is how long a finished reservation is remembered so that a
	// redelivered event changes nothing.
	DedupTTLMs int64 `json:"dedup_ttl_ms"`
	// PriorityStepMs is how much queue precedence one unit of
	// ReserveRequested.Priority buys (priorities are clamped to ±100).
	PriorityStepMs int64 `json:"priority_step_ms"`
	// FairCostMs is the virtual-clock spacing between consecutive queued
	// requests of one tenant of weight 1 (weight w spaces them FairCostMs/w).
	FairCostMs int64 `json:"fair_cost_ms"`
	// NodeLivenessMs is how long a gateway that has sent a Heartbeat may
	// stay silent (in log time) before the ledger releases its grants and
	// drops its queued reservations as node_lost, rather than holding them
	// until HoldTTLMs. Nodes that never heartbeat are not subject to it.
	NodeLivenessMs int64 `json:"node_liveness_ms"`
	// RescueMax bounds deadline rescue: a waiter that aging put ahead of a
	// higher-class waiter with an earlier expiry lets that waiter go first,
	// but at most RescueMax times in a row (then it takes its turn), so
	// lower classes keep at least 1 in RescueMax+1 of the contested grants.
	RescueMax int32 `json:"rescue_max"`
	// ServiceSamplesMin is how many reconciled 2xx attempts a route needs
	// in the last two minutes before the ledger trusts its learned service
	// time and refuses attempts whose deadline is shorter (service.go;
	// default 20, -1: never refuse).
	ServiceSamplesMin int64 `json:"service_samples_min"`

	Retry    RetryConfig    `json:"retry"`
	Cooldown CooldownConfig `json:"cooldown"`
	// Learn tunes the capacity learned from the provider (learn.go).
	// Zero fields take their defaults when used, so configs and snapshots
	// without it stay as they were.
	Learn LearnConfig `json:"learn,omitzero"`

	// Limits on state size ("put a limit on everything").
	NodesMax        int `json:"nodes_max"`
	ReservationsMax int `json:"reservations_max"`

	// Entitlements bound what requests of a tenant, team or key may ask
	// for (entitle.go); absent: nothing is bounded.
	Entitlements []EntitlementConfig `json:"entitlements,omitempty"`

	// Budget holds the budgets across every provider scope (a tenant's
	// daily spend, a key's monthly tokens) that the scopes of this
	// partition spend through leases of their budget partitions
	// (ledger/budget, budgets.go). The budget partitions run the same
	// document. Absent: none.
	Budget *budget.Config `json:"budget,omitempty"`
}

// ScopeConfig configures one provider scope.
type ScopeConfig struct {
	Name    string         `json:"name"`
	Buckets []BucketConfig `json:"buckets"`
	Tenants []TenantConfig `json:"tenants,omitempty"`
	// DefaultTenantWeight is the fair-share weight of unlisted tenants.
	DefaultTenantWeight int64 `json:"default_tenant_weight"`
	// Shadow makes every bucket of the scope a shadow bucket (see
	// BucketConfig.Shadow): a whole limit set evaluated and recorded, never
	// enforced.
	Shadow bool `json:"shadow,omitempty"`
	// RequiredLevels are the levels every request path of this scope must
	// name, with a non-empty id: the ledger, not the caller, decides which
	// buckets a request passes. A ReserveRequested whose path lacks one is
	// denied (reason path_missing_level, nothing reserved). Absent means
	// the default: every level with a "*" bucket, and the deployment if it
	// has any bucket (defaultRequiredLevels); [] requires none.
	RequiredLevels []string `json:"required_levels"`
	// Partitions splits a hot scope over that many sub-scopes
	// "<name>#<i>", each its own partition and ledger, when one partition
	// cannot decide its traffic; its deployment limits become budgets
	// leased to the sub-scopes, its limits above the key level are divided
	// among them (split.go). 0 or 1: one partition.
	Partitions int `json:"partitions,omitempty"`
}

// defaultRequiredLevels are the levels a scope requires when its config
// does not say: every level with a template ("*") bucket — it limits every
// id of the level, so a path that leaves the level out would skip a limit
// meant for all — and the deployment level when it has any bucket: it is
// the provider's quota itself. A level with exact-id buckets only (a limit
// for team "search") is not required by default: it does not mean that
// every request belongs to a team. Levels come in path order.
func defaultRequiredLevels(s *ScopeConfig) []string {
	var need [numLevels]bool
	for _, b := range s.Buckets {
		if b.Shadow || s.Shadow {
			continue // a shadow limit must change no decision, not even by requiring its level
		}
		lv, ok := levelCode(b.Level)
		if ok && lv != 0 && (b.ID == "*" || b.Level == LevelDeployment) {
			need[lv] = true
		}
	}
	out := []string{}
	for lv, n := range need {
		if n {
			out = append(out, levelNames[lv])
		}
	}
	return out
}

// TenantConfig sets one tenant's fair-share weight in its scope.
type TenantConfig struct {
	ID     string `json:"id"`
	Weight int64  `json:"weight"`
}

// BucketConfig is one bucket per (level, id, dimension). ID "*" is the
// template stamped for every id of the level that has no exact entry for the
// dimension.
type BucketConfig struct {
	Level     string            `json:"level"`
	ID        string            `json:"id"`
	Dimension schemas.Dimension `json:"dimension"`
	// Refill is the kind (token, fixed, rolling, concurrency, ramp); empty
	// means the dimension's default: concurrency→concurrency,
	// requests_per_day→fixed, spend→rolling, ramp→ramp, others→token.
	Refill Refill `json:"refill,omitempty"`
	// Capacity is in the dimension's unit (requests, tokens, in-flight,
	// micro-units of spend) per PeriodMs.
	Capacity int64 `json:"capacity"`
	// PeriodMs defaults to 60 000 (token, ramp) or 86 400 000 (fixed,
	// rolling); unused for concurrency.
	PeriodMs int64 `json:"period_ms,omitempty"`
	// WindowMs is the enforcement window of token and ramp buckets
	// (default 1 000, at most PeriodMs).
	WindowMs int64 `json:"window_ms,omitempty"`
	// LimitWindowMs is, in a split scope's sub-scope, the window_ms of
	// the limit this bucket is a share of, when SplitLimit lengthened
	// WindowMs so that the share bursts one unit: what the admin API shows
	// as the limit, so that setting what it shows sets the same limit. The
	// bucket enforces WindowMs.
	LimitWindowMs int64 `json:"limit_window_ms,omitempty"`
	// ResetOffsetMs shifts fixed-window boundaries (e.g. a provider's
	// midnight in its time zone).
	ResetOffsetMs int64 `json:"reset_offset_ms,omitempty"`
	// Slots is the rolling window's resolution (default 24).
	Slots int `json:"slots,omitempty"`
	// Guaranteed is the baseline (same unit and period as Capacity) that
	// this bucket's owner may always use; usage above it is borrowed.
	Guaranteed int64 `json:"guaranteed,omitempty"`
	// BorrowReserve is the level (in units) that borrowed grants may not
	// consume: kept for guaranteed traffic.
	BorrowReserve int64 `json:"borrow_reserve,omitempty"`
	// ExcludeCachedInput makes input-token dimensions ignore cached input
	// (Anthropic does not count cache reads against ITPM): neither the
	// estimate nor the actual of cached input tokens is charged.
	ExcludeCachedInput bool `json:"exclude_cached_input,omitempty"`
	// Accounting says how the provider behind this bucket counts output
	// tokens (output_tokens and total_tokens buckets only): "reconcile"
	// (default, Sluice's own buckets), "max_tokens_on_arrival" (OpenAI,
	// Azure) or "output_when_produced" (Anthropic OTPM). See the
	// Accounting* constants.
	Accounting Accounting `json:"accounting,omitempty"`
	// RefundUnsent (requests buckets only) gives the request back when the
	// attempt never reached the provider's counter: the provider refused
	// it (429, 503) or the gateway released it unsent. For a provider that
	// does not count refused requests (the simulator); OpenAI documents
	// that refused requests count, so its buckets leave it off.
	RefundUnsent bool `json:"refund_unsent,omitempty"`
	// Ramp configures a ramp bucket.
	Ramp *RampConfig `json:"ramp,omitempty"`
	// Shadow makes the bucket evaluated but never enforced: each grant
	// records in Decision.Shadow whether the bucket would have covered it,
	// and only grants it covers are charged to it. Changing false to true
	// (or back) is the whole rollout of a new limit.
	Shadow bool `json:"shadow,omitempty"`
}

// RampConfig configures a ramp governor bucket (dimension "ramp").
type RampConfig struct {
	StartPerPeriod int64 `json:"start_per_period"`
	StepPerPeriod  int64 `json:"step_per_period"`
	// Pause thresholds; 0 disables each.
	PauseRejectPermille int64 `json:"pause_reject_permille,omitempty"` // provider 429s per 1000 grants in the last period
	PauseQueueDepth     int64 `json:"pause_queue_depth,omitempty"`     // queued requests in the scope
	PauseP95Ms          int64 `json:"pause_p95_ms,omitempty"`          // p95 of reconciled total_ms in the last period
}

// ClassConfig is one traffic class. Classes are ranked by AgeOffsetMs: a
// queued request of a class with offset X outranks a fresh request of a
// class with offset 0 after waiting X ms (aging).
type ClassConfig struct {
	Name        string   `json:"name"`
	AgeOffsetMs int64    `json:"age_offset_ms"`
	MaxWaitMs   int64    `json:"max_wait_ms"`
	MaxDepth    int      `json:"max_depth"`
	Overload    Overload `json:"overload"`
	// DeadlineMs is the deadline the gateway gives a request of this class
	// whose client declared none (no X-Sluice-Deadline-Ms, no SDK read
	// timeout) and whose key sets none; MaxDeadlineMs caps every deadline of
	// the class. 0: none. The gateway reads and validates both
	// (admission/config); the ledger only sees each request's own deadline.
	DeadlineMs    int64 `json:"deadline_ms,omitempty"`
	MaxDeadlineMs int64 `json:"max_deadline_ms,omitempty"`
}

// RetryConfig is the central retry policy.
type RetryConfig struct {
	MaxAttempts int32 `json:"max_attempts"` // default per logical request
	BaseMs      int64 `json:"base_ms"`
	MaxMs       int64 `json:"max_ms"`
	// RatioPermille: each first attempt earns RatioPermille/1000 retry
	// credits in its scope, at most BurstMax credits; a retry costs one.
	RatioPermille int64 `json:"ratio_permille"`
	BurstMax      int64 `json:"burst_max"`
}

// CooldownConfig sets how provider refusals close a scope.
type CooldownConfig struct {
	RateLimitedMs int64 `json:"rate_limited_ms"` // 429 without Retry-After
	OverloadedMs  int64 `json:"overloaded_ms"`   // 503
	// QuotaPeriodMs / QuotaResetOffsetMs define when an exhausted daily quota
	// reopens if the provider gave no Retry-After.
	QuotaPeriodMs      int64 `json:"quota_period_ms"`
	QuotaResetOffsetMs int64 `json:"quota_reset_offset_ms"`
	// StormHoldAttempts sets the storm hold: for one Retry-After after a
	// provider 429's cooldown ends (each further 429 extends it), a waiter
	// whose deadline leaves room for more than StormHoldAttempts attempts
	// a Retry-After apart waits, so that what must go now goes first and
	// what can wait does not meet the storm. Default 3.
	StormHoldAttempts int64 `json:"storm_hold_attempts"`
}

// Defaults.
const (
	defaultHoldTTLMs       = 120_000
	defaultStreamHoldTTLMs = 600_000
	defaultDedupTTLMs      = 600_000
	defaultPriorityStepMs  = 100
	defaultFairCostMs      = 50
	defaultNodeLivenessMs  = 5_000
	defaultRescueMax       = 8
	// 20 samples make the p95 the second-largest of them at worst.
	defaultServiceSamplesMin = 20
	defaultNodesMax          = 4_000_000
	defaultReservationsMax   = 2_000_000
	dayMs                    = 86_400_000
	minuteMs                 = 60_000
	maxPeriodMs              = 366 * dayMs
	maxPriority              = 100
)

// ParseConfig decodes a Config document, fills defaults and validates it.
// The error (a *problems.List) lists every problem with its path and, for
// a problem of decoding, its line and column in b.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		// encoding/json stops at the first problem and names it in Go's
		// terms (BucketConfig.scopes.buckets.capacity, no index). Read the
		// document again as nodes (JSON is YAML) to name every problem at
		// its place, and decode what fits so that validation reports the
		// rest.
		p := &problems.List{Subject: "ledger config"}
		c = Config{}
		if root := p.Parse(b); root != nil {
			p.Locate(root, "")
			p.DecodeJSONNode(root, "", &c)
		}
		if p.Len() == 0 {
			p.Add("", "%s", strings.TrimPrefix(err.Error(), "json: "))
		}
		p.Merge("", c.Finish())
		return Config{}, p.Err()
	}
	if p := c.Finish(); p.Len() > 0 {
		// Place the problems at their line:column of the text (only on
		// this error path: a document that is valid is never re-read).
		var scratch problems.List
		if root := scratch.Parse(b); root != nil {
			p.Locate(root, "")
		}
		return Config{}, p.Err()
	}
	return c, nil
}

// Finish fills defaults and validates, returning every problem (an empty
// list when there is none) with its path in the document. A caller that
// decoded the document itself (the gateway, from its YAML) merges them
// into its own list, where the paths find their lines.
func (c *Config) Finish() *problems.List {
	c.fillDefaults()
	p := &problems.List{Subject: "ledger config"}
	c.splitScopes(p)
	c.validate(p)
	return p
}

func defaultRefill(d schemas.Dimension) Refill {
	switch d {
	case schemas.DimConcurrency:
		return RefillConcurrency
	case schemas.DimRequestsPerDay:
		return RefillFixed
	case schemas.DimSpend:
		return RefillRolling
	case schemas.DimRamp:
		return RefillRamp
	}
	return RefillToken
}

func (c *Config) fillDefaults() {
	if len(c.Classes) == 0 {
		c.Classes = defaultClasses()
	}
	if c.DefaultClass == "" && len(c.Classes) > 0 {
		c.DefaultClass = c.Classes[0].Name
	}
	for i := range c.Classes {
		if c.Classes[i].Overload == "" {
			c.Classes[i].Overload = OverloadDeny
		}
	}
	if c.Budget != nil {
		c.Budget.FillDefaults()
	}
	setDef(&c.HoldTTLMs, defaultHoldTTLMs)
	setDef(&c.StreamHoldTTLMs, defaultStreamHoldTTLMs)
	setDef(&c.DedupTTLMs, defaultDedupTTLMs)
	setDef(&c.PriorityStepMs, defaultPriorityStepMs)
	setDef(&c.FairCostMs, defaultFairCostMs)
	setDef(&c.NodeLivenessMs, defaultNodeLivenessMs)
	setDef32(&c.RescueMax, defaultRescueMax)
	setDef(&c.ServiceSamplesMin, defaultServiceSamplesMin)
	if c.NodesMax == 0 {
		c.NodesMax = defaultNodesMax
	}
	if c.ReservationsMax == 0 {
		c.ReservationsMax = defaultReservationsMax
	}
	setDef32(&c.Retry.MaxAttempts, 3)
	setDef(&c.Retry.BaseMs, 250)
	setDef(&c.Retry.MaxMs, 20_000)
	setDef(&c.Retry.RatioPermille, 200)
	setDef(&c.Retry.BurstMax, 50)
	setDef(&c.Cooldown.RateLimitedMs, 1_000)
	setDef(&c.Cooldown.OverloadedMs, 2_000)
	setDef(&c.Cooldown.QuotaPeriodMs, dayMs)
	setDef(&c.Cooldown.StormHoldAttempts, 3)
	for si := range c.Scopes {
		s := &c.Scopes[si]
		setDef(&s.DefaultTenantWeight, 1)
		if s.RequiredLevels == nil {
			s.RequiredLevels = defaultRequiredLevels(s)
		}
		for bi := range s.Buckets {
			fillBucketDefaults(&s.Buckets[bi])
		}
	}
}

func fillBucketDefaults(b *BucketConfig) {
	if b.Refill == "" {
		b.Refill = defaultRefill(b.Dimension)
	}
	switch b.Refill {
	case RefillToken, RefillRamp:
		setDef(&b.PeriodMs, minuteMs)
		if b.WindowMs == 0 {
			b.WindowMs = min(1_000, b.PeriodMs)
		}
	case RefillFixed, RefillRolling:
		setDef(&b.PeriodMs, dayMs)
	}
	if b.Refill == RefillRolling && b.Slots == 0 {
		b.Slots = 24
	}
}

func setDef(p *int64, v int64) {
	if *p == 0 {
		*p = v
	}
}

func setDef32(p *int32, v int32) {
	if *p == 0 {
		*p = v
	}
}

func defaultClasses() []ClassConfig {
	return []ClassConfig{
		{Name: "interactive", AgeOffsetMs: 0, MaxWaitMs: 300, MaxDepth: 1_000, Overload: OverloadFallback},
		{Name: "agent", AgeOffsetMs: 2_000, MaxWaitMs: 10_000, MaxDepth: 5_000, Overload: OverloadDeny},
		{Name: "batch", AgeOffsetMs: 30_000, MaxWaitMs: 1_200_000, MaxDepth: 50_000, Overload: OverloadDeny},
	}
}

// Validate reports every problem of c with its location (a
// *problems.List, nil when there is none). It assumes defaults are filled
// (ParseConfig does that).
func (c Config) Validate() error {
	p := &problems.List{Subject: "ledger config"}
	c.validate(p)
	return p.Err()
}

// validate adds every problem of c to p. A check that relates two fields
// runs only when both are valid on their own: one bad value is one
// problem, not one more for every rule that mentions it.
func (c Config) validate(p *problems.List) {
	bad := func(loc, format string, a ...any) { p.Add(loc, format, a...) }
	if c.Budget != nil {
		if err := c.Budget.Validate(); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				loc, msg, _ := strings.Cut(line, ": ")
				bad("budget."+loc, "%s", msg)
			}
		}
	}
	classSeen := c.validateClasses(bad)
	for _, r := range c.settingChecks() {
		if r.bad {
			bad(r.loc, "%s", r.msg)
		}
	}
	c.validateScopes(bad)
	validateEntitlements(&c, classSeen, bad)
}

// check is one row of a validation table: the problem at loc, if bad.
type check struct {
	loc string
	bad bool
	msg string
}

// inRange is the row "v out of [lo, hi]".
func inRange(loc string, v, lo, hi int64) check {
	return check{loc, v < lo || v > hi, fmt.Sprintf("%d out of [%d, %d]", v, lo, hi)}
}

// settingChecks are the checks of the ledger-wide settings, in the order
// they are reported.
func (c Config) settingChecks() []check {
	quotaOK := c.Cooldown.QuotaPeriodMs > 0 && c.Cooldown.QuotaPeriodMs <= maxPeriodMs
	return []check{
		inRange("hold_ttl_ms", c.HoldTTLMs, 1, dayMs),
		inRange("stream_hold_ttl_ms", c.StreamHoldTTLMs, 1, dayMs),
		inRange("dedup_ttl_ms", c.DedupTTLMs, 1, dayMs),
		{"dedup_ttl_ms", c.DedupTTLMs < c.HoldTTLMs && c.HoldTTLMs > 0 && c.HoldTTLMs <= dayMs && c.DedupTTLMs > 0,
			fmt.Sprintf("%d is shorter than hold_ttl_ms %d: a late redelivery could be granted twice", c.DedupTTLMs, c.HoldTTLMs)},
		inRange("priority_step_ms", c.PriorityStepMs, 1, minuteMs),
		inRange("fair_cost_ms", c.FairCostMs, 1, minuteMs),
		// Below a second, a gateway heartbeating every second (plus
		// produce latency) would be declared lost while alive.
		inRange("node_liveness_ms", c.NodeLivenessMs, 1_000, dayMs),
		inRange("rescue_max", int64(c.RescueMax), 1, 1000),
		{"service_samples_min", c.ServiceSamplesMin != -1 && (c.ServiceSamplesMin < 1 || c.ServiceSamplesMin > 1_000_000),
			fmt.Sprintf("%d out of [1, 1000000] (or -1: off)", c.ServiceSamplesMin)},
		{"nodes_max/reservations_max", c.NodesMax <= 0 || c.ReservationsMax <= 0, "must be positive"},
		inRange("retry.max_attempts", int64(c.Retry.MaxAttempts), 1, 100),
		inRange("retry.base_ms", c.Retry.BaseMs, 1, dayMs),
		inRange("retry.max_ms", c.Retry.MaxMs, 1, dayMs),
		{"retry.max_ms", c.Retry.MaxMs < c.Retry.BaseMs && c.Retry.MaxMs > 0 && c.Retry.BaseMs > 0 && c.Retry.BaseMs <= dayMs,
			fmt.Sprintf("%d below retry.base_ms %d", c.Retry.MaxMs, c.Retry.BaseMs)},
		inRange("retry.ratio_permille", int64(c.Retry.RatioPermille), 0, 1000),
		inRange("retry.burst_max", int64(c.Retry.BurstMax), 0, 1_000_000),
		inRange("cooldown.rate_limited_ms", c.Cooldown.RateLimitedMs, 1, dayMs),
		inRange("cooldown.overloaded_ms", c.Cooldown.OverloadedMs, 1, dayMs),
		inRange("cooldown.quota_period_ms", c.Cooldown.QuotaPeriodMs, 1, maxPeriodMs),
		inRange("cooldown.storm_hold_attempts", int64(c.Cooldown.StormHoldAttempts), 1, 100),
		{"cooldown.quota_reset_offset_ms", c.Cooldown.QuotaResetOffsetMs < 0 || quotaOK && c.Cooldown.QuotaResetOffsetMs >= c.Cooldown.QuotaPeriodMs,
			fmt.Sprintf("%d out of [0, quota_period_ms)", c.Cooldown.QuotaResetOffsetMs)},
	}
}

// validateClasses checks the traffic classes and the default class, and
// returns the names of the classes.
func (c Config) validateClasses(bad func(loc, format string, a ...any)) map[string]bool {
	if len(c.Classes) == 0 {
		bad("classes", "at least one class is required")
	}
	if len(c.Classes) > 64 {
		bad("classes", "%d classes, at most 64", len(c.Classes))
	}
	classSeen := map[string]bool{}
	for i, cl := range c.Classes {
		loc := fmt.Sprintf("classes[%d]", i)
		if cl.Name == "" {
			bad(loc+".name", "empty")
		} else if classSeen[cl.Name] {
			bad(loc+".name", "duplicate class %q", cl.Name)
		}
		classSeen[cl.Name] = true
		for _, r := range []check{
			inRange(loc+".age_offset_ms", cl.AgeOffsetMs, 0, maxPeriodMs),
			inRange(loc+".max_wait_ms", cl.MaxWaitMs, 0, dayMs),
			inRange(loc+".max_depth", int64(cl.MaxDepth), 0, 1_000_000),
			{loc + ".overload", cl.Overload != OverloadDeny && cl.Overload != OverloadFallback,
				fmt.Sprintf("%q, want %q or %q", cl.Overload, OverloadDeny, OverloadFallback)},
		} {
			if r.bad {
				bad(r.loc, "%s", r.msg)
			}
		}
	}
	if c.DefaultClass != "" && !classSeen[c.DefaultClass] {
		bad("default_class", "%q is not a class%s", c.DefaultClass, problems.DidYouMean(c.DefaultClass, classNames(c.Classes)))
	}
	return classSeen
}

// validateScopes checks every scope: its name, tenants, required levels
// and buckets.
func (c Config) validateScopes(bad func(loc, format string, a ...any)) {
	if len(c.Scopes) == 0 {
		bad("scopes", "at least one scope is required")
	}
	scopeSeen := map[string]bool{}
	for si, s := range c.Scopes {
		sloc := fmt.Sprintf("scopes[%d]", si)
		if s.Name == "" {
			bad(sloc+".name", "empty")
		} else if scopeSeen[s.Name] {
			bad(sloc+".name", "duplicate scope %q", s.Name)
		}
		scopeSeen[s.Name] = true
		if r := inRange(sloc+".default_tenant_weight", s.DefaultTenantWeight, 1, 1_000_000); r.bad {
			bad(r.loc, "%s", r.msg)
		}
		tSeen := map[string]bool{}
		for ti, t := range s.Tenants {
			tloc := fmt.Sprintf("%s.tenants[%d]", sloc, ti)
			if t.ID == "" || tSeen[t.ID] {
				bad(tloc+".id", "empty or duplicate %q", t.ID)
			}
			tSeen[t.ID] = true
			if r := inRange(tloc+".weight", t.Weight, 1, 1_000_000); r.bad {
				bad(r.loc, "%s", r.msg)
			}
		}
		validateRequiredLevels(sloc+".required_levels", s.RequiredLevels, bad)
		bSeen := map[string]bool{}
		for bi, b := range s.Buckets {
			b.Shadow = b.Shadow || s.Shadow
			validateBucket(fmt.Sprintf("%s.buckets[%d]", sloc, bi), s.Name, b, bSeen, bad)
		}
	}
}

func classNames(cls []ClassConfig) []string {
	out := make([]string, len(cls))
	for i, cl := range cls {
		out[i] = cl.Name
	}
	return out
}

// validateRequiredLevels checks a scope's required_levels: known levels
// other than the implicit scope level, each once.
func validateRequiredLevels(loc string, levels []string, bad func(loc, format string, a ...any)) {
	seen := map[string]bool{}
	for i, lv := range levels {
		l := fmt.Sprintf("%s[%d]", loc, i)
		switch _, ok := levelCode(lv); {
		case !ok:
			bad(l, "unknown level %q (want one of %s)", lv, strings.Join(levelNames[1:], ", "))
		case lv == LevelScope:
			bad(l, "the scope level is on every path already; list only org, tenant, team, key, profile or deployment")
		case seen[lv]:
			bad(l, "duplicate level %q", lv)
		}
		seen[lv] = true
	}
}

// maxScaled bounds a token bucket's scaled level (units × period).
const maxScaled = int64(1) << 61

func validateBucket(loc, scope string, b BucketConfig, seen map[string]bool, bad func(loc, format string, a ...any)) {
	known := validateBucketIdentity(loc, scope, b, seen, bad)
	capOK := validateBucketAmounts(loc, b, bad)
	if known {
		validateAccounting(loc, b, bad)
	}
	validateRefill(loc, b, capOK, bad)
	refillKnown := false
	switch b.Refill {
	case RefillToken, RefillRamp, RefillFixed, RefillRolling, RefillConcurrency:
		refillKnown = true
	}
	if !known || !refillKnown {
		return // pairing a dimension with a refill needs both
	}
	if b.Dimension == schemas.DimConcurrency && b.Refill != RefillConcurrency {
		bad(loc+".refill", "dimension concurrency needs refill %q", RefillConcurrency)
	}
	if b.Refill == RefillConcurrency && b.Dimension != schemas.DimConcurrency {
		bad(loc+".refill", "refill concurrency is only for dimension concurrency")
	}
	if b.Refill == RefillRamp && b.Dimension != schemas.DimRamp {
		bad(loc+".refill", "refill ramp is only for dimension ramp")
	}
	if b.Dimension == schemas.DimRamp && b.Refill != RefillRamp {
		bad(loc+".refill", "dimension ramp needs refill %q", RefillRamp)
	}
}

// validateBucketIdentity checks what names the bucket (level, id,
// dimension) and that no other bucket of the scope has the same name. It
// reports whether the dimension is known.
func validateBucketIdentity(loc, scope string, b BucketConfig, seen map[string]bool, bad func(loc, format string, a ...any)) (known bool) {
	if _, ok := levelCode(b.Level); !ok {
		bad(loc+".level", "unknown level %q (want one of %s)%s", b.Level, strings.Join(levelNames[:], ", "), problems.Hint(b.Level, levelNames[:]))
	}
	if b.ID == "" {
		bad(loc+".id", "empty (use \"*\" for every id of the level)")
	}
	if b.Level == LevelScope && b.ID != "*" && b.ID != scope && scope != "*" {
		bad(loc+".id", "scope-level bucket id %q must be \"*\" or the scope name %q", b.ID, scope)
	}
	for _, d := range schemas.Dimensions {
		if d == b.Dimension {
			known = true
		}
	}
	if !known {
		names := make([]string, len(schemas.Dimensions))
		for i, d := range schemas.Dimensions {
			names[i] = string(d)
		}
		bad(loc+".dimension", "unknown dimension %q%s", b.Dimension, problems.DidYouMean(string(b.Dimension), names))
	}
	// A shadow bucket may shadow an enforced one of the same dimension (a
	// tighter limit on trial): the key includes the flag.
	k := fmt.Sprintf("%s\x00%s\x00%s\x00%t", b.Level, b.ID, b.Dimension, b.Shadow)
	if seen[k] {
		kind := ""
		if b.Shadow {
			kind = "shadow "
		}
		bad(loc, "duplicate %sbucket %s:%s %s", kind, b.Level, b.ID, b.Dimension)
	}
	seen[k] = true
	return known
}

// validateBucketAmounts checks the capacity and what it bounds, and
// reports whether the capacity itself is valid.
func validateBucketAmounts(loc string, b BucketConfig, bad func(loc, format string, a ...any)) (capOK bool) {
	// What is bounded by the capacity is checked against it only when the
	// capacity itself is valid (capacity: -5 is one problem, not three).
	capOK = b.Capacity > 0 && b.Capacity <= maxScaled
	if !capOK {
		bad(loc+".capacity", "%d out of [1, 2^61]", b.Capacity)
	}
	if b.Guaranteed < 0 || capOK && b.Guaranteed > b.Capacity {
		bad(loc+".guaranteed", "%d out of [0, capacity %d]", b.Guaranteed, b.Capacity)
	}
	if b.BorrowReserve < 0 || capOK && b.BorrowReserve > b.Capacity {
		bad(loc+".borrow_reserve", "%d out of [0, capacity %d]", b.BorrowReserve, b.Capacity)
	}
	if b.Shadow && (b.Refill == RefillRamp || b.Guaranteed > 0 || b.BorrowReserve > 0) {
		bad(loc+".shadow", "shadow buckets cannot be ramp buckets or have guaranteed or borrow_reserve")
	}
	if b.Ramp != nil && b.Refill != RefillRamp {
		bad(loc+".ramp", "set on a %q bucket", b.Refill)
	}
	return capOK
}

// validateRefill checks the settings of the bucket's refill kind: period,
// window, reset offset, slots.
func validateRefill(loc string, b BucketConfig, capOK bool, bad func(loc, format string, a ...any)) {
	switch b.Refill {
	case RefillToken, RefillRamp:
		periodOK := b.PeriodMs > 0 && b.PeriodMs <= dayMs
		if !periodOK {
			bad(loc+".period_ms", "%d out of [1, %d]", b.PeriodMs, int64(dayMs))
		}
		windowOK := b.WindowMs > 0 && (!periodOK || b.WindowMs <= b.PeriodMs)
		if !windowOK {
			bad(loc+".window_ms", "%d out of [1, period_ms %d]", b.WindowMs, b.PeriodMs)
		}
		if periodOK && capOK && b.Capacity > maxScaled/b.PeriodMs {
			bad(loc+".capacity", "%d × period_ms %d overflows; use a shorter period", b.Capacity, b.PeriodMs)
		}
		if periodOK && windowOK && capOK && b.Capacity*b.WindowMs < b.PeriodMs {
			bad(loc+".window_ms", "burst capacity×window/period = %d×%d/%d is below one unit", b.Capacity, b.WindowMs, b.PeriodMs)
		}
		if b.Refill == RefillRamp {
			validateRamp(loc, b, capOK, bad)
		}
	case RefillFixed, RefillRolling:
		periodOK := b.PeriodMs > 0 && b.PeriodMs <= maxPeriodMs
		if !periodOK {
			bad(loc+".period_ms", "%d out of [1, %d]", b.PeriodMs, int64(maxPeriodMs))
		}
		if b.ResetOffsetMs < 0 || (periodOK && b.ResetOffsetMs >= b.PeriodMs) {
			bad(loc+".reset_offset_ms", "%d out of [0, period_ms)", b.ResetOffsetMs)
		}
		if b.Refill == RefillRolling && (b.Slots < 1 || b.Slots > 1440) {
			bad(loc+".slots", "%d out of [1, 1440]", b.Slots)
		}
		if b.Guaranteed > 0 {
			bad(loc+".guaranteed", "only token buckets have a guaranteed baseline")
		}
	case RefillConcurrency:
		if b.Guaranteed > 0 {
			bad(loc+".guaranteed", "only token buckets have a guaranteed baseline")
		}
	default:
		bad(loc+".refill", "unknown refill kind %q%s", b.Refill,
			problems.DidYouMean(string(b.Refill), []string{string(RefillToken), string(RefillFixed), string(RefillRolling), string(RefillConcurrency), string(RefillRamp)}))
	}
}

// validateRamp checks a ramp bucket's ramp settings.
func validateRamp(loc string, b BucketConfig, capOK bool, bad func(loc, format string, a ...any)) {
	if b.Ramp == nil {
		bad(loc+".ramp", "required for a ramp bucket")
		return
	}
	if b.Ramp.StartPerPeriod <= 0 || capOK && b.Ramp.StartPerPeriod > b.Capacity {
		bad(loc+".ramp.start_per_period", "%d out of [1, capacity %d]", b.Ramp.StartPerPeriod, b.Capacity)
	}
	if b.Ramp.StepPerPeriod < 0 || capOK && b.Ramp.StepPerPeriod > b.Capacity {
		bad(loc+".ramp.step_per_period", "%d out of [0, capacity %d]", b.Ramp.StepPerPeriod, b.Capacity)
	}
	if b.Ramp.PauseRejectPermille < 0 || b.Ramp.PauseRejectPermille > 1000 {
		bad(loc+".ramp.pause_reject_permille", "%d out of [0, 1000]", b.Ramp.PauseRejectPermille)
	}
	if b.Ramp.PauseQueueDepth < 0 || b.Ramp.PauseP95Ms < 0 {
		bad(loc+".ramp", "negative pause threshold")
	}
}

// validateAccounting checks a bucket's accounting mode and cached-input
// flag against its dimension: both describe how a provider counts tokens.
func validateAccounting(loc string, b BucketConfig, bad func(loc, format string, a ...any)) {
	switch b.Accounting {
	case "", AccountingReconcile:
	case AccountingMaxTokensOnArrival, AccountingOutputWhenProduced:
		if b.Dimension != schemas.DimOutputTokens && b.Dimension != schemas.DimTotalTokens {
			bad(loc+".accounting", "%q counts output tokens: only for output_tokens or total_tokens buckets, not %s", b.Accounting, b.Dimension)
		}
	default:
		bad(loc+".accounting", "unknown accounting %q (want %q, %q or %q)", b.Accounting,
			AccountingReconcile, AccountingMaxTokensOnArrival, AccountingOutputWhenProduced)
	}
	if b.ExcludeCachedInput && b.Dimension != schemas.DimInputTokens && b.Dimension != schemas.DimTotalTokens {
		bad(loc+".exclude_cached_input", "only for input_tokens or total_tokens buckets, not %s", b.Dimension)
	}
	if b.RefundUnsent && b.Dimension != schemas.DimRequests {
		bad(loc+".refund_unsent", "only for requests buckets, not %s", b.Dimension)
	}
}

// DefaultDevConfig is the configuration `sluice dev` starts with: one scope
// "sim-openai" with a per-key bucket of 60 requests per minute and the
// default classes interactive, agent and batch.
func DefaultDevConfig() Config {
	c := Config{
		Scopes: []ScopeConfig{{
			Name: "sim-openai",
			Buckets: []BucketConfig{
				{Level: LevelKey, ID: "*", Dimension: schemas.DimRequests, Capacity: 60, PeriodMs: minuteMs, WindowMs: 10_000},
			},
		}},
	}
	c.fillDefaults()
	return c
}

// LearnConfig tunes the capacity the ledger learns from its provider
// (learn.go, README "Capacity learned from the provider"). Every field's
// zero value means its default.
type LearnConfig struct {
	// Off disables learning: configured capacities are enforced as
	// written (the headers still lower levels, ProviderObserved).
	Off bool `json:"off,omitempty"`
	// DecreasePermille is the multiplicative decrease a refusal without
	// rate-limit headers applies (default 700: ×0.7; a window mostly
	// refused cuts further, to the share or the rate accepted).
	DecreasePermille int64 `json:"decrease_permille,omitempty"`
	// IncreasePermille is the additive increase each accepted attempt
	// earns, in permille of the learned capacity, applied at most once
	// per IntervalMs while no refusal is in the trailing window (default
	// 3: ×0.7 back to ×1 in about 120 accepts, whatever the rate).
	IncreasePermille int64 `json:"increase_permille,omitempty"`
	// IntervalMs spaces the changes: at most one decrease and one
	// increase per interval (default 1000).
	IntervalMs int64 `json:"interval_ms,omitempty"`
	// FloorPermille is the lowest learned capacity, in permille of the
	// configured one (default 10: hand-written limits 10–50× the real
	// one are met; never below 1 unit per period).
	FloorPermille int64 `json:"floor_permille,omitempty"`
	// RatioKPermille is Google SRE's K (client-side adaptive throttling),
	// in permille: a refusal whose headers reported room for it lowers
	// the capacity only while requests > K × accepts over the trailing
	// two intervals (a bare refusal is not gated) (default 3000: more
	// than 2/3 of the attempts refused; 1000: any refusal). SRE's K = 2
	// lowered the rate in the counter storm (a provider refusing every
	// second attempt whatever it is sent, where a lower rate only loses
	// work: served 184 of 260 instead of 241 in TestModelStorm).
	RatioKPermille int64 `json:"ratio_k_permille,omitempty"`
	// BareGatePermille gates the decrease a bare 429 (no rate-limit
	// header) applies: it acts only while the refusals the headers do
	// not explain are at least this share of the requests the scope sent
	// over the trailing minute (default 100: 10 %). A provider that
	// refuses a small share of whatever it is sent (Vertex AI's shared
	// quota) is then not cut to the floor, and a first burst into a
	// limit configured 10–50× too high (most of it refused) still is at
	// once. 1: any bare 429 acts (the rule before the gate).
	BareGatePermille int64 `json:"bare_gate_permille,omitempty"`
	// HeadroomPermille is the share of a limit reported by the provider's
	// headers that the ledger enforces (default 970: 97 %, as the
	// loadtest's generated configs keep; 1000: the reported limit
	// itself). The margin absorbs the varying delay from grant to the
	// provider's count, which at a window of about one request turns
	// exact pacing into 429s (noisy-neighbor-handwritten: 26 of 79 calls).
	// A requests bucket whose window holds at most one request keeps the
	// margin the share keeps of its window per grant instead, (1000 −
	// permille) × window_ms / 1000 between grants (paceBound).
	HeadroomPermille int64 `json:"headroom_permille,omitempty"`
	// PaceDeliveryMs is the delivery allowance of a grant through a
	// requests bucket whose window holds at most one request (default
	// 150; negative: none). Such a grant's Decision carries SendAtMs =
	// its log time + this, and the gateway holds the attempt until then
	// (at most this long), so the spacing the ledger kept between two
	// grants is the spacing at the provider even when one grant took
	// 112 ms to reach the gateway and the next 4 ms (sendAt). It must
	// exceed the usual grant-to-gateway delay (p95 17 ms, max 112 ms at
	// load average 4–12); a grant delayed past it arrives late, which
	// the pace margin covers.
	PaceDeliveryMs int64 `json:"pace_delivery_ms,omitempty"`
}

func (c LearnConfig) decrease() int64 { return defOr(c.DecreasePermille, 700, 1, 999) }
func (c LearnConfig) increase() int64 { return defOr(c.IncreasePermille, 3, 1, 1000) }
func (c LearnConfig) interval() int64 { return defOr(c.IntervalMs, 1000, 1, dayMs) }
func (c LearnConfig) floor() int64    { return defOr(c.FloorPermille, 10, 1, 1000) }
func (c LearnConfig) ratioK() int64   { return defOr(c.RatioKPermille, 3000, 1000, 100_000) }
func (c LearnConfig) bareGate() int64 { return defOr(c.BareGatePermille, 100, 1, 1000) }
func (c LearnConfig) headroom() int64 { return defOr(c.HeadroomPermille, 970, 1, 1000) }

// delivery is PaceDeliveryMs: 0 when negative (no send-at), at most 10 s.
func (c LearnConfig) delivery() int64 {
	if c.PaceDeliveryMs < 0 {
		return 0
	}
	return defOr(c.PaceDeliveryMs, 150, 1, 10_000)
}

// defOr returns v clamped to [lo, hi], or def when v is 0.
func defOr(v, def, lo, hi int64) int64 {
	if v == 0 {
		return def
	}
	return min(max(v, lo), hi)
}
