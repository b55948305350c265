package loadtest

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/services/sim"
)

var update = flag.Bool("update", false, "rewrite golden files")

// syntheticReport builds a report from fixed records and simulator stats.
func syntheticReport(t *testing.T) *Report {
	t.Helper()
	sc, err := ParseScenario([]byte(`name: golden
duration: 10s
sim:
  providers:
    openai: {rpm: 600, tpm: 600000, window: 1s}
classes:
  batch: {deadline: 60s, max_wait: 50s}
tenants:
  - {id: a, class: interactive, rate: 1}
  - {id: b, class: interactive, rate: 1}
  - {id: bulk, class: batch, rate: 10, weight: 2}
`), "golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	q := EffectiveQuota(sc)
	tg := target{mode: "embedded", chatURL: "http://gw/v1/chat/completions", simURL: "http://sim", quota: &q, routeTag: sc.Model}
	var recs []record
	add := func(n int, r record) {
		for range n {
			recs = append(recs, r)
		}
	}
	ok := func(tenant int, class string, ms float64) record {
		return record{tenant: tenant, class: class, route: sc.Model, outcome: OutSuccess, status: 200, attempts: 1, upstream: 1,
			dispatched: true, queueMs: ms, latency: time.Duration(ms * float64(time.Millisecond)), doneAt: time.Second}
	}
	add(9, ok(0, "interactive", 100))
	add(1, ok(0, "interactive", 250))
	add(10, ok(1, "interactive", 120))
	add(60, ok(2, "batch", 4000))
	add(30, record{tenant: 2, class: "batch", route: sc.Model, outcome: OutFinalFailure, status: 429, attempts: 1, l429: 1, decision: "rejected_locally"})
	add(5, record{tenant: 2, class: "batch", route: sc.Model, outcome: OutTimeout, status: 429, attempts: 1, l429: 1, decision: "queued_then_expired"})
	add(2, record{tenant: 1, class: "interactive", route: sc.Model, outcome: OutFinalFailure, status: 429, attempts: 1, upstream: 1, p429: 1, dispatched: true})
	add(1, record{tenant: 0, class: "interactive", route: sc.Model, outcome: OutCancelled, attempts: 1})
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	before := &sim.Stats{Now: t0, Providers: map[string]*sim.ProviderStats{"openai": {}}}
	atEnd := &sim.Stats{Now: t0.Add(10 * time.Second), Providers: map[string]*sim.ProviderStats{"openai": {Requests: 82, OK: 80, RateLimited: 2,
		RateLimitedBy: map[string]int64{"requests": 2}, Tokens: sim.TokenStats{Input: 16000, Output: 6000, Total: 22000}}}}
	rep := buildReport(sc, tg, recs, before, before, atEnd, atEnd, nil, t0, t0.Add(12*time.Second), 10*time.Second, 2*time.Second, 40, 20000)
	rep.Conditions.Version, rep.Conditions.GoVersion = "test", "go-test"
	return rep
}

// jsonPaths lists every field path of a JSON document ("[]" for arrays).
func jsonPaths(prefix string, v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			jsonPaths(p, c, out)
		}
	case []any:
		for _, c := range x {
			jsonPaths(prefix+"[]", c, out)
		}
	}
}

