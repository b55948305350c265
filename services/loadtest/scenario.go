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
	bad := func(path []any, format string, a ...any) {
		loc := ""
		for _, p := range path {
			switch k := p.(type) {
			case string:
				loc = problems.Join(loc, k)
			case int:
				loc = problems.Index(loc, k)
			}
		}
		pe.Add(loc, format, a...)
	}
	p := func(a ...any) []any { return a }

	if sc.Name == "" {
		bad(p("name"), "required")
	} else if !idRE.MatchString(sc.Name) {
		bad(p("name"), "%q must be lower-case letters, digits, '-', '_' or '.'", sc.Name)
	}
	// A relation with the duration is checked only when the duration is
	// itself valid (one bad duration is one problem).
	durOK := sc.Duration > 0 && sc.Duration.D() <= 24*time.Hour
	if sc.Duration <= 0 {
		bad(p("duration"), "required, > 0 (e.g. \"30s\")")
	} else if sc.Duration.D() > 24*time.Hour {
		bad(p("duration"), "%s is longer than 24h", sc.Duration.D())
	}
	if sc.Seed == 0 {
		sc.Seed = 1
	}
	if sc.Model == "" {
		sc.Model = "gpt-4o-mini"
	}
	if sc.Provider == "" {
		sc.Provider = sim.OpenAI
	}
	if sc.Provider != sim.OpenAI {
		bad(p("provider"), "%q: only \"openai\" is supported (the gateway serves the OpenAI chat API)", sc.Provider)
	}

	// Simulator config over its defaults.
	simCfg := sim.DefaultConfig()
	if sc.Sim.Kind != 0 {
		// Decoded in place, so its problems print at the scenario's lines.
		simCfg = sim.DecodeConfig(&sc.Sim, "sim", pe)
	}
	sc.SimConfig = simCfg
	lim := sc.ProviderLimits()

	// Sluice limits.
	sl := &sc.Sluice
	if sl.Factor == 0 {
		sl.Factor = 0.9
	}
	if sl.Factor <= 0 || sl.Factor > 1 || math.IsNaN(sl.Factor) {
		bad(p("sluice", "factor"), "%v out of (0, 1]: Sluice's limits must stay at or below the provider's", sl.Factor)
	}
	capCheck := func(key string, v, provider int64, what string) {
		switch {
		case v < 0:
			bad(p("sluice", key), "%d must be >= 0", v)
		case v > 0 && provider > 0 && v > provider:
			bad(p("sluice", key), "%d exceeds the simulator's %s %d (Sluice must stay at or below the provider)", v, what, provider)
		}
	}
	capCheck("requests_per_min", sl.RequestsPerMin, lim.RPM, "rpm")
	capCheck("tokens_per_min", sl.TokensPerMin, lim.TPM, "tpm")
	capCheck("input_tokens_per_min", sl.InputTokensPerMin, lim.ITPM, "itpm")
	capCheck("output_tokens_per_min", sl.OutputTokensPerMin, lim.OTPM, "otpm")
	capCheck("requests_per_day", sl.RequestsPerDay, lim.RPD, "rpd")
	if sl.Concurrency < 0 {
		bad(p("sluice", "concurrency"), "%d must be >= 0", sl.Concurrency)
	}
	if sl.TenantRequestsPerDay < 0 {
		bad(p("sluice", "tenant_requests_per_day"), "%d must be >= 0", sl.TenantRequestsPerDay)
	}
	if sl.Window < 0 || sl.Window.D() > time.Minute {
		bad(p("sluice", "window"), "%s out of [0, 60s]", sl.Window.D())
	}
	if r := sl.Ramp; r != nil {
		if r.Period <= 0 || r.Period.D() < time.Second || r.Period.D() > time.Hour {
			bad(p("sluice", "ramp", "period"), "%s out of [1s, 1h]", r.Period.D())
		}
		if r.Start <= 0 {
			bad(p("sluice", "ramp", "start"), "%d must be > 0", r.Start)
		}
		if r.Step < 0 {
			bad(p("sluice", "ramp", "step"), "%d must be >= 0", r.Step)
		}
	}

	// Classes over the defaults.
	classes := defaultClasses()
	names := make([]string, 0, len(sc.Classes))
	for name := range sc.Classes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := sc.Classes[name]
		if !idRE.MatchString(name) {
			bad(p("classes", name), "class name %q must be lower-case letters, digits, '-', '_' or '.'", name)
		}
		base, known := classes[name]
		if !known {
			base = ClassSpec{Deadline: Duration(10 * time.Second), MaxWait: Duration(5 * time.Second), MaxDepth: 5000}
		}
		if c.Deadline != 0 {
			base.Deadline = c.Deadline
		}
		if c.MaxWait != 0 {
			base.MaxWait = c.MaxWait
		}
		if c.MaxDepth != 0 {
			base.MaxDepth = c.MaxDepth
		}
		if c.AgeOffset != nil {
			base.AgeOffset = c.AgeOffset
		}
		if base.AgeOffset == nil {
			bad(p("classes", name, "age_offset"), "required for a class other than interactive, agent or batch")
			z := Duration(0)
			base.AgeOffset = &z
		}
		if base.Deadline <= 0 {
			bad(p("classes", name, "deadline"), "must be > 0")
		}
		if base.MaxWait < 0 || base.MaxWait.D() > 24*time.Hour {
			bad(p("classes", name, "max_wait"), "%s out of [0, 24h]", base.MaxWait.D())
		}
		if base.MaxDepth < 0 || base.MaxDepth > 1_000_000 {
			bad(p("classes", name, "max_depth"), "%d out of [0, 1000000]", base.MaxDepth)
		}
		if *base.AgeOffset < 0 {
			bad(p("classes", name, "age_offset"), "must be >= 0")
		}
		if base.MaxWait > base.Deadline {
			bad(p("classes", name, "max_wait"), "%s is longer than the class deadline %s: a queued request would outlive its caller", base.MaxWait.D(), base.Deadline.D())
		}
		classes[name] = base
	}
	sc.Classes = classes

	// Tenants.
	if len(sc.Tenants) == 0 {
		bad(p("tenants"), "at least one tenant is required")
	}
	seen := map[string]bool{}
	for i := range sc.Tenants {
		t := &sc.Tenants[i]
		at := func(k ...any) []any { return append([]any{"tenants", i}, k...) }
		if t.ID == "" {
			bad(at("id"), "required")
		} else if !idRE.MatchString(t.ID) {
			bad(at("id"), "%q must be lower-case letters, digits, '-', '_' or '.'", t.ID)
		} else if seen[t.ID] {
			bad(at("id"), "duplicate tenant %q", t.ID)
		}
		seen[t.ID] = true
		if t.Model == "" {
			t.Model = sc.Model
		}
		if t.Tenant == "" {
			t.Tenant = t.ID
		} else if !idRE.MatchString(t.Tenant) {
			bad(at("tenant"), "%q must be lower-case letters, digits, '-', '_' or '.'", t.Tenant)
		}
		if t.Weight == 0 {
			t.Weight = 1
		}
		if t.Weight < 0 || t.Weight > 1_000_000 {
			bad(at("weight"), "%d out of [1, 1000000]", t.Weight)
		}
		if t.Guaranteed < 0 || t.Guaranteed > 1 {
			bad(at("guaranteed"), "%v out of [0, 1]", t.Guaranteed)
		}
		if t.Class == "" {
			t.Class = "interactive"
		}
		if _, ok := classes[t.Class]; !ok {
			bad(at("class"), "unknown class %q (define it under classes)", t.Class)
		}
		if !(t.Rate > 0) || t.Rate > 100_000 {
			bad(at("rate"), "%v out of (0, 100000] requests per second", t.Rate)
		}
		if t.RampTo < 0 || t.RampTo > 100_000 || math.IsNaN(t.RampTo) {
			bad(at("ramp_to"), "%v out of [0, 100000]", t.RampTo)
		}
		if t.Start < 0 || durOK && t.Start >= sc.Duration {
			bad(at("start"), "%s out of [0, duration %s)", t.Start.D(), sc.Duration.D())
		}
		if t.End < 0 || durOK && t.End > sc.Duration || (t.End != 0 && t.End <= t.Start) {
			bad(at("end"), "%s out of (start, duration %s] (0 = until the end)", t.End.D(), sc.Duration.D())
		}
		for j, b := range t.Bursts {
			if b.At < 0 || durOK && b.At >= sc.Duration {
				bad(at("bursts", j, "at"), "%s out of [0, duration %s)", b.At.D(), sc.Duration.D())
			}
			if b.For <= 0 {
				bad(at("bursts", j, "for"), "must be > 0")
			}
			if !(b.Rate > 0) || b.Rate > 100_000 {
				bad(at("bursts", j, "rate"), "%v out of (0, 100000]", b.Rate)
			}
		}
		if t.PromptTokens == 0 {
			t.PromptTokens = 200
		}
		if t.PromptTokens < 16 || t.PromptTokens > 2_000_000 {
			bad(at("prompt_tokens"), "%d out of [16, 2000000]", t.PromptTokens)
		}
		if t.MaxTokens == 0 {
			t.MaxTokens = 128
		}
		if t.MaxTokens < 1 || t.MaxTokens > 1_000_000 {
			bad(at("max_tokens"), "%d out of [1, 1000000]", t.MaxTokens)
		}
		if t.CancelFraction < 0 || t.CancelFraction > 1 || math.IsNaN(t.CancelFraction) {
			bad(at("cancel_fraction"), "%v out of [0, 1]", t.CancelFraction)
		}
		if t.CancelFraction > 0 && t.CancelAfter <= 0 {
			bad(at("cancel_after"), "required (> 0) when cancel_fraction is set")
		}
		if t.CancelAfter < 0 {
			bad(at("cancel_after"), "must be >= 0")
		}
		if lim.TPM > 0 && t.PromptTokens+t.MaxTokens > lim.TPM {
			bad(at("prompt_tokens"), "prompt_tokens + max_tokens = %d exceeds the simulator's tpm %d: every request would be refused as too large", t.PromptTokens+t.MaxTokens, lim.TPM)
		}
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
