package config_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
)

const base = `providers:
  - {name: oa, kind: openai, scope: s1, base_url: "https://api.openai.com/v1"}
  - {name: az, kind: azure, scope: s2, base_url: "https://x.openai.azure.com", deployment: d, api_version: "2024-10-21"}
  - {name: an, kind: anthropic, scope: s3, base_url: "https://api.anthropic.com/v1"}
routes:
ROUTES
tenants:
  - id: t
    keys:
      - {id: k, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08KEYEXTRA}
ledger:
  scopes:
    - {name: s1, buckets: [{level: key, id: "*", dimension: requests, capacity: 600}]}
`

func doc(routes, keyExtra string) string {
	return strings.NewReplacer("ROUTES", routes, "KEYEXTRA", keyExtra).Replace(base)
}

func TestLoadValidation(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		probs []string // substrings, one per expected problem (order of the file)
	}{
		{"short form", doc(`  - {model: m, provider: oa}`, ""), nil},
		{"candidates keeping the contract", doc(`  - model: m
    contract: {min_context_tokens: 100000, tools: true, residency: [eu], max_input_cost_per_mtok: 3}
    candidates:
      - {provider: oa, context_tokens: 128000, tools: true, residency: eu, input_cost_per_mtok: 2.5}
      - {provider: az, upstream_model: gpt-4o, context_tokens: 128000, tools: true, residency: eu, input_cost_per_mtok: 2.5}`, ""), nil},
		{"candidate breaking the contract", doc(`  - model: m
    contract: {min_context_tokens: 100000, tools: true, structured_output: true, residency: [eu], max_output_cost_per_mtok: 10}
    candidates:
      - {provider: az, context_tokens: 8000, residency: us, output_cost_per_mtok: 60}`, ""), []string{
			"routes[0].candidates[0]: breaks the route contract: context_tokens 8000 below min_context_tokens 100000",
			"routes[0].candidates[0]: breaks the route contract: tools required",
			"routes[0].candidates[0]: breaks the route contract: structured_output required",
			`routes[0].candidates[0]: breaks the route contract: residency "us" not in [eu]`,
			"routes[0].candidates[0]: breaks the route contract: output cost 60 above the ceiling 10",
		}},
		{"both forms", doc(`  - {model: m, provider: oa, candidates: [{provider: az}]}`, ""), []string{"routes[0]: give either provider"}},
		{"neither form", doc(`  - {model: m}`, ""), []string{"routes[0].provider: required"}},
		{"calibrated input correction and online learning", doc(`  - {model: m, provider: oa, input_correction: 1.08, learn_output: true}`, ""), nil},
		{"input correction out of bounds", doc(`  - {model: m, provider: oa, input_correction: 3}`, ""), []string{"routes[0].input_correction: 3 is outside [0.5, 2] (0 = none)"}},
		{"unknown candidate provider", doc(`  - {model: m, candidates: [{provider: nope}]}`, ""), []string{`routes[0].candidates[0].provider: unknown provider "nope"`}},
		{"unknown key class", doc(`  - {model: m, provider: oa}`, ", class: gold"), []string{`tenants[0].keys[0].class: "gold" is not a class of the ledger document`}},
		{"key priority out of range", doc(`  - {model: m, provider: oa}`, ", priority: 500"), []string{"tenants[0].keys[0].priority: 500 out of [-100, 100]"}},
		{"entitlements within themselves", doc(`  - {model: m, provider: oa}`, ", class: batch, priority: 5, allowed_classes: [batch, agent], max_priority: 5, allowed_models: [m], expires_at: \"2027-01-31T00:00:00Z\""), nil},
		{"entitlements naming what does not exist", doc(`  - {model: m, provider: oa}`, ", allowed_classes: [gold], allowed_models: [gpt-9], max_priority: 101, expires_at: tomorrow"), []string{
			`tenants[0].keys[0].allowed_classes: "gold" is not a class of the ledger document`,
			`tenants[0].keys[0].allowed_models: "gpt-9" is not a routed model (m)`,
			"tenants[0].keys[0].max_priority: 101 out of [-100, 100]",
			`tenants[0].keys[0].expires_at: "tomorrow" is not an RFC 3339 time`,
		}},
		{"a key's defaults beyond its entitlement", doc(`  - {model: m, provider: oa}`, ", class: interactive, priority: 9, allowed_classes: [batch], max_priority: 0"), []string{
			`tenants[0].keys[0].class: "interactive" is not in allowed_classes [batch] of key k`,
			"tenants[0].keys[0].priority: 9 is above max_priority 0 of key k",
		}},
		{"every problem at once", doc(`  - {model: m}
  - {model: m, provider: zz, default_max_output_tokens: -1}`, ", deadline_ms: -5"), []string{
			"routes[0].provider: required",
			`routes[1].model: duplicate route for "m"`,
			`routes[1].provider: unknown provider "zz"`,
			"routes[1].default_max_output_tokens: must be positive",
			"tenants[0].keys[0].deadline_ms: -5 out of",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Load(strings.NewReader(tc.yaml))
			if len(tc.probs) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if c.Route("m") == nil || len(c.Route("m").Candidates) == 0 || c.Route("m").Candidates[0].UpstreamModel == "" {
					t.Fatalf("route not resolved: %+v", c.Route("m"))
				}
				return
			}
			var ve *config.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err %v, want a ValidationError", err)
			}
			if len(ve.Problems) != len(tc.probs) {
				t.Fatalf("%d problems, want %d:\n%s", len(ve.Problems), len(tc.probs), err)
			}
			for i, want := range tc.probs {
				if !strings.Contains(ve.Problems[i].String(), want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, ve.Problems[i].String(), want)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c, err := config.Load(strings.NewReader(doc(`  - {model: m, provider: an}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	id := c.Lookup("test") // sha256("test") is the key's hash
	if id == nil || id.Class != "interactive" || !id.FallbackAllowed {
		t.Fatalf("identity %+v: want the ledger's default class and fallback allowed", id)
	}
	if p := c.Provider("an"); p.APIVersion != "2023-06-01" {
		t.Errorf("anthropic version %q", p.APIVersion)
	}
	if c.BodyLimitBytes != 10<<20 || c.Idempotency.EntriesMax == 0 || c.UpstreamTimeoutMs == 0 {
		t.Errorf("defaults not filled: %+v", c)
	}
	if got := c.ClassNames(); len(got) != 3 || !c.HasClass("batch") {
		t.Errorf("classes %v", got)
	}
}

func TestExampleConfigLoads(t *testing.T) {
	t.Setenv("OPENAI_UPSTREAM_KEY", "x")
	t.Setenv("AZURE_OPENAI_KEY", "x")
	t.Setenv("ANTHROPIC_UPSTREAM_KEY", "x")
	t.Setenv("GEMINI_API_KEY", "x")
	if _, err := config.LoadFile("../../deploy/examples/sluice.yaml"); err != nil {
		t.Fatal(err)
	}
}

// TestGatewayNodeFromEnv: a Deployment's replicas share one file and take
// their node ids from SLUICE_GATEWAY_NODE.
func TestGatewayNodeFromEnv(t *testing.T) {
	t.Setenv("OPENAI_UPSTREAM_KEY", "x")
	t.Setenv("AZURE_OPENAI_KEY", "x")
	t.Setenv("ANTHROPIC_UPSTREAM_KEY", "x")
	t.Setenv("GEMINI_API_KEY", "x")
	for _, tc := range []struct{ env, want string }{{"", "gw-1"}, {"sluice-gateway-7d9f-abcde", "sluice-gateway-7d9f-abcde"}, {"  ", "gw-1"}} {
		t.Setenv(config.EnvGatewayNode, tc.env)
		c, err := config.LoadFile("../../deploy/examples/sluice.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if c.Node != tc.want {
			t.Errorf("%s=%q: node %q, want %q", config.EnvGatewayNode, tc.env, c.Node, tc.want)
		}
	}
}

// FuzzLoad: any bytes either load or fail with an error; never a panic.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(doc(`  - {model: m, provider: oa}`, "")))
	f.Add([]byte(doc(`  - {model: m, candidates: [{provider: az, context_tokens: 1}], contract: {min_context_tokens: 2}}`, "")))
	if b, err := os.ReadFile("../../deploy/examples/sluice.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("ledger: [1, {a: b}]\nroutes: {x: 1}"))
	bad, _ := filepath.Glob("testdata/bad/*.yaml")
	for _, name := range bad {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := config.Load(strings.NewReader(string(b)))
		var ve *config.ValidationError
		if errors.As(err, &ve) {
			// A refusal names at least one problem, counts them right
			// and places each (the document always has a position).
			if len(ve.Problems) == 0 || !strings.HasPrefix(err.Error(), fmt.Sprintf("config: %d problem", len(ve.Problems))) {
				t.Fatalf("refusal without its problems: %q", err)
			}
			for _, p := range ve.Problems {
				if p.Pos.Line == 0 {
					t.Fatalf("problem without a position: %q", ve.Line(p))
				}
			}
		}
		if err != nil {
			return
		}
		for _, m := range c.Models() {
			r := c.Route(m)
			if r == nil || len(r.Candidates) == 0 || c.Provider(r.Candidates[0].Provider) == nil {
				t.Fatalf("loaded config with an unresolved route %q", m)
			}
		}
	})
}

// TestLateGrantBounds: by default a class's late-grant bound is its max
// wait within [100 ms, 500 ms]; late_grant_ms overrides every class and
// late_grant_class_ms one class; bad values are reported.
func TestLateGrantBounds(t *testing.T) {
	route := `  - {model: m, provider: oa}`
	c, err := config.Load(strings.NewReader(doc(route, "")))
	if err != nil {
		t.Fatal(err)
	}
	// Default classes: interactive 300 ms, agent 10 s, batch 20 min.
	for class, want := range map[string]int64{"interactive": 300, "agent": 500, "batch": 500, "unknown": 500} {
		if got := c.LateGrantBoundMs(class); got != want {
			t.Errorf("default bound of %s = %d, want %d", class, got, want)
		}
	}
	c, err = config.Load(strings.NewReader("late_grant_ms: 2000\nlate_grant_class_ms: {interactive: 150}\n" + doc(route, "")))
	if err != nil {
		t.Fatal(err)
	}
	if a, i := c.LateGrantBoundMs("agent"), c.LateGrantBoundMs("interactive"); a != 2000 || i != 150 {
		t.Errorf("bounds agent %d, interactive %d; want 2000, 150", a, i)
	}
	_, err = config.Load(strings.NewReader("late_grant_ms: -1\nlate_grant_class_ms: {gold: 10, batch: 0}\n" + doc(route, "")))
	var ve *config.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 3 {
		t.Fatalf("err %v, want 3 problems", err)
	}
	for i, want := range []string{"late_grant_ms: -1 out of", "late_grant_class_ms.gold: not a class", "late_grant_class_ms.batch: 0 out of"} {
		if !strings.Contains(ve.Problems[i].String(), want) {
			t.Errorf("problem %d = %q, want %q", i, ve.Problems[i].String(), want)
		}
	}
}

// classDoc is a config whose ledger document has the class CLASS.
const classDoc = `providers:
  - {name: oa, kind: openai, scope: s1, base_url: "https://api.openai.com/v1"}
routes:
  - {model: m, provider: oa}
tenants:
  - id: t
    keys:
      - {id: k, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08KEYEXTRA}
ledger:
  classes:
    - CLASS
  scopes:
    - {name: s1, buckets: [{level: key, id: "*", dimension: requests, capacity: 600}]}
`

// TestClassDeadlines: a class's deadline_ms and max_deadline_ms are
// checked against each other and against its max_wait_ms, keys' against
// theirs, each problem with its location.
func TestClassDeadlines(t *testing.T) {
	tests := []struct {
		name, class, keyExtra string
		probs                 []string
	}{
		{"default and cap", "{name: batch, max_wait_ms: 50000, deadline_ms: 60000, max_deadline_ms: 600000}", "", nil},
		{"none", "{name: batch, max_wait_ms: 1200000}", "", nil},
		{"max wait longer than the deadline", "{name: batch, max_wait_ms: 1200000, deadline_ms: 600000}", "", []string{
			"ledger.classes[0].max_wait_ms: 1200000 is longer than the class's deadline_ms 600000: a queued request would still wait after its client gave up"}},
		{"max wait longer than the cap", "{name: batch, max_wait_ms: 1200000, max_deadline_ms: 600000}", "", []string{
			"ledger.classes[0].max_wait_ms: 1200000 is longer than the class's max_deadline_ms 600000"}},
		{"default above the cap", "{name: batch, max_wait_ms: 1000, deadline_ms: 9000, max_deadline_ms: 5000}", "", []string{
			"ledger.classes[0].deadline_ms: 9000 is longer than the class's max_deadline_ms 5000"}},
		{"out of range", "{name: batch, deadline_ms: -1, max_deadline_ms: 86400001}", "", []string{
			"ledger.classes[0].deadline_ms: -1 out of [0, 86400000]",
			"ledger.classes[0].max_deadline_ms: 86400001 out of [0, 86400000]"}},
		{"key default above the key cap", "{name: batch}", ", deadline_ms: 9000, max_deadline_ms: 5000", []string{
			"tenants[0].keys[0].deadline_ms: 9000 is longer than the key's max_deadline_ms 5000"}},
		{"key cap out of range", "{name: batch}", ", max_deadline_ms: -2", []string{
			"tenants[0].keys[0].max_deadline_ms: -2 out of [0, 86400000]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			y := strings.NewReplacer("CLASS", tc.class, "KEYEXTRA", tc.keyExtra).Replace(classDoc)
			c, err := config.Load(strings.NewReader(y))
			if len(tc.probs) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ve *config.ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) != len(tc.probs) {
				t.Fatalf("config %v, err %v; want %d problems", c != nil, err, len(tc.probs))
			}
			for i, want := range tc.probs {
				if !strings.Contains(ve.Problems[i].String(), want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, ve.Problems[i].String(), want)
				}
			}
		})
	}
	c, err := config.Load(strings.NewReader(strings.NewReplacer("CLASS", "{name: batch, max_wait_ms: 50000, deadline_ms: 60000, max_deadline_ms: 600000}", "KEYEXTRA", "").Replace(classDoc)))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ClassDeadline("batch"); got != (config.ClassDeadline{DefaultMs: 60_000, MaxMs: 600_000}) {
		t.Errorf("ClassDeadline(batch) = %+v", got)
	}
}

// TestExamplesWaitWithinClientDeadlines: in every shipped example config
// each class has a deadline default, and no class queues a request longer
// than the official SDKs' default timeout (600 s) or its own deadline
// (the load rejects the latter; issue 20).
func TestExamplesWaitWithinClientDeadlines(t *testing.T) {
	for _, k := range []string{"OPENAI_UPSTREAM_KEY", "AZURE_OPENAI_KEY", "ANTHROPIC_UPSTREAM_KEY", "GEMINI_API_KEY"} {
		t.Setenv(k, "x")
	}
	files, err := filepath.Glob("../../deploy/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example configs: %v", err)
	}
	const sdkDefaultTimeoutMs = 600_000
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(strings.NewReader(strings.ReplaceAll(string(b), "${SIM_URL}", "http://127.0.0.1:1")))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var doc struct {
			Classes []struct {
				Name       string `json:"name"`
				MaxWaitMs  int64  `json:"max_wait_ms"`
				DeadlineMs int64  `json:"deadline_ms"`
			} `json:"classes"`
		}
		if err := json.Unmarshal(c.LedgerJSON(), &doc); err != nil {
			t.Fatal(err)
		}
		for _, cl := range doc.Classes {
			if cl.DeadlineMs == 0 || cl.MaxWaitMs > sdkDefaultTimeoutMs {
				t.Errorf("%s: class %s: deadline_ms %d, max_wait_ms %d; want a deadline and a wait within %d", f, cl.Name, cl.DeadlineMs, cl.MaxWaitMs, sdkDefaultTimeoutMs)
			}
		}
	}
}
