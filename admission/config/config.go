// Package config is the gateway's typed configuration: providers and their
// scopes, routes from a public model name to upstream deployments, tenants
// and their API keys (stored as SHA-256 hashes only), and the ledger's quota
// document that the gateway publishes as a ConfigChanged event.
//
// Loading fills defaults and then validates, reporting every problem with
// its location, so a bad file is fixed in one pass.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/internal/problems"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// EnvGatewayNode names the environment variable that overrides Config.Node.
const EnvGatewayNode = "SLUICE_GATEWAY_NODE"

// Config is the gateway configuration file (YAML).
type Config struct {
	// Node names this gateway; decisions are routed back by it.
	// EnvGatewayNode, when set, overrides it.
	Node string `yaml:"node"`
	// BodyLimitBytes caps request bodies (default 10 MiB).
	BodyLimitBytes int64 `yaml:"body_limit_bytes"`
	// LedgerTimeoutMs bounds the wait for the ledger's first answer before
	// failing closed (default 2000).
	LedgerTimeoutMs int64 `yaml:"ledger_timeout_ms"`
	// EmergencyCapPerSec admits this many requests per second locally when
	// the ledger is unavailable (default 0: fail closed).
	EmergencyCapPerSec int `yaml:"emergency_cap_per_sec"`
	// Degraded is the degraded mode: local admission within a share of the
	// last known capacity while no ledger answers (degraded.go). On by
	// default.
	Degraded Degraded `yaml:"degraded"`
	// UpstreamTimeoutMs bounds one upstream attempt, headers and body
	// (default 600000: long generations stream for minutes).
	UpstreamTimeoutMs int64 `yaml:"upstream_timeout_ms"`
	// Idempotency bounds the Idempotency-Key replay store.
	Idempotency Idempotency `yaml:"idempotency"`
	// ReloadIntervalMs is how often `sluice gateway` polls its config file
	// for changes (default 5000; SIGHUP reloads at once).
	ReloadIntervalMs int64 `yaml:"reload_interval_ms"`
	// LateGrantMs bounds how long after the ledger decided (its log time)
	// a grant may reach this gateway and still be dispatched; a later one
	// is released and reserved again (or refused) instead of joining a
	// burst after a stall. 0 = per class: the class's max_wait_ms, at least
	// LateGrantMinMs and at most LateGrantDefaultMaxMs.
	LateGrantMs int64 `yaml:"late_grant_ms"`
	// LateGrantClassMs overrides LateGrantMs for the classes it names.
	LateGrantClassMs map[string]int64 `yaml:"late_grant_class_ms"`

	Providers []Provider `yaml:"providers"`
	Routes    []Route    `yaml:"routes"`
	Tenants   []Tenant   `yaml:"tenants"`
	// Ledger is the ledger's quota document (ledger.Config), published as a
	// ConfigChanged event to every partition.
	Ledger yaml.Node `yaml:"ledger"`

	raw        []byte // the file as read, for WithAdmission
	ledger     ledger.Config
	ledgerJSON []byte
	scopeParts map[string]int // provider scope → sub-scopes, for a split one (LedgerScope)
	classes    map[string]bool
	deadlines  map[string]ClassDeadline // class → its deadline default and cap
	lateMs     map[string]int64         // class → late-grant bound
	keys       map[string]*Identity     // sha256 hex → identity
	routes     map[string]*Route
	providers  map[string]*Provider
}

// Provider is one upstream provider deployment and the quota scope it
// belongs to.
type Provider struct {
	Name  string               `yaml:"name"`
	Kind  schemas.ProviderKind `yaml:"kind"`  // openai, azure, anthropic, gemini, openai_compatible
	Scope string               `yaml:"scope"` // provider scope: the ledger partition key
	// BaseURL up to and including the API version prefix, e.g.
	// https://api.openai.com/v1.
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable holding the credential; the
	// credential itself never appears in config, events, logs or errors.
	APIKeyEnv string `yaml:"api_key_env"`
	// APIVersion is Azure's api-version query parameter (required there)
	// or Anthropic's anthropic-version header (default 2023-06-01): the
	// adapter of each kind says which (KindFields).
	APIVersion string `yaml:"api_version,omitempty"`
	Deployment string `yaml:"deployment,omitempty"` // Azure deployment name

	apiKey string
	bearer string // "Bearer " + apiKey, built once with it
}

// APIKey returns the provider credential read from the environment.
func (p *Provider) APIKey() string { return p.apiKey }

// BearerAuth is the OpenAI-style Authorization value of the credential
// ("Bearer " + APIKey(), "" without one), built when the key is read so
// that a request does not build it again.
func (p *Provider) BearerAuth() string { return p.bearer }

// Route maps a public model name to ordered upstream candidates. The first
// candidate is the primary; the others are fallbacks, used only when the
// ledger allows a fallback and only if they keep the route's Contract.
//
// The short form (provider, upstream_model, profile) is one candidate.
type Route struct {
	Model         string `yaml:"model"`
	Provider      string `yaml:"provider"`
	UpstreamModel string `yaml:"upstream_model"`
	Profile       string `yaml:"profile"` // model profile level of the bucket path
	// DefaultMaxOutputTokens is reserved when the request does not say
	// (default 4096).
	DefaultMaxOutputTokens int64 `yaml:"default_max_output_tokens"`
	// P95OutputTokens is the route's observed p95 output (from the
	// calibration report); 0 = unknown. It caps the output reservation.
	P95OutputTokens int64 `yaml:"p95_output_tokens"`
	// InputCorrection multiplies the route's input-token estimates (from
	// the calibration report, bounded there to ±10 % per report); 0 = none.
	// Allowed: 0.5 to 2, the bounds of a calibration patch.
	InputCorrection float64 `yaml:"input_correction"`
	// LearnOutput lets the gateway cap this route's output reservation by
	// the p95 of output it learned from the live stream, while
	// P95OutputTokens is unset (admission/estimate README, "Online
	// learning"). Off by default: lowering the output reservation is only
	// safe where the provider's buckets count actual output; a provider
	// that charges max_tokens on arrival (OpenAI and Azure TPM) sees more
	// than the ledger then reserves.
	LearnOutput bool `yaml:"learn_output"`
	// Contract is what every candidate of the route must keep.
	Contract Contract `yaml:"contract"`
	// Candidates replaces the short form with an ordered list.
	Candidates []Candidate `yaml:"candidates"`
}

