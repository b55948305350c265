package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/analytics/whatif"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

func TestParseWhen(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	for in, want := range map[string]int64{
		"":                     0,
		"1700000000000":        1_700_000_000_000,
		"2026-12-01T00:00:00Z": time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli(),
		"1h":                   1_800_000_000_000 - 3_600_000,
	} {
		if got, err := parseWhen(in, now); err != nil || got != want {
			t.Errorf("parseWhen(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := parseWhen("-1h", now); err == nil {
		t.Error("a negative duration was accepted")
	}
}

// TestPrintWhatIf: the table puts both sides of every figure on one line.
func TestPrintWhatIf(t *testing.T) {
	rec, wi := whatif.NewTally(), whatif.NewTally()
	g := schemas.Decision{Status: schemas.StatusGranted, GatewayDecision: schemas.GDAdmitted}
	d := schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonWaitExceedsMax}
	rec.Decision("a", 1, "acme", "interactive", &g)
	rec.Decision("b", 1, "globex", "interactive", &g)
	wi.Decision("a", 1, "acme", "interactive", &g)
	wi.Decision("b", 1, "globex", "interactive", &d)
	rep := &ledgerd.WhatIfReport{Partitions: 1, Inputs: 2, Recorded: rec.Summary(), WhatIf: wi.Summary(), Differences: 1,
		First: []*whatif.Difference{{Partition: 0, Index: 1, Recorded: "b/1 granted", WhatIf: "b/1 denied"}}}
	var out bytes.Buffer
	printWhatIf(&out, rep)
	for _, want := range []string{"recorded  what-if", "grants  2  1", "wait_exceeds_max  0  1", "share globex  50.0%  0.0%",
		"Jain's index (served)  1.000  0.500", "1 decisions differ"} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), "  "), strings.Join(strings.Fields(want), "  ")) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPrintExplanation: the timeline marks the limiting bucket and shows
// the queue.
func TestPrintExplanation(t *testing.T) {
	cfg, err := ledger.ParseConfig([]byte(`{"scopes":[{"name":"s","buckets":[{"level":"scope","id":"*","dimension":"concurrency","capacity":1}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New(0, cfg)
	x := ledger.NewExplainer(l, "b")
	res := func(id, tenant string) *schemas.Event {
		return &schemas.Event{V: 1, Type: schemas.TypeReserveRequested, ID: "e" + id, RequestID: id, Attempt: 1, Scope: "s", Tenant: tenant, KeyID: "k-" + tenant, Class: "agent",
			ReserveRequested: &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "tenant", ID: tenant}, {Level: "key", ID: "k-" + tenant}}, InputTokens: 1, OutputTokens: 1}}
	}
	x.Apply(1000, 0, res("a", "acme"), nil)
	x.Apply(1001, 1, res("b", "globex"), nil)
	var out bytes.Buffer
	printExplanation(&out, x.Explanation())
	for _, want := range []string{"request b — scope s, tenant globex", "outcome: queued (capacity); limited by scope:s concurrency",
		"* scope:s", "queue: position 1 of 1; 0 ahead"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPrintExplanationShowsFallbackHops: a request that fell back to
// another scope lists both attempts, the fallback named, and its steps
// say their partition and scope.
func TestPrintExplanationShowsFallbackHops(t *testing.T) {
	x := &ledger.Explanation{RequestID: "r", Scope: "sim-openai", Tenant: "t", KeyID: "k", Class: "batch", Partition: 1, Outcome: "granted",
		Hops: []ledger.ExplainHop{
			{Attempt: 1, Input: schemas.TypeReserveRequested, Scope: "sim-openai", Partition: 1, Outcome: "denied (queue_full)"},
			{Attempt: 2, Input: schemas.TypeReserveRequested, Scope: "sim-azure", Partition: 3, Fallback: true, Outcome: "granted"}},
		Steps: []ledger.ExplainStep{
			{Offset: 5, Input: schemas.TypeReserveRequested, Own: true, Attempt: 1, Scope: "sim-openai", Partition: 1},
			{Offset: 9, Input: schemas.TypeReserveRequested, Own: true, Attempt: 2, Scope: "sim-azure", Partition: 3}}}
	var out bytes.Buffer
	printExplanation(&out, x)
	for _, want := range []string{"1. reserved in sim-openai (partition 1): denied (queue_full)", "2. fell back to sim-azure (partition 3): granted",
		"partition 3 offset 9  ReserveRequested (its own, scope sim-azure, attempt 2)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explanation lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPrintExplanationNamesASplitScope: a request decided in a split
// scope's sub-scope is shown with the provider scope it belongs to, in
// the header and in its attempts, for a reader who knows only the
// configured scope.
func TestPrintExplanationNamesASplitScope(t *testing.T) {
	x := &ledger.Explanation{RequestID: "r", Scope: "sim-openai#1", Tenant: "t", KeyID: "k", Class: "batch", Partition: 2, Outcome: "granted",
		Hops: []ledger.ExplainHop{
			{Attempt: 1, Input: schemas.TypeReserveRequested, Scope: "sim-openai#1", Partition: 2, Outcome: "denied (queue_full)"},
			{Attempt: 2, Input: schemas.TypeReserveRequested, Scope: "sim-azure", Partition: 3, Fallback: true, Outcome: "granted"}}}
	var out bytes.Buffer
	printExplanation(&out, x)
	for _, want := range []string{"request r — scope sim-openai#1 (sub-scope 1 of split scope sim-openai), tenant t",
		"1. reserved in sim-openai#1 (sub-scope 1 of split scope sim-openai) (partition 2)", "2. fell back to sim-azure (partition 3)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("explanation lacks %q:\n%s", want, out.String())
		}
	}
}
