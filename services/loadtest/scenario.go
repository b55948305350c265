// Package loadtest is `sluice loadtest`: open-loop scenario load tests
// against a Sluice gateway (or, with --embedded, a whole stack started in
// process on kfake with the provider simulator), and the same load straight
// against the simulator with a usual client retry policy (--baseline), so
// the report shows side by side what the governor changes: provider 429s,
// goodput against the binding provider limit, fairness, queue wait and
// deadlines.
//
// Scenarios are YAML files (deploy/scenarios/*.yaml); see README.md.
package loadtest

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/internal/problems"
	"github.com/sluice-dev/sluice/services/sim"
)

// Scenario is one load-test scenario file.
type Scenario struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Duration of the arrival window (Go duration string).
	Duration Duration `yaml:"duration"`
	// Seed of the arrival processes (default 1; --seed overrides).
	Seed uint64 `yaml:"seed"`
	// Model is the public model name requested (the gateway route and the
	// simulator scope). Default gpt-4o-mini.
	Model string `yaml:"model"`
	// Provider is the simulator's provider style serving the model. Only
	// "openai" while the gateway speaks the OpenAI API alone.
	Provider string `yaml:"provider"`
	// Sim is the simulator config (sim.ParseConfig format, decoded over
	// sim.DefaultConfig): provider limit overrides, storms, latency, output
	// spread.
	Sim yaml.Node `yaml:"sim"`
	// Sluice are the governor's limits, derived from the simulator's.
	Sluice SluiceLimits `yaml:"sluice"`
	// Classes sets deadlines and queue policy per traffic class.
	Classes map[string]ClassSpec `yaml:"classes"`
	Tenants []TenantSpec         `yaml:"tenants"`

	// Filled by Parse.
	SimConfig sim.Config `yaml:"-"`
	Source    string     `yaml:"-"`
}

// SluiceLimits are the limits Sluice enforces at the provider deployment.
// Zero fields are derived as Factor × the simulator's limit for the model.
type SluiceLimits struct {
	// Factor applied to the simulator's limits (default 0.9, at most 1).
	Factor float64 `yaml:"factor"`
	// RequestsPerMin, TokensPerMin (total), InputTokensPerMin,
	// OutputTokensPerMin, RequestsPerDay: explicit limits, each at most the
	// simulator's.
	RequestsPerMin     int64 `yaml:"requests_per_min"`
	TokensPerMin       int64 `yaml:"tokens_per_min"`
	InputTokensPerMin  int64 `yaml:"input_tokens_per_min"`
	OutputTokensPerMin int64 `yaml:"output_tokens_per_min"`
	RequestsPerDay     int64 `yaml:"requests_per_day"`
	// Window is the enforcement window of the per-minute buckets (default:
	// the simulator's window, else 1s).
	Window Duration `yaml:"window"`
	// Concurrency caps in-flight requests at the deployment (0 = none).
	Concurrency int64 `yaml:"concurrency"`
	// TenantRequestsPerDay is a per-tenant daily request quota (0 = none).
	TenantRequestsPerDay int64 `yaml:"tenant_requests_per_day"`
	// Ramp is a ramp governor at the deployment. Derived from the
	// simulator's acceleration limit when that is set and Ramp is absent.
	Ramp *RampSpec `yaml:"ramp"`
	// Disabled leaves the derived deployment buckets out (only per-tenant
	// quotas remain): to show what an unconfigured governor does.
	Disabled bool `yaml:"disabled"`
	// BorrowReserve is the number of requests that borrowed grants (a
	// tenant above its guaranteed share) leave in the deployment's requests
	// bucket: headroom for a burst of the other tenants' requests, which
	// otherwise meet a bucket that a flood keeps empty (ledger
	// borrow_reserve).
	BorrowReserve int64 `yaml:"borrow_reserve"`
}

// RampSpec is a ramp governor: Start requests per Period at first, growing
// by Step every Period.
type RampSpec struct {
	Period Duration `yaml:"period"`
	Start  int64    `yaml:"start"`
	Step   int64    `yaml:"step"`
}

// ClassSpec configures one traffic class.
type ClassSpec struct {
	// Deadline is the client-side deadline of each request of the class.
	Deadline Duration `yaml:"deadline"`
	// MaxWait is the ledger queue's max wait (the class deadline in Sluice).
	MaxWait Duration `yaml:"max_wait"`
	// MaxDepth bounds the class queue.
	MaxDepth int `yaml:"max_depth"`
	// AgeOffset ranks the class (0 = highest priority).
	AgeOffset *Duration `yaml:"age_offset"`
}