// Contract is the route policy a fallback must preserve (DESIGN.md §1:
// fallback only to routes that keep context length, tools, structured
// output, residency and cost). Zero values impose nothing.
type Contract struct {
	MinContextTokens int64    `yaml:"min_context_tokens"`
	Tools            bool     `yaml:"tools"`
	StructuredOutput bool     `yaml:"structured_output"`
	Residency        []string `yaml:"residency"` // allowed regions; empty = any
	// Cost ceilings in USD per million tokens; 0 = no ceiling.
	MaxInputCostPerMTok  float64 `yaml:"max_input_cost_per_mtok"`
	MaxOutputCostPerMTok float64 `yaml:"max_output_cost_per_mtok"`
}

// Candidate is one upstream a route may send to, with what it offers.
type Candidate struct {
	Provider      string `yaml:"provider"`
	UpstreamModel string `yaml:"upstream_model"` // default: the route's model
	Profile       string `yaml:"profile"`        // default: the route's profile
	// ContextTokens is the model's context window (0 = unknown: never
	// chosen as a fallback for a request that must fit a window).
	ContextTokens    int64  `yaml:"context_tokens"`
	Tools            bool   `yaml:"tools"`
	StructuredOutput bool   `yaml:"structured_output"`
	Residency        string `yaml:"residency"`
	// Prices in USD per million tokens; they give the spend estimate.
	InputCostPerMTok  float64 `yaml:"input_cost_per_mtok"`
	OutputCostPerMTok float64 `yaml:"output_cost_per_mtok"`
}

// SpendMicros is the cost of in input and out output tokens in micro-USD
// (USD per million tokens = micro-USD per token).
func (c *Candidate) SpendMicros(in, out int64) int64 {
	return int64(math.Ceil(float64(in)*c.InputCostPerMTok + float64(out)*c.OutputCostPerMTok))
}

// Idempotency bounds the in-memory Idempotency-Key store of one gateway
// node. Zero values take the defaults.
type Idempotency struct {
	WindowMs   int64 `yaml:"window_ms"`   // how long a key is remembered (default 600000)
	EntriesMax int   `yaml:"entries_max"` // keys remembered at once (default 10000)
	// BodyBytesMax is the largest response stored for replay (default
	// 1 MiB); a larger response is remembered without its body, and a
	// repeat gets 409.
	BodyBytesMax int `yaml:"body_bytes_max"`
}

// Tenant is a customer of the gateway with its keys.
type Tenant struct {
	ID     string `yaml:"id"`
	Org    string `yaml:"org"`
	Paused bool   `yaml:"paused"`
	// Entitlement bounds what every key of the tenant may ask for.
	Entitlement `yaml:",inline"`
	// Teams holds the entitlements of the tenant's teams (a key's team
	// need not be listed: an unlisted team adds no bound).
	Teams []Team `yaml:"teams"`
	Keys  []Key  `yaml:"keys"`
	// Partner and PartnerEntitlement come from the admin state (a file
	// has no partners): a partner's sub-tenants are bound by the partner's
	// entitlement too, so a partner grants only what it holds.
	Partner            string      `yaml:"-"`
	PartnerEntitlement Entitlement `yaml:"-"`
}

// Entitlement is what a tenant, team or key may ask for: the traffic
// classes it may use (X-Sluice-Class), its highest priority
// (X-Sluice-Priority) and the public models it may call. Zero values bound
// nothing. A request must keep the entitlements of its tenant, its team
// and its key (all three), or it is refused with 403 naming the one it
// broke: a header may choose within the entitlement, never beyond it (a
// batch key cannot promote itself to interactive at priority 100).
type Entitlement struct {
	AllowedClasses []string `yaml:"allowed_classes,omitempty" json:"allowed_classes,omitempty"`
	// MaxPriority caps the priority (nil: 100, the highest).
	MaxPriority   *int32   `yaml:"max_priority,omitempty" json:"max_priority,omitempty"`
	AllowedModels []string `yaml:"allowed_models,omitempty" json:"allowed_models,omitempty"`
}

// Team is the entitlement of one team of a tenant.
type Team struct {
	ID          string `yaml:"id"`
	Entitlement `yaml:",inline"`
}

// Holder is one level's entitlement with the level that holds it, so a
// refusal can name it ("key batch-key", "team web", "tenant acme").
type Holder struct {
	Level, ID string
	Entitlement
}

// Name is "level id", as refusals name the holder.
func (h Holder) Name() string { return h.Level + " " + h.ID }

// Key is one API key, known only by its SHA-256 hash.
type Key struct {
	ID     string `yaml:"id"`
	SHA256 string `yaml:"sha256"`
	Team   string `yaml:"team"`
	App    string `yaml:"app"`
	Class  string `yaml:"class"` // default traffic class
	// Priority is the default X-Sluice-Priority (-100…100, higher first).
	Priority int32 `yaml:"priority"`
	// DeadlineMs is the deadline of a request whose client declared none
	// (no X-Sluice-Deadline-Ms, no SDK read timeout); 0: the class's.
	DeadlineMs int64 `yaml:"deadline_ms"`
	// MaxDeadlineMs caps every deadline of this key's requests, declared or
	// default (0: the class's max_deadline_ms).
	MaxDeadlineMs int64 `yaml:"max_deadline_ms"`
	// FallbackAllowed lets this key's requests go to fallback candidates
	// (default true; X-Sluice-Fallback: false turns it off per request).
	FallbackAllowed *bool `yaml:"fallback_allowed"`
	Disabled        bool  `yaml:"disabled"`
	Paused          bool  `yaml:"paused"`
	// Entitlement bounds what this key may ask for (within its team's and
	// tenant's).
	Entitlement `yaml:",inline"`
	// ExpiresAt (RFC 3339) ends the key: from then on it is refused as
	// OpenAI refuses a revoked key (401 invalid_api_key). Empty: never.
	ExpiresAt string `yaml:"expires_at,omitempty"`
}

