package loadtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestShippedScenariosParse(t *testing.T) {
	files, err := filepath.Glob("../../deploy/scenarios/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"burst", "daily-quota", "long-context", "max-output", "migration-ramp", "noisy-neighbor", "openai-max-tokens", "steady", "storm", "streaming-disconnects"}
	got := map[string]bool{}
	for _, f := range files {
		sc, err := LoadScenario(f, "")
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if base := strings.TrimSuffix(filepath.Base(f), ".yaml"); sc.Name != base {
			t.Errorf("%s: name %q does not match the file name", f, sc.Name)
		}
		got[sc.Name] = true
		// A scenario with its own gateway config (deploy/scenarios/gateway/
		// NAME.yaml) must run through it; the others through the generated
		// one. Either must be accepted by the ledger and gateway.
		if hw, err := os.ReadFile(filepath.Join(filepath.Dir(f), "gateway", sc.Name+".yaml")); err == nil {
			if _, err := HandwrittenConfigYAML(sc, hw, "http://127.0.0.1:1", NewKeys(sc)); err != nil {
				t.Errorf("%s: its gateway config: %v", f, err)
			}
			continue
		}
		if _, err := GatewayConfig(sc, "http://127.0.0.1:1", NewKeys(sc)); err != nil {
			t.Errorf("%s: generated gateway config: %v", f, err)
		}
	}
	for _, n := range want {
		if !got[n] {
			t.Errorf("scenario %s missing from deploy/scenarios", n)
		}
	}
}

func TestLoadScenarioByName(t *testing.T) {
	sc, err := LoadScenario("steady", "../../deploy/scenarios")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Name != "steady" || len(sc.Tenants) == 0 {
		t.Fatalf("got %+v", sc)
	}
}

func TestScenarioDefaults(t *testing.T) {
	sc, err := ParseScenario([]byte("name: x\nduration: 5s\ntenants:\n  - {id: a, rate: 2}\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tn := sc.Tenants[0]
	if tn.Weight != 1 || tn.Class != "interactive" || tn.PromptTokens != 200 || tn.MaxTokens != 128 {
		t.Errorf("tenant defaults: %+v", tn)
	}
	if sc.Seed != 1 || sc.Model != "gpt-4o-mini" || sc.Provider != "openai" || sc.Sluice.Factor != 0.9 {
		t.Errorf("scenario defaults: seed %d model %s provider %s factor %v", sc.Seed, sc.Model, sc.Provider, sc.Sluice.Factor)
	}
	if c := sc.Classes["interactive"]; c.Deadline.D() != 2*time.Second || c.MaxWait.D() != 300*time.Millisecond {
		t.Errorf("interactive class defaults: %+v", c)
	}
	q := EffectiveQuota(sc)
	if q.RequestsPerMin != 540 || q.TokensPerMin != 135000 || q.WindowMs != 1000 {
		t.Errorf("quota derived from the simulator defaults: %+v", q)
	}
	if got := sc.ClassNames(); strings.Join(got, ",") != "interactive,agent,batch" {
		t.Errorf("class order %v", got)
	}
}

// Every bad-config fixture is its own file; each expected fragment must
// appear in one problem line, and problems carry their file:line:column
// and path (internal/problems, as every config). A problem that is a
// consequence of another is not reported: bad_duration.yaml is one
// problem, not also its tenant's start "out of [0, duration 0s)", and
// rate_rps is not also "rate: 0".
func TestBadScenarios(t *testing.T) {
	cases := []struct {
		file string
		want []string
		min  int // exactly this many problems
	}{
		{"unknown_field.yaml", []string{`unknown_field.yaml:3:1: tenats: unknown field "tenats" (did you mean tenants?)`}, 1},
		{"unknown_tenant_field.yaml", []string{`unknown_tenant_field.yaml:5:5: tenants[0].rate_rps: unknown field "rate_rps" (did you mean rate?)`}, 1},
		{"unknown_class_field.yaml", []string{`unknown_class_field.yaml:4:31: classes.interactive.max_wait_ms: unknown field "max_wait_ms" (did you mean max_wait?)`}, 1},
		{"bad_duration.yaml", []string{`bad_duration.yaml:2:11: duration: invalid duration "10 seconds"`}, 1},
		{"missing_duration.yaml", []string{"duration: required"}, 1},
		{"no_tenants.yaml", []string{":3:10: tenants: at least one tenant"}, 1},
		{"duplicate_tenant.yaml", []string{`:5:10: tenants[1].id: duplicate tenant "a"`}, 1},
		{"nonpositive_rate.yaml", []string{":4:19: tenants[0].rate: 0 out of (0, 100000]"}, 1},
		{"unknown_class.yaml", []string{`:4:29: tenants[0].class: unknown class "realtime"`}, 1},
		{"sluice_above_provider.yaml", []string{":7:21: sluice.requests_per_min: 700 exceeds the simulator's rpm 600"}, 1},
		{"factor_above_one.yaml", []string{":4:11: sluice.factor: 1.2 out of (0, 1]"}, 1},
		{"bad_sim.yaml", []string{`bad_sim.yaml:5:14: sim.providers.openai.rpm_limit: unknown field "rpm_limit" (did you mean rpm?)`}, 1},
		{"cancel_without_after.yaml", []string{"tenants[0].cancel_after: required"}, 1},
		{"max_wait_over_deadline.yaml", []string{":4:41: classes.interactive.max_wait: 2s is longer than the class deadline 1s"}, 1},
		{"burst_outside_run.yaml", []string{":7:14: tenants[0].bursts[0].at: 12s out of [0, duration 10s)"}, 1},
		{"unsupported_provider.yaml", []string{`:3:11: provider: "anthropic"`}, 1},
		{"request_too_large.yaml", []string{"tenants[0].prompt_tokens: prompt_tokens + max_tokens = 1100 exceeds the simulator's tpm 1000"}, 1},
		{"many_problems.yaml", []string{
			`:1:7: name: "Bad Name"`,
			":4:11: sluice.factor: -1",
			":6:31: tenants[0].weight: -2",
			":6:19: tenants[0].rate: -1",
			":7:43: tenants[1].end: 20s",
			":7:34: tenants[1].max_tokens: -5",
		}, 6},
		{"empty.yaml", []string{"empty scenario"}, 1},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		seen[tc.file] = true
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "bad", tc.file)
			_, err := LoadScenario(path, "")
			if err == nil {
				t.Fatal("no error")
			}
			var pe *ProblemsError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v is not a *ProblemsError", err, err)
			}
			if pe.File != path {
				t.Errorf("file %q", pe.File)
			}
			for _, w := range tc.want {
				found := false
				for _, p := range pe.Lines() {
					if strings.Contains(p, w) {
						found = true
					}
				}
				if !found {
					t.Errorf("no problem contains %q; got:\n  %s", w, strings.Join(pe.Lines(), "\n  "))
				}
			}
			if len(pe.Problems) != tc.min {
				t.Errorf("want every problem reported once and no consequence of another: %d problems, got %d:\n  %s", tc.min, len(pe.Problems), strings.Join(pe.Lines(), "\n  "))
			}
		})
	}
	// Every fixture is covered by the table.
	entries, err := os.ReadDir(filepath.Join("testdata", "bad"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !seen[e.Name()] {
			t.Errorf("fixture %s has no test case", e.Name())
		}
	}
}