// TenantSpec is one tenant's offered load.
type TenantSpec struct {
	ID string `yaml:"id"`
	// Model is the model this tenant's traffic requests (default: the
	// scenario's model), so that one run drives several routes.
	Model string `yaml:"model"`
	// Tenant is the gateway config's tenant whose key the traffic uses
	// (with --config; default: ID), so that several traffic streams can
	// be one tenant's: one tenant budget over two routes.
	Tenant string `yaml:"tenant"`
	Weight int64  `yaml:"weight"`
	Class  string `yaml:"class"`
	// Rate is the mean arrival rate (requests per second) of a Poisson
	// process.
	Rate float64 `yaml:"rate"`
	// RampTo makes the rate grow linearly from Rate to RampTo over the
	// tenant's active interval.
	RampTo float64 `yaml:"ramp_to"`
	// Start and End bound the tenant's active interval (End 0 = duration).
	Start Duration `yaml:"start"`
	End   Duration `yaml:"end"`
	// Bursts add extra Poisson arrivals at Rate during [At, At+For).
	Bursts       []Burst `yaml:"bursts"`
	PromptTokens int64   `yaml:"prompt_tokens"`
	MaxTokens    int64   `yaml:"max_tokens"`
	Stream       bool    `yaml:"stream"`
	// CancelFraction of requests are cancelled by the client at a uniform
	// random time in [0, CancelAfter).
	CancelFraction float64  `yaml:"cancel_fraction"`
	CancelAfter    Duration `yaml:"cancel_after"`
	// Guaranteed is the share (0–1) of the deployment's requests limit the
	// tenant may always use; its grants above it are borrowed, and borrowed
	// grants yield to waiters within their share or of a higher class and
	// leave sluice.borrow_reserve (ledger guaranteed). 0: no baseline.
	Guaranteed float64 `yaml:"guaranteed"`
}

// Burst is extra load on top of a tenant's base rate.
type Burst struct {
	At   Duration `yaml:"at"`
	For  Duration `yaml:"for"`
	Rate float64  `yaml:"rate"`
}

// Duration is a time.Duration written as a Go duration string in YAML.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML accepts "1s"-style strings and 0.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: duration must be a string like \"1s\"", n.Line)}}
	}
	s := strings.TrimSpace(n.Value)
	if s == "" || s == "0" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: invalid duration %q (want e.g. \"30s\", \"250ms\")", n.Line, s)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Default classes: deadlines a caller would set, and the ledger queue policy.
func defaultClasses() map[string]ClassSpec {
	off := func(d time.Duration) *Duration { x := Duration(d); return &x }
	return map[string]ClassSpec{
		"interactive": {Deadline: Duration(2 * time.Second), MaxWait: Duration(300 * time.Millisecond), MaxDepth: 1000, AgeOffset: off(0)},
		"agent":       {Deadline: Duration(15 * time.Second), MaxWait: Duration(10 * time.Second), MaxDepth: 5000, AgeOffset: off(2 * time.Second)},
		"batch":       {Deadline: Duration(60 * time.Second), MaxWait: Duration(50 * time.Second), MaxDepth: 50000, AgeOffset: off(30 * time.Second)},
	}
}

// ProblemsError lists every problem of a scenario, each at its
// file:line:column and path: the one problems type of every config
// (internal/problems).
type ProblemsError = problems.List

var idRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// LoadScenario resolves NAME (deploy/scenarios/NAME.yaml, searched from the
// working directory upwards, or in dir when set) or a file path and parses it.
func LoadScenario(nameOrPath, dir string) (*Scenario, error) {
	p, err := resolveScenario(nameOrPath, dir)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return ParseScenario(b, p)
}