// Identity is what an API key resolves to.
type Identity struct {
	Org, Tenant, Team, App, KeyID, Class string
	Priority                             int32
	DeadlineMs, MaxDeadlineMs            int64
	Disabled, Paused, TenantPaused       bool
	FallbackAllowed                      bool
	// Entitlements are the partner's (admin state only), the tenant's, the
	// team's and the key's, in that order, each only when it bounds
	// something.
	Entitlements []Holder
	// ExpiresAtMs is the key's expiry in unix ms (0: never).
	ExpiresAtMs int64
}

// HashKey returns the hex SHA-256 of an API key, the only form in which keys
// are stored.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// LoadFile reads and validates a config file. A bad file's error (a
// *ValidationError) lists every problem at its file:line:column.
func LoadFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return load(data, path)
}

// Load parses YAML, fills defaults and validates.
func Load(r io.Reader) (*Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return load(data, "")
}

// load decodes data (named file in messages, if any), fills defaults and
// validates, reporting every problem in one list.
func load(data []byte, file string) (*Config, error) {
	p := &problems.List{Subject: "config", File: file}
	if file != "" {
		p.Subject = "config " + file
	}
	var c Config
	if root := p.DecodeYAML(data, &c); root == nil {
		return nil, p.Err() // a syntax error: nothing further is meaningful
	}
	c.finish(os.Getenv, p)
	c.checkLedgerRefs(p)
	if err := p.Err(); err != nil {
		return nil, err
	}
	c.raw = data
	return &c, nil
}

// ValidationError lists every problem found, each at its path and, for a
// file, its line and column (see internal/problems).
type ValidationError = problems.List

// finish fills defaults, resolves references and validates, adding every
// problem to p. A value that failed to decode is marked failed in p, and
// what follows from it is not reported again.
func (c *Config) finish(getenv func(string) string, p *problems.List) {
	c.finishSettings(getenv, p.Add)
	c.finishProviders(getenv, p.Add)
	c.finishRoutes(p)
	keyClasses := c.finishTenants(p.Add)
	c.finishLedger(p, keyClasses)
}

