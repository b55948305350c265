// Package sim is Sluice's provider simulator (`sluice sim`): an HTTP server that
// speaks OpenAI-, Azure OpenAI-, Anthropic- and Gemini-style APIs and enforces
// rate limits the way those providers document them (sub-minute enforcement
// windows, separate input/output token limits, cache reads not counted, daily
// request limits, acceleration limits, injected 429 storms and 503 overload),
// answering with each provider's exact rate-limit headers and error bodies.
//
// It is the yardstick for load tests: every request, 429, 503 and token it
// serves is counted and exposed on /sim/stats (JSON) and /metrics (Prometheus).
package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/internal/problems"
)

// Window modes for Limits.WindowMode.
const (
	// WindowBucket enforces a sub-minute window as a continuous token bucket of
	// capacity limit/60*windowSeconds refilled at limit/60 per second.
	WindowBucket = "bucket"
	// WindowFixed enforces a sub-minute window as fixed windows (aligned to the
	// server start) each allowing floor(limit/60*windowSeconds) units, min 1.
	WindowFixed = "fixed"
)

// Duration is a time.Duration that reads and writes as a Go duration string
// ("1s", "250ms", "6m0s") in YAML and JSON. JSON numbers are read as
// nanoseconds.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts "1s"-style strings or integer nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return d.parse(s)
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration must be a string like \"1s\" or integer nanoseconds: %s", b)
	}
	*d = Duration(n)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// UnmarshalYAML accepts "1s"-style strings ("0" is also accepted).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: duration must be a string like \"1s\"", n.Line)
	}
	if err := d.parse(n.Value); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

func (d *Duration) parse(s string) error {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q (want e.g. \"1s\", \"250ms\")", s)
	}
	*d = Duration(v)
	return nil
}

// Limits are the quotas of one provider scope (provider + model, or provider +
// Azure deployment). A zero limit means "not enforced" and its headers are
// omitted.
type Limits struct {
	// RPM is requests per minute.
	RPM int64 `yaml:"rpm,omitempty" json:"rpm,omitempty"`
	// TPM is total tokens (input + output) per minute (OpenAI / Azure style).
	TPM int64 `yaml:"tpm,omitempty" json:"tpm,omitempty"`
	// ITPM is input tokens per minute (Anthropic style; Gemini's "input tokens
	// per minute" too). Cache reads are excluded unless
	// ProviderConfig.CountCacheReads.
	ITPM int64 `yaml:"itpm,omitempty" json:"itpm,omitempty"`
	// OTPM is output tokens per minute (Anthropic style).
	OTPM int64 `yaml:"otpm,omitempty" json:"otpm,omitempty"`
	// RPD is requests per day; the day resets at DailyReset.
	RPD int64 `yaml:"rpd,omitempty" json:"rpd,omitempty"`
	// DailyReset is the UTC wall-clock time "HH:MM" at which the RPD counter
	// resets (default "00:00").
	DailyReset string `yaml:"daily_reset,omitempty" json:"daily_reset,omitempty"`
	// Window is the enforcement window of the per-minute limits. 0 or 60s
	// means one continuous per-minute bucket only; a shorter window adds a
	// sub-minute limiter (see WindowMode) on top of the per-minute bucket, so a
	// burst can fail while the minute average looks safe.
	Window Duration `yaml:"window,omitempty" json:"window,omitempty"`
	// WindowMode is "bucket" (default) or "fixed"; see WindowBucket/WindowFixed.
	WindowMode string `yaml:"window_mode,omitempty" json:"window_mode,omitempty"`
	// Acceleration, when set, rejects sharp ramps in request rate.
	Acceleration *Acceleration `yaml:"acceleration,omitempty" json:"acceleration,omitempty"`
}

// Acceleration limits how fast the request rate may grow: within each fixed
// Window (aligned to the server start) at most max(Floor, Factor × admitted
// requests of the previous window) requests are admitted.
type Acceleration struct {
	Window Duration `yaml:"window,omitempty" json:"window,omitempty"` // default 60s
	Factor float64  `yaml:"factor" json:"factor"`                     // e.g. 2 = may double per window
	Floor  int64    `yaml:"floor" json:"floor"`                       // always allowed per window
}