func TestReportJSONFieldNames(t *testing.T) {
	rep := syntheticReport(t)
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	jsonPaths("", doc, set)
	for _, must := range []string{"provider_429", "goodput_ratio", "jain_fairness", "classes.interactive.queue_wait_ms.p99",
		"classes.batch.queue_wait_ms.p99", "tenants[].acceptance_rate", "tenants[].provider_429_ratio", "tenants[].local_429_ratio",
		"tenants[].retry_amplification", "tenants[].outcomes.final_failure", "tenants[].deadline_misses", "routes.gpt-4o-mini.queue_wait_ms.p95",
		"conditions.started_at", "conditions.ended_at", "conditions.version", "conditions.streaming", "conditions.timeouts.interactive.deadline_ms",
		"conditions.concurrency.max_in_flight", "conditions.provider_limits.rpm", "conditions.sluice_quota.requests_per_min"} {
		if !set[must] {
			t.Errorf("report JSON lacks %s", must)
		}
	}
	paths := make([]string, 0, len(set))
	for p := range set {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	got := strings.Join(paths, "\n") + "\n"
	golden := filepath.Join("testdata", "report_fields.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", "report.golden.json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("report field names changed (update README.md and run go test -update):\n%s", diffLines(string(want), got))
	}
	wantJSON, err := os.ReadFile(filepath.Join("testdata", "report.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(wantJSON), bytes.TrimSpace(b)) {
		t.Errorf("report JSON differs from testdata/report.golden.json (run go test -update and review)")
	}
}

func TestReportNumbers(t *testing.T) {
	rep := syntheticReport(t)
	if rep.Provider429 != 2 || rep.Provider429Source != "simulator" || rep.Local429 != 35 {
		t.Errorf("429s: provider %d (%s) local %d", rep.Provider429, rep.Provider429Source, rep.Local429)
	}
	// 80 ok in 10 s against 600 RPM = 10/s.
	if rep.GoodputRatio != 0.8 || rep.Goodput.Binding != "requests" || rep.Goodput.SluiceRatio != ratio(8, 9) {
		t.Errorf("goodput %+v", rep.Goodput)
	}
	a := rep.Tenants[0]
	if a.Requests != 11 || a.Outcomes.Success != 10 || a.Outcomes.Cancelled != 1 || a.AcceptanceRate != ratio(10, 11) {
		t.Errorf("tenant a: %+v", a.Group)
	}
	if p := rep.Classes["interactive"].QueueWaitMs; p.P50 != 120 || p.P99 != 250 || p.N != 20 {
		t.Errorf("interactive queue wait %+v", p)
	}
	bulk := rep.Tenants[2]
	if bulk.DeadlineMisses != 5 || bulk.Local429 != 35 || bulk.Local429Ratio != ratio(35, 95) || bulk.GatewayDecisions["rejected_locally"] != 30 {
		t.Errorf("bulk: %+v", bulk.Group)
	}
	b := rep.Tenants[1]
	if b.Provider429 != 2 || b.Provider429Ratio != ratio(2, 12) || b.RetryAmplification != 1 {
		t.Errorf("tenant b: %+v", b.Group)
	}
	// Equal-weight group {a, b}: a got all it asked (x = 1), b 10 of its 12
	// (x = 1/1.2) while the weight-2 bulk tenant took the rest → 0.992.
	if rep.JainFairness == nil || *rep.JainFairness != 0.992 {
		t.Errorf("jain %v (%+v)", rep.JainFairness, rep.Fairness)
	}
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"provider_429 2", "goodput_ratio 0.800", "jain_fairness 0.992", "tenant bulk", "class interactive"} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("text report lacks %q:\n%s", w, buf.String())
		}
	}
}

func diffLines(want, got string) string {
	w := map[string]bool{}
	for _, l := range strings.Split(want, "\n") {
		w[l] = true
	}
	g := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		g[l] = true
	}
	var sb strings.Builder
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			sb.WriteString("+ " + l + "\n")
		}
	}
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			sb.WriteString("- " + l + "\n")
		}
	}
	return sb.String()
}

// TestProviderCountsSumEveryDialect: a fallback's 429s (OpenAI → Azure in
// a hand-written config) are provider 429s too, so the headline sums every
// provider the simulator served, and the split shows where they were.
func TestProviderCountsSumEveryDialect(t *testing.T) {
	before := &sim.Stats{Providers: map[string]*sim.ProviderStats{"openai": {Requests: 5, OK: 5}}}
	after := &sim.Stats{Providers: map[string]*sim.ProviderStats{
		"openai": {Requests: 65, OK: 65},
		"azure":  {Requests: 12, OK: 8, RateLimited: 4, Cancelled: 1, RateLimitedBy: map[string]int64{"requests": 4}},
	}}
	tests := []struct {
		provider       string
		requests, n429 int64
	}{
		{"openai", 60, 0},
		{"azure", 12, 4},
		{allProviders, 72, 4},
	}
	for _, tc := range tests {
		d := statsDelta(before, after, tc.provider)
		if d.Requests != tc.requests || d.RateLimited != tc.n429 {
			t.Errorf("%q: %d requests, %d 429s; want %d, %d", tc.provider, d.Requests, d.RateLimited, tc.requests, tc.n429)
		}
	}
	if d := statsDelta(before, after, allProviders); d.Cancelled != 1 || d.RateLimitedBy["requests"] != 4 {
		t.Errorf("totals: %+v", d)
	}
	if split := perProvider(before, after); len(split) != 2 || split["azure"].RateLimited != 4 {
		t.Errorf("split: %+v", split)
	}
	one := &sim.Stats{Providers: map[string]*sim.ProviderStats{"openai": {Requests: 9}}}
	if split := perProvider(before, one); split != nil {
		t.Errorf("one provider: split %+v, want none", split)
	}
}
