package report

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
)

func TestApplyPatchToExampleConfig(t *testing.T) {
	doc, err := os.ReadFile("../../deploy/examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := Patch{Source: PatchSource,
		Routes:  []RoutePatch{{Route: "gpt-4o-mini", P95OutputTokens: 175, InputCorrection: 0.953}, {Route: "no-such-route", P95OutputTokens: 9}},
		Buckets: []BucketPatch{{Scope: "openai:org-example/proj-main", Dimension: "requests", CapacityFactor: 0.916}},
		Classes: []ClassPatch{{Class: "agent", MaxWaitFactor: 1.186}}}
	b, _ := json.Marshal(p)
	if _, err := ParsePatch(b); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"OPENAI_UPSTREAM_KEY", "AZURE_OPENAI_KEY", "ANTHROPIC_UPSTREAM_KEY", "GEMINI_API_KEY"} {
		t.Setenv(k, "test")
	}
	next, changes, skipped, err := ApplyPatch(doc, p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, c.String())
	}
	want := []string{
		"routes[gpt-4o-mini].p95_output_tokens: 900 → 175",
		"routes[gpt-4o-mini].input_correction: (unset) → 0.953",
		"ledger.scopes[openai:org-example/proj-main].buckets[deployment:openai-main requests].capacity: 400 → 366",
		"ledger.scopes[openai:org-example/proj-main].buckets[tenant:* requests].capacity: 100 → 92",
		"ledger.classes[agent].max_wait_ms: 10000 → 11860",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "no-such-route") {
		t.Errorf("skipped: %q", skipped)
	}
	if _, err := config.Load(bytes.NewReader(next)); err != nil {
		t.Errorf("patched config does not load: %v", err)
	}
	if !bytes.Contains(next, []byte("# from the calibration report")) {
		t.Error("comments lost")
	}
	// Applying again changes nothing more than the bucket factors compound.
	_, again, _, _ := ApplyPatch(next, Patch{Source: PatchSource, Routes: []RoutePatch{{Route: "gpt-4o-mini", P95OutputTokens: 175}}})
	if len(again) != 0 {
		t.Errorf("second apply changed %v", again)
	}
	// A second correction compounds onto the first, within the bounds.
	_, again, _, _ = ApplyPatch(next, Patch{Source: PatchSource, Routes: []RoutePatch{{Route: "gpt-4o-mini", InputCorrection: 0.9}}})
	if len(again) != 1 || again[0].String() != "routes[gpt-4o-mini].input_correction: 0.953 → 0.858" {
		t.Errorf("second correction: %v", again)
	}
	cfg, err := config.Load(bytes.NewReader(next))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Route("gpt-4o-mini"); r == nil || r.InputCorrection != 0.953 {
		t.Errorf("the gateway config does not carry the correction: %+v", r)
	}
}

// TestApplyPatchStopsMaxWaitAtTheDeadline: batch waits 540000 ms of a
// 600000 ms deadline; +11.3 % would be 601020, which the configuration
// refuses (a queued request would outwait its client), so the raise stops
// at the deadline and says so (a synth week with SDK retries proposed it).
func TestApplyPatchStopsMaxWaitAtTheDeadline(t *testing.T) {
	doc, err := os.ReadFile("../../deploy/examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"OPENAI_UPSTREAM_KEY", "AZURE_OPENAI_KEY", "ANTHROPIC_UPSTREAM_KEY", "GEMINI_API_KEY"} {
		t.Setenv(k, "test")
	}
	for _, c := range []struct {
		factor  float64
		want    string
		capNote bool
	}{
		{1.05, "ledger.classes[batch].max_wait_ms: 540000 → 567000", false},
		{1.113, "ledger.classes[batch].max_wait_ms: 540000 → 600000", true},
	} {
		next, changes, skipped, err := ApplyPatch(doc, Patch{Source: PatchSource, Classes: []ClassPatch{{Class: "batch", MaxWaitFactor: c.factor}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(changes) != 1 || changes[0].String() != c.want {
			t.Errorf("factor %v: changes %v, want %s", c.factor, changes, c.want)
		}
		if noted := len(skipped) == 1 && strings.Contains(skipped[0], "deadline_ms 600000"); noted != c.capNote {
			t.Errorf("factor %v: skipped %q", c.factor, skipped)
		}
		if _, err := config.Load(bytes.NewReader(next)); err != nil {
			t.Errorf("factor %v: patched config does not load: %v", c.factor, err)
		}
	}
}

func TestParsePatchListsEveryProblem(t *testing.T) {
	_, err := ParsePatch([]byte(`{"source":"manual","routes":[{"route":"","p95_output_tokens":-1}],"buckets":[{"scope":"s","dimension":"requests","capacity_factor":5}],"classes":[{"class":"x","max_wait_factor":0}]}`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{"source is \"manual\"", "routes[0]", "buckets[0]", "classes[0]"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

// TestApplyLedgerPatchToAdminDocument: the admin state's ledger document
// (JSON) takes the same bucket and class changes as the file's ledger
// section, and ignores routes.
func TestApplyLedgerPatchToAdminDocument(t *testing.T) {
	for _, k := range []string{"OPENAI_UPSTREAM_KEY", "AZURE_OPENAI_KEY", "ANTHROPIC_UPSTREAM_KEY", "GEMINI_API_KEY"} {
		t.Setenv(k, "test")
	}
	doc, err := os.ReadFile("../../deploy/examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	p := Patch{Source: PatchSource,
		Routes:  []RoutePatch{{Route: "gpt-4o-mini", P95OutputTokens: 175}},
		Buckets: []BucketPatch{{Scope: "openai:org-example/proj-main", Dimension: "requests", CapacityFactor: 0.916}, {Scope: "nowhere", Dimension: "requests", CapacityFactor: 1.1}},
		Classes: []ClassPatch{{Class: "agent", MaxWaitFactor: 1.186}}}
	next, changes, skipped, err := ApplyLedgerPatch(cfg.LedgerJSON(), p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, c.String())
	}
	want := []string{
		"ledger.scopes[openai:org-example/proj-main].buckets[deployment:openai-main requests].capacity: 400 → 366",
		"ledger.scopes[openai:org-example/proj-main].buckets[tenant:* requests].capacity: 100 → 92",
		"ledger.classes[agent].max_wait_ms: 10000 → 11860",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "nowhere") {
		t.Errorf("skipped: %q", skipped)
	}
	lc, err := ledger.ParseConfig(next)
	if err != nil {
		t.Fatalf("patched ledger document does not parse: %v\n%s", err, next)
	}
	// Everything else is as it was: the unpatched document round-trips to
	// the same ledger config.
	same, _, _, err := ApplyLedgerPatch(cfg.LedgerJSON(), Patch{Source: PatchSource})
	if err != nil {
		t.Fatal(err)
	}
	orig, err := ledger.ParseConfig(cfg.LedgerJSON())
	if err != nil {
		t.Fatal(err)
	}
	back, err := ledger.ParseConfig(same)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(orig, back) {
		t.Errorf("an empty patch changed the ledger document:\n%s\nwas\n%s", same, cfg.LedgerJSON())
	}
	if reflect.DeepEqual(orig, lc) {
		t.Error("the patch changed nothing in the parsed document")
	}
}