// ProviderConfig configures one provider style.
type ProviderConfig struct {
	// Limits applied to every scope (model / deployment) of this provider,
	// each scope having its own buckets.
	Limits `yaml:",inline"`
	// ModelLimits replaces Limits for the named models (OpenAI/Anthropic/Gemini
	// model names, Azure deployment names).
	ModelLimits map[string]Limits `yaml:"model_limits,omitempty" json:"model_limits,omitempty"`
	// Models is what GET /openai/v1/models lists (OpenAI only).
	Models []string `yaml:"models,omitempty" json:"models,omitempty"`
	// ReserveMaxTokens counts the request's max output tokens against
	// OTPM/TPM at admission (OpenAI and Azure count this way). When false
	// (Anthropic: output counts as it is produced), or when the request has
	// no max tokens, output is charged after the response from the actual
	// count (the bucket may go into debt).
	ReserveMaxTokens bool `yaml:"reserve_max_tokens" json:"reserve_max_tokens"`
	// RefundUnused returns the unused part of the max-tokens reservation after
	// the response (Anthropic adjusts OTPM to the actual output; OpenAI and
	// Azure do not).
	RefundUnused bool `yaml:"refund_unused" json:"refund_unused"`
	// CountCacheReads counts prompt-cache reads against ITPM/TPM. Anthropic
	// does not (false). Only the Anthropic endpoint simulates prompt caching.
	CountCacheReads bool `yaml:"count_cache_reads" json:"count_cache_reads"`
	// DefaultMaxTokens bounds the output when the request sets no max tokens
	// (default 1024). It is not reserved at admission.
	DefaultMaxTokens int64 `yaml:"default_max_tokens,omitempty" json:"default_max_tokens,omitempty"`
	// GeminiTier is the suffix of Gemini quota ids ("FreeTier" by default).
	GeminiTier string `yaml:"gemini_tier,omitempty" json:"gemini_tier,omitempty"`
	// NoRateLimitHeaders sends no rate-limit header and no Retry-After, on
	// successes or 429s: a provider that only refuses (Vertex AI's bare
	// RESOURCE_EXHAUSTED, Bedrock's ThrottlingException), whose limit a
	// client can only learn from its refusals (issue 20 item 3).
	NoRateLimitHeaders bool `yaml:"no_rate_limit_headers,omitempty" json:"no_rate_limit_headers,omitempty"`
}

// Capacity storm dialects: how a provider whose capacity fell refuses
// what is above it.
const (
	// DialectHeaders: 429 with rate-limit headers that report the reduced
	// limits (and on every success too) and a Retry-After.
	DialectHeaders = "headers"
	// DialectBare: 429 with neither rate-limit headers nor Retry-After,
	// as Vertex AI's bare RESOURCE_EXHAUSTED; successes carry the
	// configured limits' headers, which no longer tell the truth.
	DialectBare = "bare"
	// DialectOverloaded: Anthropic's 529 overloaded_error (503 with the
	// provider's overload body elsewhere), no rate-limit headers.
	DialectOverloaded = "overloaded"
)

// Storm injects 429s or 503s between Start and End (offsets from the server
// start or the last POST /sim/reset; End 0 = until stopped).
type Storm struct {
	// Kind is "429" (rate-limit storm), "503" (overload) — both refuse
	// one request in Every whatever the load, which models retry
	// amplification, not a real overload — or "capacity": the provider's
	// real capacity falls to Fraction of its limits and it refuses only
	// what is above that, in the storm's Dialect.
	Kind string `yaml:"kind" json:"kind"`
	// Fraction (capacity storms) is the share of every per-minute limit
	// (RPM, TPM, ITPM, OTPM) left during the storm, in (0, 1).
	Fraction float64 `yaml:"fraction,omitempty" json:"fraction,omitempty"`
	// Dialect (capacity storms): headers (default), bare or overloaded.
	Dialect string `yaml:"dialect,omitempty" json:"dialect,omitempty"`
	// Provider restricts the storm to one provider style ("" = all).
	Provider string   `yaml:"provider,omitempty" json:"provider,omitempty"`
	Start    Duration `yaml:"start,omitempty" json:"start,omitempty"`
	End      Duration `yaml:"end,omitempty" json:"end,omitempty"`
	// Every hits one request in Every (deterministic counter); 0 or 1 = all.
	Every int `yaml:"every,omitempty" json:"every,omitempty"`
	// RetryAfter is sent as Retry-After (default 1s for 429, none for 503
	// unless set).
	RetryAfter Duration `yaml:"retry_after,omitempty" json:"retry_after,omitempty"`
	// Status overrides the HTTP status (e.g. 529, Anthropic's real overload
	// status). Default: 429 or 503 from Kind.
	Status int `yaml:"status,omitempty" json:"status,omitempty"`
	// EchoKey quotes the credential the request presented in the error
	// message, as a provider or a proxy that echoes a bad key does: the
	// gateway's redaction test (provider.Secrets).
	EchoKey bool `yaml:"echo_key,omitempty" json:"echo_key,omitempty"`
}