// finishSettings fills and checks the gateway's own settings.
func (c *Config) finishSettings(getenv func(string) string, add func(string, string, ...any)) {
	// SLUICE_GATEWAY_NODE overrides the file's node: the replicas of one
	// Deployment share one config file but each needs its own id (its pod
	// name), and a reload must keep it.
	if v := strings.TrimSpace(getenv(EnvGatewayNode)); v != "" {
		c.Node = v
	}
	if c.Node == "" {
		c.Node = "gw-1"
	}
	id := &c.Idempotency
	// Defaults of the settings left 0, then each setting's check, in the
	// order problems are reported.
	for _, d := range []struct {
		v   *int64
		def int64
	}{
		{&c.BodyLimitBytes, 10 << 20}, {&c.LedgerTimeoutMs, 2000}, {&c.UpstreamTimeoutMs, 600_000},
		{&c.ReloadIntervalMs, 5000}, {&id.WindowMs, 600_000},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if id.EntriesMax == 0 {
		id.EntriesMax = 10_000
	}
	if id.BodyBytesMax == 0 {
		id.BodyBytesMax = 1 << 20
	}
	for _, k := range []struct {
		path string
		bad  bool
		msg  string
	}{
		{"body_limit_bytes", c.BodyLimitBytes < 1024, fmt.Sprintf("%d is below the 1024-byte minimum", c.BodyLimitBytes)},
		{"ledger_timeout_ms", c.LedgerTimeoutMs < 0, "must be positive"},
		{"upstream_timeout_ms", c.UpstreamTimeoutMs < 0, "must be positive"},
		{"reload_interval_ms", c.ReloadIntervalMs < 100, fmt.Sprintf("%d is below the 100 ms minimum", c.ReloadIntervalMs)},
		{"late_grant_ms", c.LateGrantMs < 0 || c.LateGrantMs > LateGrantMaxMs, fmt.Sprintf("%d out of [0, %d] (0: per class)", c.LateGrantMs, int64(LateGrantMaxMs))},
		{"idempotency.window_ms", id.WindowMs < 0 || id.WindowMs > 7*24*3_600_000, fmt.Sprintf("%d out of [1, 604800000]", id.WindowMs)},
		{"idempotency.entries_max", id.EntriesMax < 0 || id.EntriesMax > 10_000_000, fmt.Sprintf("%d out of [1, 10000000]", id.EntriesMax)},
		{"idempotency.body_bytes_max", id.BodyBytesMax < 0 || id.BodyBytesMax > 64<<20, fmt.Sprintf("%d out of [1, 67108864]", id.BodyBytesMax)},
	} {
		if k.bad {
			add(k.path, "%s", k.msg)
		}
	}
}

// finishProviders checks the providers and reads their credentials.
func (c *Config) finishProviders(getenv func(string) string, add func(string, string, ...any)) {
	c.providers = map[string]*Provider{}
	for i := range c.Providers {
		p := &c.Providers[i]
		at := fmt.Sprintf("providers[%d]", i)
		if p.Name == "" {
			add(at+".name", "required")
		} else if c.providers[p.Name] != nil {
			add(at+".name", "duplicate provider %q", p.Name)
		}
		c.providers[p.Name] = p
		if !slices.Contains(schemas.ProviderKinds, p.Kind) {
			add(at+".kind", "%q is not one of %s%s", p.Kind, strings.Join(kindNames(), ", "), problems.Hint(string(p.Kind), kindNames()))
		}
		if p.Scope == "" {
			add(at+".scope", "required (the provider quota scope, e.g. openai:org-x/proj-y)")
		}
		if !strings.HasPrefix(p.BaseURL, "http://") && !strings.HasPrefix(p.BaseURL, "https://") {
			add(at+".base_url", "%q must start with http:// or https://", p.BaseURL)
		}
		if _, ok := kindFieldsOf[p.Kind]; slices.Contains(schemas.ProviderKinds, p.Kind) && !ok {
			// Without the adapters no kind's fields would be checked.
			add(at+".kind", "no adapter of kind %s is linked into this program: it registers the fields a kind needs (config.RegisterKind); import _ \"github.com/sluice-dev/sluice/admission/provider\"", p.Kind)
		}
		kindFields(p, at, add)
		if p.APIKeyEnv != "" {
			p.apiKey = getenv(p.APIKeyEnv)
			if p.apiKey != "" {
				p.bearer = "Bearer " + p.apiKey
			}
			if p.apiKey == "" {
				add(at+".api_key_env", "environment variable %s is empty or unset", p.APIKeyEnv)
			}
		}
	}
}

// finishRoutes resolves every route to its candidates and checks them
// against the providers and the route's contract.
func (c *Config) finishRoutes(p *problems.List) {
	add := p.Add
	// A route naming a provider whose own name is broken is a consequence.
	providersSound := !p.Failed("providers")
	for i := range c.Providers {
		providersSound = providersSound && !p.Has(problems.Index("providers", i)+".name")
	}
	c.routes = map[string]*Route{}
	for i := range c.Routes {
		r := &c.Routes[i]
		at := fmt.Sprintf("routes[%d]", i)
		if r.Model == "" {
			add(at+".model", "required")
		} else if c.routes[r.Model] != nil {
			add(at+".model", "duplicate route for %q", r.Model)
		}
		c.routes[r.Model] = r
		if r.Profile == "" {
			r.Profile = r.Model
		}
		switch {
		case r.Provider != "" && len(r.Candidates) > 0:
			add(at, "give either provider (one candidate) or candidates, not both")
		case r.Provider == "" && len(r.Candidates) == 0:
			add(at+".provider", "required (or a candidates list)")
		case r.Provider != "":
			r.Candidates = []Candidate{{Provider: r.Provider, UpstreamModel: r.UpstreamModel, Profile: r.Profile}}
		}
		if r.DefaultMaxOutputTokens == 0 {
			r.DefaultMaxOutputTokens = 4096
		}
		if r.DefaultMaxOutputTokens < 0 {
			add(at+".default_max_output_tokens", "must be positive")
		}
		if r.P95OutputTokens < 0 {
			add(at+".p95_output_tokens", "must not be negative")
		}
		if f := r.InputCorrection; f != 0 && !(f >= estimate.InputCorrectionMin && f <= estimate.InputCorrectionMax) {
			add(at+".input_correction", "%v is outside [%v, %v] (0 = none)", f, estimate.InputCorrectionMin, estimate.InputCorrectionMax)
		}
		ct := &r.Contract
		if ct.MinContextTokens < 0 || ct.MaxInputCostPerMTok < 0 || ct.MaxOutputCostPerMTok < 0 {
			add(at+".contract", "limits must not be negative")
		}
		for j := range r.Candidates {
			cd := &r.Candidates[j]
			cat := fmt.Sprintf("%s.candidates[%d]", at, j)
			if r.Provider != "" {
				cat = at // the short form: report at the route itself
			}
			if cd.UpstreamModel == "" {
				cd.UpstreamModel = r.Model
			}
			if cd.Profile == "" {
				cd.Profile = r.Profile
			}
			if c.providers[cd.Provider] == nil && providersSound {
				add(cat+".provider", "unknown provider %q%s", cd.Provider, problems.DidYouMean(cd.Provider, slices.Sorted(maps.Keys(c.providers))))
			}
			if cd.ContextTokens < 0 || cd.InputCostPerMTok < 0 || cd.OutputCostPerMTok < 0 {
				add(cat, "context_tokens and costs must not be negative")
			}
			for _, why := range ct.Violations(cd) {
				add(cat, "breaks the route contract: %s", why)
			}
		}
		if len(r.Candidates) > 0 {
			r.Provider, r.UpstreamModel = r.Candidates[0].Provider, r.Candidates[0].UpstreamModel
		}
	}
}

// finishTenants checks the tenants, teams and keys and builds the key
// index; the keys' classes wait for the ledger document (finishLedger).
func (c *Config) finishTenants(add func(string, string, ...any)) []keyClass {
	c.keys = map[string]*Identity{}
	var keyClasses []keyClass
	tenants := map[string]bool{}
	for i := range c.Tenants {
		t := &c.Tenants[i]
		at := fmt.Sprintf("tenants[%d]", i)
		if t.ID == "" {
			add(at+".id", "required")
		} else if tenants[t.ID] {
			add(at+".id", "duplicate tenant %q", t.ID)
		}
		tenants[t.ID] = true
		checkEntitlement(add, at, &t.Entitlement)
		teams := map[string]*Team{}
		for j := range t.Teams {
			tm := &t.Teams[j]
			tat := fmt.Sprintf("%s.teams[%d]", at, j)
			if tm.ID == "" {
				add(tat+".id", "required")
			} else if teams[tm.ID] != nil {
				add(tat+".id", "duplicate team %q", tm.ID)
			}
			teams[tm.ID] = tm
			checkEntitlement(add, tat, &tm.Entitlement)
		}
		for j := range t.Keys {
			k := &t.Keys[j]
			kat := fmt.Sprintf("%s.keys[%d]", at, j)
			c.finishKey(add, t, teams, k, kat)
			keyClasses = append(keyClasses, keyClass{kat, k})
		}
	}
	return keyClasses
}

// finishKey checks one key of tenant t and indexes its identity.
func (c *Config) finishKey(add func(string, string, ...any), t *Tenant, teams map[string]*Team, k *Key, kat string) {
	if k.ID == "" {
		add(kat+".id", "required")
	}
	k.SHA256 = strings.ToLower(k.SHA256)
	if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != sha256.Size {
		add(kat+".sha256", "must be 64 hex characters (the SHA-256 of the key; `sluice keys hash` prints it)")
	} else if c.keys[k.SHA256] != nil {
		add(kat+".sha256", "the same key is configured twice")
	}
	if k.Priority < -100 || k.Priority > 100 {
		add(kat+".priority", "%d out of [-100, 100]", k.Priority)
	}
	if k.DeadlineMs < 0 || k.DeadlineMs > DeadlineMsMax {
		add(kat+".deadline_ms", "%d out of [0, %d]", k.DeadlineMs, DeadlineMsMax)
	}
	if k.MaxDeadlineMs < 0 || k.MaxDeadlineMs > DeadlineMsMax {
		add(kat+".max_deadline_ms", "%d out of [0, %d]", k.MaxDeadlineMs, DeadlineMsMax)
	} else if k.MaxDeadlineMs > 0 && k.DeadlineMs > k.MaxDeadlineMs {
		add(kat+".deadline_ms", "%d is longer than the key's max_deadline_ms %d", k.DeadlineMs, k.MaxDeadlineMs)
	}
	fb := k.FallbackAllowed == nil || *k.FallbackAllowed
	checkEntitlement(add, kat, &k.Entitlement)
	var expMs int64
	if k.ExpiresAt != "" {
		if at, err := time.Parse(time.RFC3339, k.ExpiresAt); err != nil {
			add(kat+".expires_at", "%q is not an RFC 3339 time (e.g. 2027-01-31T00:00:00Z)", k.ExpiresAt)
		} else {
			expMs = at.UnixMilli()
		}
	}
	var ents []Holder
	for _, h := range []Holder{{"partner", t.Partner, t.PartnerEntitlement}, {"tenant", t.ID, t.Entitlement}, {"team", k.Team, teamEntitlement(teams, k.Team)}, {"key", k.ID, k.Entitlement}} {
		if h.Bounds() {
			ents = append(ents, h)
		}
	}
	for _, h := range ents {
		if h.MaxPriority != nil && k.Priority > *h.MaxPriority && k.Priority <= 100 && *h.MaxPriority >= -100 { // else reported above
			add(kat+".priority", "%d is above max_priority %d of %s", k.Priority, *h.MaxPriority, h.Name())
		}
	}
	c.keys[k.SHA256] = &Identity{Org: t.Org, Tenant: t.ID, Team: k.Team, App: k.App, KeyID: k.ID, Class: k.Class,
		Priority: k.Priority, DeadlineMs: k.DeadlineMs, MaxDeadlineMs: k.MaxDeadlineMs, FallbackAllowed: fb,
		Disabled: k.Disabled, Paused: k.Paused, TenantPaused: t.Paused, Entitlements: ents, ExpiresAtMs: expMs}

}

// finishLedger decodes and validates the ledger document in place (its
// problems at their lines in this file), then checks what names its
// classes.
func (c *Config) finishLedger(p *problems.List, keyClasses []keyClass) {
	add := p.Add
	if c.Ledger.Kind == 0 {
		add("ledger", "required (the quota document; see deploy/examples/sluice.yaml)")
		return
	}
	var lc ledger.Config
	p.DecodeJSONNode(&c.Ledger, "ledger", &lc)
	p.Merge("ledger", lc.Finish())
	var err error
	if c.ledgerJSON, err = json.Marshal(lc); err != nil {
		add("ledger", "%v", err)
	}
	c.scopeParts = map[string]int{}
	for _, s := range lc.Scopes {
		if name, _, split := strings.Cut(s.Name, ledger.SplitSep); split {
			c.scopeParts[name] = lc.ScopePartitions(name)
		}
	}
	c.classes = map[string]bool{}
	c.lateMs = map[string]int64{}
	c.deadlines = map[string]ClassDeadline{}
	for i, cl := range lc.Classes {
		c.classes[cl.Name] = true
		c.lateMs[cl.Name] = lateGrantDefault(c.LateGrantMs, cl.MaxWaitMs)
		c.deadlines[cl.Name] = ClassDeadline{DefaultMs: cl.DeadlineMs, MaxMs: cl.MaxDeadlineMs}
		for _, prob := range classDeadlineProblems(cl) {
			field, msg, _ := strings.Cut(prob, ": ")
			add(fmt.Sprintf("ledger.classes[%d].%s", i, field), "%s", msg)
		}
	}
	// References to classes are checked only against a class list that is
	// itself sound: a key naming a class that failed to decode is a
	// consequence, not a problem of the key.
	if classNamesSound(p, len(lc.Classes)) {
		c.checkClassRefs(add, lc.DefaultClass, keyClasses)
		if len(p.Problems) == 0 {
			c.publishEntitlements(&lc, add)
		}
	}
	c.Degraded.finish(c.classes, add)
	c.ledger = lc
}

// checkClassRefs checks what names a class of the ledger document: the
// late-grant overrides, every key's class (a key without one takes the
// default class) and every entitlement.
func (c *Config) checkClassRefs(add func(string, string, ...any), defaultClass string, keyClasses []keyClass) {
	for _, name := range slices.Sorted(maps.Keys(c.LateGrantClassMs)) {
		v := c.LateGrantClassMs[name]
		if !c.classes[name] {
			add("late_grant_class_ms."+name, "not a class of the ledger document (%s)", strings.Join(c.ClassNames(), ", "))
		} else if v < 1 || v > LateGrantMaxMs {
			add("late_grant_class_ms."+name, "%d out of [1, %d]", v, int64(LateGrantMaxMs))
		} else {
			c.lateMs[name] = v
		}
	}
	for _, kc := range keyClasses {
		if kc.k.Class == "" {
			kc.k.Class = defaultClass
			c.keys[kc.k.SHA256].Class = defaultClass
		} else if !c.classes[kc.k.Class] {
			add(kc.at+".class", "%q is not a class of the ledger document%s", kc.k.Class, problems.DidYouMean(kc.k.Class, c.ClassNames()))
			continue
		}
		// Its class must be one it is entitled to (an entitlement naming
		// an unknown class is reported once, by checkEntitledNames, not as
		// a consequence here).
		for _, h := range c.keys[kc.k.SHA256].Entitlements {
			known := !slices.ContainsFunc(h.AllowedClasses, func(cl string) bool { return !c.classes[cl] })
			if known && len(h.AllowedClasses) > 0 && !slices.Contains(h.AllowedClasses, kc.k.Class) {
				add(kc.at+".class", "%q is not in allowed_classes %v of %s (set the key's class)", kc.k.Class, h.AllowedClasses, h.Name())
			}
		}
	}
	c.checkEntitledNames(add)
}

// classNamesSound reports whether the ledger's class names can be
// trusted to check references against: none failed to decode, is empty or
// duplicate, and the default class is one of them. A class with a bad
// max_wait_ms still names itself.
func classNamesSound(p *problems.List, n int) bool {
	if p.Failed("ledger.classes") || p.Has("ledger.default_class") {
		return false
	}
	for i := range n {
		if p.Has(problems.Index("ledger.classes", i) + ".name") {
			return false
		}
	}
	return true
}

// KindFields are the provider fields that the adapter of a kind reads
// beyond every kind's (admission/provider registers them with each
// adapter, RegisterKind), so that a provider kind is added without an
// edit here.
type KindFields struct {
	APIVersion        bool   // api_version is required
	Deployment        bool   // deployment is required
	DefaultAPIVersion string // api_version when none is given
}

// kindFieldsOf holds every registered kind's fields; a kind not in it
// reads none (a zero KindFields).
var kindFieldsOf = map[schemas.ProviderKind]KindFields{}

// RegisterKind records the fields the adapter of kind reads. It is called
// from the adapters' init, before any Load; Load refuses a provider of a
// kind that none registered (a program without admission/provider linked
// in would otherwise check no kind's fields).
func RegisterKind(kind schemas.ProviderKind, f KindFields) { kindFieldsOf[kind] = f }

// kindFields fills p's defaults of its kind and adds a problem, at the
// field's place, for each field its kind requires that p lacks, naming
// the kinds that require it.
func kindFields(p *Provider, at string, add func(string, string, ...any)) {
	f := kindFieldsOf[p.Kind]
	if p.APIVersion == "" {
		p.APIVersion = f.DefaultAPIVersion
	}
	if f.APIVersion && p.APIVersion == "" {
		add(at+".api_version", "required for kind %s (the kinds that need one: %s)", p.Kind, kindsWith(func(f KindFields) bool { return f.APIVersion }))
	}
	if f.Deployment && p.Deployment == "" {
		add(at+".deployment", "required for kind %s (the kinds that need one: %s)", p.Kind, kindsWith(func(f KindFields) bool { return f.Deployment }))
	}
}

// kindsWith names the registered kinds whose fields have, in the order
// of schemas.ProviderKinds.
func kindsWith(has func(KindFields) bool) string {
	var out []string
	for _, k := range schemas.ProviderKinds {
		if has(kindFieldsOf[k]) {
			out = append(out, string(k))
		}
	}
	return strings.Join(out, ", ")
}

func kindNames() []string {
	out := make([]string, len(schemas.ProviderKinds))
	for i, k := range schemas.ProviderKinds {
		out[i] = string(k)
	}
	return out
}

// keyClass is a key and its path, kept until the ledger's classes are
// known.
type keyClass struct {
	at string
	k  *Key
}

// checkLedgerRefs checks that every scope, bucket and fair-share weight of
// the ledger document names a provider scope or an id this file has: a bucket for tenant "agentz"
// limits no request, and tenant "agents" would run without the limit meant
// for it. "*" (every id) and the scope level are not references.
//
// Only a file is checked: the admin API (services/admin) creates a
// partner's org bucket before its first sub-tenant and teams before their
// keys, and checks its own references as it makes each change.
func (c *Config) checkLedgerRefs(p *problems.List) {
	known, unsound := c.refNames(p)
	what := map[string]string{ledger.LevelOrg: "org of a tenant", ledger.LevelTenant: "tenant", ledger.LevelTeam: "team",
		ledger.LevelKey: "key", ledger.LevelProfile: "route profile", ledger.LevelDeployment: "provider (deployment)"}
	check := func(at, level, id string) {
		if id == "*" || id == "" || what[level] == "" && level != levelScopeName || unsound[level] || known[level][id] {
			return
		}
		hint := problems.DidYouMean(id, slices.Sorted(maps.Keys(known[level])))
		if level == levelScopeName {
			p.Add(at, "%q is not the scope of any provider, so its limits would apply to no request%s", id, hint)
			return
		}
		p.Add(at, "%q is not a %s of this config, so the limit would apply to no request%s", id, what[level], hint)
	}
	for si, s := range c.ledger.Scopes {
		sat := problems.Index("ledger.scopes", si)
		// A split scope's sub-scopes ("<scope>#<i>", ledger/split.go) are
		// the provider's scope.
		name, _, _ := strings.Cut(s.Name, ledger.SplitSep)
		check(sat+".name", levelScopeName, name)
		for ti, t := range s.Tenants {
			check(fmt.Sprintf("%s.tenants[%d].id", sat, ti), ledger.LevelTenant, t.ID)
		}
		for bi, b := range s.Buckets {
			check(fmt.Sprintf("%s.buckets[%d].id", sat, bi), b.Level, b.ID)
		}
	}
}

// levelScopeName stands for the provider scopes among the levels whose
// names the ledger document refers to.
const levelScopeName = "scope name"

// refNames collects, per level, the ids this file defines (org, tenant,
// team, key, route profile, deployment = provider name, and the providers'
// scopes). A level whose defining names have a problem of their own is
// unsound: a reference to it is not checked, since a failed tenant id is
// one problem, not one more for every bucket of that tenant.
func (c *Config) refNames(p *problems.List) (known map[string]map[string]bool, unsound map[string]bool) {
	known, unsound = map[string]map[string]bool{}, map[string]bool{}
	put := func(level, id, at string) {
		if p.Has(at) {
			unsound[level] = true
		}
		if id == "" {
			return
		}
		if known[level] == nil {
			known[level] = map[string]bool{}
		}
		known[level][id] = true
	}
	for i, t := range c.Tenants {
		at := problems.Index("tenants", i)
		put(ledger.LevelOrg, t.Org, at+".org")
		put(ledger.LevelTenant, t.ID, at+".id")
		for j, tm := range t.Teams {
			put(ledger.LevelTeam, tm.ID, fmt.Sprintf("%s.teams[%d].id", at, j))
		}
		for j, k := range t.Keys {
			put(ledger.LevelTeam, k.Team, fmt.Sprintf("%s.keys[%d].team", at, j))
			put(ledger.LevelKey, k.ID, fmt.Sprintf("%s.keys[%d].id", at, j))
		}
	}
	for i, r := range c.Routes {
		at := problems.Index("routes", i)
		put(ledger.LevelProfile, r.Profile, at+".profile")
		for j, cd := range r.Candidates {
			put(ledger.LevelProfile, cd.Profile, fmt.Sprintf("%s.candidates[%d].profile", at, j))
		}
	}
	for i, pr := range c.Providers {
		at := problems.Index("providers", i)
		put(ledger.LevelDeployment, pr.Name, at+".name")
		put(levelScopeName, pr.Scope, at+".scope")
	}
	for _, l := range []string{"tenants", "routes", "providers"} {
		if p.Failed(l) {
			for _, lv := range ledgerLevelsOf[l] {
				unsound[lv] = true
			}
		}
	}
	return known, unsound
}

// ledgerLevelsOf names the levels each list of the file defines.
var ledgerLevelsOf = map[string][]string{
	"tenants":   {ledger.LevelOrg, ledger.LevelTenant, ledger.LevelTeam, ledger.LevelKey},
	"routes":    {ledger.LevelProfile},
	"providers": {ledger.LevelDeployment, levelScopeName},
}

// Bounds reports whether the entitlement bounds anything.
func (e *Entitlement) Bounds() bool {
	return len(e.AllowedClasses) > 0 || e.MaxPriority != nil || len(e.AllowedModels) > 0
}

// Exceeds says how inner grants more than outer allows ("" when it does
// not): a class, a priority above, or a model outside outer's bounds. An
// absent bound of inner grants nothing of its own (the outer bound still
// applies to every request), so it never exceeds.
func (outer *Entitlement) Exceeds(inner *Entitlement) string {
	for _, cl := range inner.AllowedClasses {
		if len(outer.AllowedClasses) > 0 && !slices.Contains(outer.AllowedClasses, cl) {
			return fmt.Sprintf("allowed_classes: %q is not among %v", cl, outer.AllowedClasses)
		}
	}
	if outer.MaxPriority != nil && inner.MaxPriority != nil && *inner.MaxPriority > *outer.MaxPriority {
		return fmt.Sprintf("max_priority: %d is above %d", *inner.MaxPriority, *outer.MaxPriority)
	}
	for _, m := range inner.AllowedModels {
		if len(outer.AllowedModels) > 0 && !slices.Contains(outer.AllowedModels, m) {
			return fmt.Sprintf("allowed_models: %q is not among %v", m, outer.AllowedModels)
		}
	}
	return ""
}

// checkEntitlement checks what an entitlement says on its own; its class
// and model names are checked against the ledger's classes and the routes
// once those are known (checkEntitledNames).
func checkEntitlement(add func(string, string, ...any), at string, e *Entitlement) {
	if p := e.MaxPriority; p != nil && (*p < -100 || *p > 100) {
		add(at+".max_priority", "%d out of [-100, 100]", *p)
	}
}

func teamEntitlement(teams map[string]*Team, id string) Entitlement {
	if t := teams[id]; t != nil && id != "" {
		return t.Entitlement
	}
	return Entitlement{}
}

// checkEntitledNames checks that every entitlement names classes of the
// ledger document and routed models.
func (c *Config) checkEntitledNames(add func(string, string, ...any)) {
	check := func(at string, e *Entitlement) {
		for _, cl := range e.AllowedClasses {
			if !c.classes[cl] {
				add(at+".allowed_classes", "%q is not a class of the ledger document (%s)", cl, strings.Join(c.ClassNames(), ", "))
			}
		}
		for _, m := range e.AllowedModels {
			if c.routes[m] == nil {
				add(at+".allowed_models", "%q is not a routed model (%s)", m, strings.Join(c.Models(), ", "))
			}
		}
	}
	partners := map[string]bool{}
	for i := range c.Tenants {
		t := &c.Tenants[i]
		at := fmt.Sprintf("tenants[%d]", i)
		check(at, &t.Entitlement)
		if t.Partner != "" && !partners[t.Partner] {
			partners[t.Partner] = true
			check("partner "+t.Partner, &t.PartnerEntitlement)
		}
		for j := range t.Teams {
			check(fmt.Sprintf("%s.teams[%d]", at, j), &t.Teams[j].Entitlement)
		}
		for j := range t.Keys {
			check(fmt.Sprintf("%s.keys[%d]", at, j), &t.Keys[j].Entitlement)
		}
	}
}

// Late-grant bounds (see Config.LateGrantMs). The default follows the
// class's max wait — a grant later than the request was willing to wait is
// stale — but at least LateGrantMinMs, the normal produce → decide →
// commit → deliver path, and at most LateGrantDefaultMaxMs, because after a
// stall the provider sees every grant released within that window as one
// burst.
//
// The bound is the jitter J between the ledger's log time and the wall time
// at which a grant reaches the provider. Grants that keep a token bucket of
// burst B and rate r in log time can arrive in wall time as a bucket of
// burst B + r×J, so a ledger window that mirrors the provider's exactly
// overruns it by r×J whenever delivery bunches (docs/gateway.md, "Late
// grants"; the loaded runs' provider 429s). The ledger's window must
// therefore be the provider's minus J, and J must stay well below the
// window: 500 ms, half of a 1 s window, where the default was 1 s — a whole
// window, which no ledger window could leave room for. Less room (250 ms)
// released more late grants under stalls than it saved
// (TestDispatchModelStallBurst's sweep, docs/gateway.md).
const (
	LateGrantMinMs        = 100
	LateGrantDefaultMaxMs = 500
	LateGrantMaxMs        = 60_000
)

func lateGrantDefault(global, classMaxWaitMs int64) int64 {
	if global > 0 {
		return global
	}
	return min(max(classMaxWaitMs, LateGrantMinMs), LateGrantDefaultMaxMs)
}

// LateGrantBoundMs is how long after the ledger's log time a grant of
// class may reach the gateway and still be dispatched.
func (c *Config) LateGrantBoundMs(class string) int64 {
	if v, ok := c.lateMs[class]; ok {
		return v
	}
	return lateGrantDefault(c.LateGrantMs, LateGrantDefaultMaxMs)
}

// DeadlineMsMax bounds deadlines from keys and X-Sluice-Deadline-Ms (24 h).
const DeadlineMsMax = 24 * 3_600_000

// ClassDeadline is a traffic class's deadline policy: DefaultMs for a
// request whose client and key declare none, MaxMs the cap of every
// deadline of the class. 0 means none.
type ClassDeadline struct{ DefaultMs, MaxMs int64 }

// ClassDeadline returns the deadline policy of class (zero if unknown).
func (c *Config) ClassDeadline(class string) ClassDeadline { return c.deadlines[class] }

// classDeadlineProblems checks a class's deadline_ms and max_deadline_ms
// against each other and against its max_wait_ms. A class that lets a
// request queue for longer than the deadline its clients have would grant
// work seconds before its client hangs up, and the provider would serve an
// answer nobody reads (issue 20: a batch max wait of 20 min behind 60 s
// client timeouts cancelled 24 % of upstream calls in flight).
func classDeadlineProblems(cl ledger.ClassConfig) []string {
	var out []string
	if cl.DeadlineMs < 0 || cl.DeadlineMs > DeadlineMsMax {
		out = append(out, fmt.Sprintf("deadline_ms: %d out of [0, %d]", cl.DeadlineMs, int64(DeadlineMsMax)))
	}
	if cl.MaxDeadlineMs < 0 || cl.MaxDeadlineMs > DeadlineMsMax {
		out = append(out, fmt.Sprintf("max_deadline_ms: %d out of [0, %d]", cl.MaxDeadlineMs, int64(DeadlineMsMax)))
	}
	if len(out) > 0 {
		return out
	}
	if cl.MaxDeadlineMs > 0 && cl.DeadlineMs > cl.MaxDeadlineMs {
		out = append(out, fmt.Sprintf("deadline_ms: %d is longer than the class's max_deadline_ms %d", cl.DeadlineMs, cl.MaxDeadlineMs))
	}
	for _, d := range []struct {
		name string
		ms   int64
	}{{"deadline_ms", cl.DeadlineMs}, {"max_deadline_ms", cl.MaxDeadlineMs}} {
		if d.ms > 0 && cl.MaxWaitMs > d.ms {
			out = append(out, fmt.Sprintf("max_wait_ms: %d is longer than the class's %s %d: a queued request would still wait after its client gave up (lower max_wait_ms or raise %s)", cl.MaxWaitMs, d.name, d.ms, d.name))
			break
		}
	}
	return out
}

// Violations lists how cd breaks the contract (nil when it keeps it).
func (ct *Contract) Violations(cd *Candidate) []string {
	var out []string
	if ct.MinContextTokens > 0 && cd.ContextTokens < ct.MinContextTokens {
		out = append(out, fmt.Sprintf("context_tokens %d below min_context_tokens %d", cd.ContextTokens, ct.MinContextTokens))
	}
	if ct.Tools && !cd.Tools {
		out = append(out, "tools required")
	}
	if ct.StructuredOutput && !cd.StructuredOutput {
		out = append(out, "structured_output required")
	}
	if len(ct.Residency) > 0 && !slices.Contains(ct.Residency, cd.Residency) {
		out = append(out, fmt.Sprintf("residency %q not in %v", cd.Residency, ct.Residency))
	}
	if ct.MaxInputCostPerMTok > 0 && cd.InputCostPerMTok > ct.MaxInputCostPerMTok {
		out = append(out, fmt.Sprintf("input cost %g above the ceiling %g", cd.InputCostPerMTok, ct.MaxInputCostPerMTok))
	}
	if ct.MaxOutputCostPerMTok > 0 && cd.OutputCostPerMTok > ct.MaxOutputCostPerMTok {
		out = append(out, fmt.Sprintf("output cost %g above the ceiling %g", cd.OutputCostPerMTok, ct.MaxOutputCostPerMTok))
	}
	return out
}

// HasClass reports whether name is a traffic class of the ledger document.
func (c *Config) HasClass(name string) bool { return c.classes[name] }

// ClassNames lists the traffic classes, sorted.
func (c *Config) ClassNames() []string {
	out := make([]string, 0, len(c.classes))
	for n := range c.classes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LedgerJSON is the validated ledger document, defaults filled, as JSON.
func (c *Config) LedgerJSON() []byte { return c.ledgerJSON }

// LedgerScope is the ledger scope that decides a request of key keyID on
// provider p: p.Scope, or, when the ledger document splits that scope
// over partitions (scopes[].partitions), the key's sub-scope
// (ledger.PartitionScope: a pure function of the key, so every gateway
// sends a key to the same one and its own limits stay whole there).
func (c *Config) LedgerScope(p *Provider, keyID string) string {
	return ledger.PartitionScope(p.Scope, c.scopeParts[p.Scope], keyID)
}

// LedgerScopes lists the ledger scopes that decide requests on provider
// scope scope: scope itself, or, when the ledger document splits it over
// partitions, its sub-scopes "<scope>#0" … in index order. The views of
// the system (readiness, usage) read the ledger through these names.
func (c *Config) LedgerScopes(scope string) []string {
	n := c.scopeParts[scope]
	if n <= 1 {
		return []string{scope}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = ledger.SubScope(scope, i)
	}
	return out
}

// Lookup returns the identity of a presented API key, or nil.
//
// It is HashKey's lookup with the hex digest in a stack array: a map index
// by string(bytes) does not build the string, so a request's lookup costs
// no allocation for it.
func (c *Config) Lookup(key string) *Identity {
	sum := sha256.Sum256([]byte(key))
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return c.keys[string(h[:])]
}

// Route returns the route of a public model name, or nil.
func (c *Config) Route(model string) *Route { return c.routes[model] }

// Provider returns a provider by name, or nil.
func (c *Config) Provider(name string) *Provider { return c.providers[name] }

// Models lists the public model names, sorted.
func (c *Config) Models() []string {
	out := make([]string, 0, len(c.routes))
	for m := range c.routes {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}