func resolveScenario(nameOrPath, dir string) (string, error) {
	if strings.ContainsAny(nameOrPath, `/\`) || strings.HasSuffix(nameOrPath, ".yaml") || strings.HasSuffix(nameOrPath, ".yml") {
		return nameOrPath, nil
	}
	if dir != "" {
		return filepath.Join(dir, nameOrPath+".yaml"), nil
	}
	if d := os.Getenv("SLUICE_SCENARIOS_DIR"); d != "" {
		return filepath.Join(d, nameOrPath+".yaml"), nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "deploy", "scenarios", nameOrPath+".yaml")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", fmt.Errorf("scenario %q: no deploy/scenarios/%s.yaml in %s or its parents (pass a file path or --scenarios-dir)", nameOrPath, nameOrPath, wd)
}

// ParseScenario parses and validates scenario YAML. source names the file in
// errors. Unknown fields are errors; every problem is reported with its
// line and column.
func ParseScenario(b []byte, source string) (*Scenario, error) {
	pe := &ProblemsError{Subject: "scenario " + source, File: source}
	var sc Scenario
	root := pe.DecodeYAML(b, &sc)
	if root == nil {
		return nil, pe.Err()
	}
	if len(root.Content) == 0 {
		pe.Add("", "empty scenario")
		return nil, pe.Err()
	}
	sc.Source = source
	sc.validate(pe)
	if err := pe.Err(); err != nil {
		return nil, err
	}
	return &sc, nil
}

func (sc *Scenario) validate(pe *ProblemsError) {
	c := checker{pe}
	// A relation with the duration is checked only when the duration is
	// itself valid (one bad duration is one problem).
	durOK := sc.validateTop(c)
	// Simulator config over its defaults.
	simCfg := sim.DefaultConfig()
	if sc.Sim.Kind != 0 {
		// Decoded in place, so its problems print at the scenario's lines.
		simCfg = sim.DecodeConfig(&sc.Sim, "sim", pe)
	}
	sc.SimConfig = simCfg
	lim := sc.ProviderLimits()
	sc.validateSluice(c, lim)
	sc.validateClasses(c)
	sc.validateTenants(c, lim, durOK)
}

// rule is one check of a scenario field: when broken, the problem format
// (with args) is reported at the field key. The validate functions state
// their checks as tables of rules, one row per field in document order,
// after filling the field's default.
type rule struct {
	key    string
	broken bool
	format string
	args   []any
}

// checker reports a scenario's problems at their paths.
type checker struct{ pe *ProblemsError }

// bad reports a problem at path, a mix of keys (string) and indices (int).
func (c checker) bad(at []any, format string, a ...any) {
	loc := ""
	for _, p := range at {
		switch k := p.(type) {
		case string:
			loc = problems.Join(loc, k)
		case int:
			loc = problems.Index(loc, k)
		}
	}
	c.pe.Add(loc, format, a...)
}

// check reports every broken rule, at prefix + its key.
func (c checker) check(prefix []any, rules ...rule) {
	for _, r := range rules {
		if r.broken {
			c.bad(append(prefix[:len(prefix):len(prefix)], r.key), r.format, r.args...)
		}
	}
}

// path is a problem's location: keys (string) and indices (int).
func path(a ...any) []any { return a }

// vals are a problem's format arguments.
func vals(a ...any) []any { return a }

// idForm is the problem of an id that is not of the form idRE accepts.
const idForm = "%q must be lower-case letters, digits, '-', '_' or '.'"

// validateTop fills and checks the scenario's own fields; it reports
// whether the duration is valid (the relations with it need one).
func (sc *Scenario) validateTop(c checker) (durOK bool) {
	if sc.Seed == 0 {
		sc.Seed = 1
	}
	if sc.Model == "" {
		sc.Model = "gpt-4o-mini"
	}
	if sc.Provider == "" {
		sc.Provider = sim.OpenAI
	}
	c.check(nil,
		rule{"name", sc.Name == "", "required", nil},
		rule{"name", sc.Name != "" && !idRE.MatchString(sc.Name), idForm, vals(sc.Name)},
		rule{"duration", sc.Duration <= 0, "required, > 0 (e.g. \"30s\")", nil},
		rule{"duration", sc.Duration.D() > 24*time.Hour, "%s is longer than 24h", vals(sc.Duration.D())},
		rule{"provider", sc.Provider != sim.OpenAI, "%q: only \"openai\" is supported (the gateway serves the OpenAI chat API)", vals(sc.Provider)},
	)
	return sc.Duration > 0 && sc.Duration.D() <= 24*time.Hour
}

// validateSluice fills and checks Sluice's limits: none may exceed the
// simulator's (lim).
func (sc *Scenario) validateSluice(c checker, lim sim.Limits) {
	sl := &sc.Sluice
	if sl.Factor == 0 {
		sl.Factor = 0.9
	}
	atMost := func(key string, v, provider int64, what string) []rule {
		return []rule{
			{key, v < 0, "%d must be >= 0", vals(v)},
			{key, v > 0 && provider > 0 && v > provider, "%d exceeds the simulator's %s %d (Sluice must stay at or below the provider)", vals(v, what, provider)},
		}
	}
	rules := []rule{{"factor", sl.Factor <= 0 || sl.Factor > 1 || math.IsNaN(sl.Factor),
		"%v out of (0, 1]: Sluice's limits must stay at or below the provider's", vals(sl.Factor)}}
	rules = append(rules, atMost("requests_per_min", sl.RequestsPerMin, lim.RPM, "rpm")...)
	rules = append(rules, atMost("tokens_per_min", sl.TokensPerMin, lim.TPM, "tpm")...)
	rules = append(rules, atMost("input_tokens_per_min", sl.InputTokensPerMin, lim.ITPM, "itpm")...)
	rules = append(rules, atMost("output_tokens_per_min", sl.OutputTokensPerMin, lim.OTPM, "otpm")...)
	rules = append(rules, atMost("requests_per_day", sl.RequestsPerDay, lim.RPD, "rpd")...)
	rules = append(rules,
		rule{"concurrency", sl.Concurrency < 0, "%d must be >= 0", vals(sl.Concurrency)},
		rule{"tenant_requests_per_day", sl.TenantRequestsPerDay < 0, "%d must be >= 0", vals(sl.TenantRequestsPerDay)},
		rule{"window", sl.Window < 0 || sl.Window.D() > time.Minute, "%s out of [0, 60s]", vals(sl.Window.D())},
	)
	c.check(path("sluice"), rules...)
	if r := sl.Ramp; r != nil {
		c.check(path("sluice", "ramp"),
			rule{"period", r.Period <= 0 || r.Period.D() < time.Second || r.Period.D() > time.Hour, "%s out of [1s, 1h]", vals(r.Period.D())},
			rule{"start", r.Start <= 0, "%d must be > 0", vals(r.Start)},
			rule{"step", r.Step < 0, "%d must be >= 0", vals(r.Step)},
		)
	}
}

// validateClasses lays the scenario's classes over the defaults and
// checks them, by name order.
func (sc *Scenario) validateClasses(c checker) {
	classes := defaultClasses()
	names := make([]string, 0, len(sc.Classes))
	for name := range sc.Classes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		cs := sc.Classes[name]
		if !idRE.MatchString(name) {
			c.bad(path("classes", name), "class name "+idForm, name)
		}
		base, known := classes[name]
		if !known {
			base = ClassSpec{Deadline: Duration(10 * time.Second), MaxWait: Duration(5 * time.Second), MaxDepth: 5000}
		}
		if cs.Deadline != 0 {
			base.Deadline = cs.Deadline
		}
		if cs.MaxWait != 0 {
			base.MaxWait = cs.MaxWait
		}
		if cs.MaxDepth != 0 {
			base.MaxDepth = cs.MaxDepth
		}
		if cs.AgeOffset != nil {
			base.AgeOffset = cs.AgeOffset
		}
		if base.AgeOffset == nil {
			c.bad(path("classes", name, "age_offset"), "required for a class other than interactive, agent or batch")
			z := Duration(0)
			base.AgeOffset = &z
		}
		c.check(path("classes", name),
			rule{"deadline", base.Deadline <= 0, "must be > 0", nil},
			rule{"max_wait", base.MaxWait < 0 || base.MaxWait.D() > 24*time.Hour, "%s out of [0, 24h]", vals(base.MaxWait.D())},
			rule{"max_depth", base.MaxDepth < 0 || base.MaxDepth > 1_000_000, "%d out of [0, 1000000]", vals(base.MaxDepth)},
			rule{"age_offset", *base.AgeOffset < 0, "must be >= 0", nil},
			rule{"max_wait", base.MaxWait > base.Deadline, "%s is longer than the class deadline %s: a queued request would outlive its caller", vals(base.MaxWait.D(), base.Deadline.D())},
		)
		classes[name] = base
	}
	sc.Classes = classes
}

// validateTenants fills and checks the tenants: their ids, traffic and
// request shapes, against the classes, the duration (when durOK) and the
// simulator's limits.
func (sc *Scenario) validateTenants(c checker, lim sim.Limits, durOK bool) {
	if len(sc.Tenants) == 0 {
		c.bad(path("tenants"), "at least one tenant is required")
	}
	seen := map[string]bool{}
	for i := range sc.Tenants {
		t := &sc.Tenants[i]
		at := path("tenants", i)
		tenantGiven := t.Tenant != ""
		t.fillDefaults(sc.Model)
		_, classKnown := sc.Classes[t.Class]
		idOK := t.ID != "" && idRE.MatchString(t.ID)
		c.check(at,
			rule{"id", t.ID == "", "required", nil},
			rule{"id", t.ID != "" && !idOK, idForm, vals(t.ID)},
			rule{"id", idOK && seen[t.ID], "duplicate tenant %q", vals(t.ID)},
			rule{"tenant", tenantGiven && !idRE.MatchString(t.Tenant), idForm, vals(t.Tenant)},
			rule{"weight", t.Weight < 0 || t.Weight > 1_000_000, "%d out of [1, 1000000]", vals(t.Weight)},
			rule{"guaranteed", t.Guaranteed < 0 || t.Guaranteed > 1, "%v out of [0, 1]", vals(t.Guaranteed)},
			rule{"class", !classKnown, "unknown class %q (define it under classes)", vals(t.Class)},
			rule{"rate", !(t.Rate > 0) || t.Rate > 100_000, "%v out of (0, 100000] requests per second", vals(t.Rate)},
			rule{"ramp_to", t.RampTo < 0 || t.RampTo > 100_000 || math.IsNaN(t.RampTo), "%v out of [0, 100000]", vals(t.RampTo)},
			rule{"start", t.Start < 0 || durOK && t.Start >= sc.Duration, "%s out of [0, duration %s)", vals(t.Start.D(), sc.Duration.D())},
			rule{"end", t.End < 0 || durOK && t.End > sc.Duration || (t.End != 0 && t.End <= t.Start),
				"%s out of (start, duration %s] (0 = until the end)", vals(t.End.D(), sc.Duration.D())},
		)
		seen[t.ID] = true
		for j, b := range t.Bursts {
			c.check(path("tenants", i, "bursts", j),
				rule{"at", b.At < 0 || durOK && b.At >= sc.Duration, "%s out of [0, duration %s)", vals(b.At.D(), sc.Duration.D())},
				rule{"for", b.For <= 0, "must be > 0", nil},
				rule{"rate", !(b.Rate > 0) || b.Rate > 100_000, "%v out of (0, 100000]", vals(b.Rate)},
			)
		}
		c.check(at,
			rule{"prompt_tokens", t.PromptTokens < 16 || t.PromptTokens > 2_000_000, "%d out of [16, 2000000]", vals(t.PromptTokens)},
			rule{"max_tokens", t.MaxTokens < 1 || t.MaxTokens > 1_000_000, "%d out of [1, 1000000]", vals(t.MaxTokens)},
			rule{"cancel_fraction", t.CancelFraction < 0 || t.CancelFraction > 1 || math.IsNaN(t.CancelFraction), "%v out of [0, 1]", vals(t.CancelFraction)},
			rule{"cancel_after", t.CancelFraction > 0 && t.CancelAfter <= 0, "required (> 0) when cancel_fraction is set", nil},
			rule{"cancel_after", t.CancelAfter < 0, "must be >= 0", nil},
			rule{"prompt_tokens", lim.TPM > 0 && t.PromptTokens+t.MaxTokens > lim.TPM,
				"prompt_tokens + max_tokens = %d exceeds the simulator's tpm %d: every request would be refused as too large", vals(t.PromptTokens+t.MaxTokens, lim.TPM)},
		)
	}
}

// fillDefaults gives a tenant's unset fields their defaults: the
// scenario's model, its id as tenant, weight 1, class interactive, 200
// prompt and 128 max tokens.
func (t *TenantSpec) fillDefaults(model string) {
	if t.Model == "" {
		t.Model = model
	}
	if t.Tenant == "" {
		t.Tenant = t.ID
	}
	if t.Weight == 0 {
		t.Weight = 1
	}
	if t.Class == "" {
		t.Class = "interactive"
	}
	if t.PromptTokens == 0 {
		t.PromptTokens = 200
	}
	if t.MaxTokens == 0 {
		t.MaxTokens = 128
	}
}

// ProviderLimits are the simulator's limits for the scenario's model.
func (sc *Scenario) ProviderLimits() sim.Limits {
	pc := sc.SimConfig.Providers[sc.Provider]
	if l, ok := pc.ModelLimits[sc.Model]; ok {
		return l
	}
	return pc.Limits
}

// Streaming reports whether any tenant streams.
func (sc *Scenario) Streaming() bool {
	for _, t := range sc.Tenants {
		if t.Stream {
			return true
		}
	}
	return false
}

// ClassNames lists the classes in priority order (age offset, then name).
func (sc *Scenario) ClassNames() []string {
	out := make([]string, 0, len(sc.Classes))
	for n := range sc.Classes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := sc.Classes[out[i]], sc.Classes[out[j]]
		if *a.AgeOffset != *b.AgeOffset {
			return *a.AgeOffset < *b.AgeOffset
		}
		return out[i] < out[j]
	})
	return out
}