// Latency is the response-time model: TimeToFirstToken before the first
// byte of output, then PerOutputToken for each output token.
type Latency struct {
	TimeToFirstToken Duration `yaml:"ttft,omitempty" json:"ttft,omitempty"`
	PerOutputToken   Duration `yaml:"per_output_token,omitempty" json:"per_output_token,omitempty"`
}

// OutputSpread draws the actual output length as a uniform fraction in
// [Min, Max] of the request's max tokens (seeded, so deterministic for a
// given request order). The header `x-sim-output-tokens: N` overrides it.
type OutputSpread struct {
	Min float64 `yaml:"min" json:"min"`
	Max float64 `yaml:"max" json:"max"`
}

// Config configures the simulator. Start from DefaultConfig.
type Config struct {
	Providers map[string]ProviderConfig `yaml:"providers" json:"providers"`
	Storms    []Storm                   `yaml:"storms,omitempty" json:"storms,omitempty"`
	Latency   Latency                   `yaml:"latency" json:"latency"`
	Output    OutputSpread              `yaml:"output" json:"output"`
	// Seed seeds the output-length draws.
	Seed uint64 `yaml:"seed" json:"seed"`
	// StreamChunkTokens is how many output tokens go in one SSE chunk (default 4).
	StreamChunkTokens int `yaml:"stream_chunk_tokens,omitempty" json:"stream_chunk_tokens,omitempty"`
	// PromptOverheadTokens is added once per request to the input estimate
	// (default 3); PerMessageOverheadTokens per message/content entry (default 4).
	PromptOverheadTokens     int64 `yaml:"prompt_overhead_tokens,omitempty" json:"prompt_overhead_tokens,omitempty"`
	PerMessageOverheadTokens int64 `yaml:"per_message_overhead_tokens,omitempty" json:"per_message_overhead_tokens,omitempty"`
	// CacheTTL is how long an Anthropic prompt-cache entry lives after its
	// last use (default 5m).
	CacheTTL Duration `yaml:"cache_ttl,omitempty" json:"cache_ttl,omitempty"`

	// Now is the clock used for every limit decision (default time.Now).
	Now func() time.Time `yaml:"-" json:"-"`
	// Sleep implements the latency model (default: a timer that stops when
	// ctx is done). Tests may replace it with a no-op.
	Sleep func(ctx context.Context, d time.Duration) error `yaml:"-" json:"-"`
}

// DefaultConfig returns a simulator with tier-like limits for every provider,
// sub-minute enforcement, a 1 ms time to first token and an output spread of
// 30–100 % of max tokens.
func DefaultConfig() Config {
	return Config{
		Providers: map[string]ProviderConfig{
			OpenAI: {
				Limits:           Limits{RPM: 600, TPM: 150000, Window: Duration(time.Second), WindowMode: WindowBucket},
				Models:           []string{"gpt-4o-mini", "gpt-4o", "gpt-4.1", "text-embedding-3-small"},
				ReserveMaxTokens: true,
				DefaultMaxTokens: 1024,
			},
			Azure: {
				Limits:           Limits{RPM: 300, TPM: 50000, Window: Duration(10 * time.Second), WindowMode: WindowFixed},
				ReserveMaxTokens: true,
				DefaultMaxTokens: 1024,
			},
			Anthropic: {
				Limits:           Limits{RPM: 1000, ITPM: 450000, OTPM: 90000, Window: Duration(5 * time.Second), WindowMode: WindowBucket},
				ReserveMaxTokens: false, // OTPM counts output as it is produced
				RefundUnused:     true,
				CountCacheReads:  false,
				DefaultMaxTokens: 1024,
			},
			Gemini: {
				Limits:           Limits{RPM: 1000, ITPM: 1000000, RPD: 10000, DailyReset: "08:00"},
				DefaultMaxTokens: 1024,
				GeminiTier:       "FreeTier",
			},
		},
		Latency:                  Latency{TimeToFirstToken: Duration(time.Millisecond)},
		Output:                   OutputSpread{Min: 0.3, Max: 1.0},
		Seed:                     1,
		StreamChunkTokens:        4,
		PromptOverheadTokens:     3,
		PerMessageOverheadTokens: 4,
		CacheTTL:                 Duration(5 * time.Minute),
	}
}

// LoadConfig reads a YAML (or JSON) file over DefaultConfig. Unknown fields
// are errors. Fields of a provider listed in the file override that
// provider's defaults; unlisted providers keep theirs.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("sim config: %w", err)
	}
	return parseConfig(b, path)
}

// ParseConfig parses YAML (or JSON) config text over DefaultConfig. The
// error (a *problems.List) lists every problem at its line:column and path.
func ParseConfig(b []byte) (Config, error) { return parseConfig(b, "") }

func parseConfig(b []byte, file string) (Config, error) {
	p := &problems.List{Subject: "sim config", File: file}
	if file != "" {
		p.Subject = "sim config " + file
	}
	root := p.Parse(b)
	if root == nil {
		return Config{}, p.Err()
	}
	p.Locate(root, "")
	cfg := DecodeConfig(root, "", p)
	if err := p.Err(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// DecodeConfig decodes a simulator config node over DefaultConfig and
// validates it, adding every problem to p at its path below prefix (a
// load-test scenario embeds the simulator's config under sim:, and its
// problems print at the scenario file's lines). Unknown fields are
// problems. Fields of a provider listed in the node override that
// provider's defaults; unlisted providers keep theirs.
func DecodeConfig(node *yaml.Node, prefix string, p *problems.List) Config {
	cfg := DefaultConfig()
	def := cfg.Providers
	cfg.Providers = nil
	clean := p.Check(node, prefix, reflect.TypeOf(cfg), problems.TagYAML)
	if err := clean.Decode(&cfg); err != nil {
		p.AddAt(prefix, problems.Pos{Line: node.Line, Col: node.Column}, "%v", err)
		return cfg
	}
	// Second pass: decode each listed provider over its defaults so a file
	// can change one field (e.g. rpm) and keep the provider's behaviour flags.
	var doc struct {
		Providers map[string]yaml.Node `yaml:"providers"`
	}
	if err := clean.Decode(&doc); err != nil {
		p.AddAt(prefix, problems.Pos{Line: node.Line, Col: node.Column}, "%v", err)
		return cfg
	}
	merged := def
	for name, n := range doc.Providers {
		base := def[name]
		if err := n.Decode(&base); err != nil {
			p.AddAt(problems.Join(prefix, "providers."+name), problems.Pos{Line: n.Line, Col: n.Column}, "%v", err)
			continue
		}
		merged[name] = base
	}
	cfg.Providers = merged
	cfg.validate(p, prefix)
	return cfg
}

// Validate reports every invalid field (a *problems.List, nil when none).
func (c *Config) Validate() error {
	p := &problems.List{Subject: "sim config"}
	c.validate(p, "")
	return p.Err()
}

// validate adds every problem of c to p, at paths below prefix.
func (c *Config) validate(p *problems.List, prefix string) {
	at := func(path string) string { return problems.Join(prefix, path) }
	for _, name := range slices.Sorted(maps.Keys(c.Providers)) {
		pc := c.Providers[name]
		where := at("providers." + name)
		if !knownProvider(name) {
			p.Add(where, "unknown provider %q (want %s)%s", name, providerList(),
				problems.Hint(name, providerNames))
			continue
		}
		pc.Limits.validate(p, where)
		for _, m := range slices.Sorted(maps.Keys(pc.ModelLimits)) {
			pc.ModelLimits[m].validate(p, where+".model_limits."+m)
		}
		if pc.DefaultMaxTokens < 0 {
			p.Add(where+".default_max_tokens", "%d must be >= 0", pc.DefaultMaxTokens)
		}
	}
	for i, s := range c.Storms {
		if err := s.validate(); err != nil {
			p.Add(problems.Index(at("storms"), i), "%v", err)
		}
	}
	if c.Latency.TimeToFirstToken < 0 || c.Latency.PerOutputToken < 0 {
		p.Add(at("latency"), "durations must be >= 0")
	}
	if c.Output.Min < 0 || c.Output.Max > 1 || c.Output.Min > c.Output.Max {
		p.Add(at("output"), "output spread must satisfy 0 <= min <= max <= 1, got [%v, %v]", c.Output.Min, c.Output.Max)
	}
	if c.StreamChunkTokens < 0 || c.PromptOverheadTokens < 0 || c.PerMessageOverheadTokens < 0 || c.CacheTTL < 0 {
		p.Add(prefix, "stream_chunk_tokens, overheads and cache_ttl must be >= 0")
	}
}

func (l Limits) validate(p *problems.List, where string) {
	for _, f := range []struct {
		name string
		v    int64
	}{{"rpm", l.RPM}, {"tpm", l.TPM}, {"itpm", l.ITPM}, {"otpm", l.OTPM}, {"rpd", l.RPD}} {
		if f.v < 0 {
			p.Add(where+"."+f.name, "%d: limits must be >= 0 (0 = not enforced)", f.v)
		}
	}
	if l.Window < 0 || l.Window.D() > time.Minute {
		p.Add(where+".window", "must be between 0 and 60s, got %s", l.Window.D())
	}
	switch l.WindowMode {
	case "", WindowBucket, WindowFixed:
	default:
		p.Add(where+".window_mode", "must be %q or %q, got %q", WindowBucket, WindowFixed, l.WindowMode)
	}
	if _, err := parseDailyReset(l.DailyReset); err != nil {
		p.Add(where+".daily_reset", "%v", err)
	}
	if a := l.Acceleration; a != nil {
		if a.Factor < 1 || a.Floor < 1 || a.Window < 0 {
			p.Add(where+".acceleration", "needs factor >= 1, floor >= 1, window >= 0")
		}
	}
}

func (s Storm) validate() error {
	switch s.Kind {
	case "429", "503":
		if s.Fraction != 0 || s.Dialect != "" {
			return errors.New("fraction and dialect are for capacity storms")
		}
	case StormCapacity:
		if !(s.Fraction > 0 && s.Fraction < 1) {
			return fmt.Errorf("a capacity storm needs fraction in (0, 1), got %v", s.Fraction)
		}
		switch s.Dialect {
		case "", DialectHeaders, DialectBare, DialectOverloaded:
		default:
			return fmt.Errorf("dialect must be %q, %q or %q, got %q", DialectHeaders, DialectBare, DialectOverloaded, s.Dialect)
		}
		if s.Every > 1 || s.RetryAfter != 0 || s.Status != 0 {
			return errors.New("a capacity storm refuses what is above its capacity: every, retry_after and status do not apply (the dialect sets the answer)")
		}
	default:
		return fmt.Errorf("kind must be \"429\", \"503\" or %q, got %q", StormCapacity, s.Kind)
	}
	if s.Provider != "" && !knownProvider(s.Provider) {
		return fmt.Errorf("unknown provider %q", s.Provider)
	}
	if s.Start < 0 || s.End < 0 || (s.End != 0 && s.End <= s.Start) {
		return errors.New("need 0 <= start < end (end 0 = open-ended)")
	}
	if s.Every < 0 || s.RetryAfter < 0 {
		return errors.New("every and retry_after must be >= 0")
	}
	if s.Status != 0 && (s.Status < 400 || s.Status > 599) {
		return fmt.Errorf("status must be a 4xx/5xx code, got %d", s.Status)
	}
	return nil
}

// StormCapacity is the Kind of a capacity storm.
const StormCapacity = "capacity"

// scaled is l during a capacity storm leaving fraction of it: every
// per-minute limit scaled (at least 1 where set), the window kept; daily
// and acceleration limits stay with the provider's own scope.
func (l Limits) scaled(fraction float64) Limits {
	f := func(v int64) int64 {
		if v <= 0 {
			return 0
		}
		return max(1, int64(math.Floor(float64(v)*fraction)))
	}
	return Limits{RPM: f(l.RPM), TPM: f(l.TPM), ITPM: f(l.ITPM), OTPM: f(l.OTPM), Window: l.Window, WindowMode: l.WindowMode}
}

// parseDailyReset parses "HH:MM" (UTC) into an offset from midnight.
func parseDailyReset(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("want \"HH:MM\" (UTC), got %q", s)
	}
	return time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute, nil
}

// limitsFor returns the limits of one scope.
func (p ProviderConfig) limitsFor(model string) Limits {
	if l, ok := p.ModelLimits[model]; ok {
		return l
	}
	return p.Limits
}
