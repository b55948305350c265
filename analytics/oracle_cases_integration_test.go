//go:build integration

package analytics

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/analytics/synth"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// caseLog builds a hand-made event log the way the gateway and the ledger
// write it (admission/lifecycle, ledger/feedback.go): one scope, one
// tenant bucket per case, so every case has its own stranded_quota row.
type caseLog struct {
	recs []synth.Record
	n    int
}

const caseScope = "openai:cases"

// splitScope is a hot deployment split over two ledger partitions: its
// ConfigChanged names it with partitions 2, its events the sub-scopes
// splitScope#0 and splitScope#1 (ledger.SubScope).
const splitScope = "openai:hot"

// caseT0 is the log time of the cases' first event (a Monday, inside
// fixtureRange).
var caseT0 = int64(synth.DefaultStartMs + 3600_000)

func (c *caseLog) add(e *schemas.Event, logMs int64) {
	c.n++
	e.V = schemas.Version
	e.ID = fmt.Sprintf("0190c0de-0000-7000-8000-%012x", c.n)
	e.ProducedAtMs = logMs
	b, err := schemas.Encode(e)
	if err != nil {
		panic(err)
	}
	c.recs = append(c.recs, synth.Record{Partition: 0, LogTimeMs: logMs, Value: b, Event: e})
}

// req is one logical request of a case: tenant = the case's name.
type req struct {
	c              *caseLog
	id, tenant     string
	estIn, estOut  int64
	attempt        int32
	path           []schemas.PathLevel
	streaming      bool
	promptFamilyID string
	// clientRetries and idemKey: the SDK's X-Stainless-Retry-Count and
	// the caller's idempotency key on its ReserveRequested.
	clientRetries int32
	idemKey       string
	// scope is the ledger scope that decided it ("": caseScope).
	scope string
}

func (c *caseLog) request(id, tenant string, estIn, estOut int64) *req {
	return &req{c: c, id: id, tenant: tenant, estIn: estIn, estOut: estOut, attempt: 1,
		path: []schemas.PathLevel{{Level: "org", ID: "o1"}, {Level: "tenant", ID: tenant}}, promptFamilyID: "pf-" + tenant}
}

func (r *req) env(typ schemas.Type) *schemas.Event {
	scope := caseScope
	if r.scope != "" {
		scope = r.scope
	}
	return &schemas.Event{Type: typ, RequestID: r.id, Attempt: r.attempt, Node: "gw-1", Scope: scope,
		Tenant: r.tenant, KeyID: "k-" + r.tenant, Route: "route-" + r.tenant, Class: "interactive"}
}

func (r *req) reserve(ms int64) *req {
	e := r.env(schemas.TypeReserveRequested)
	e.ReserveRequested = &schemas.ReserveRequested{Path: r.path, InputTokens: r.estIn, OutputTokens: r.estOut,
		Streaming: r.streaming, MaxWaitMs: 1000, DeadlineMs: 30000, MaxAttempts: 3, PromptFamily: r.promptFamilyID,
		ClientRetryCount: r.clientRetries, IdempotencyKey: r.idemKey}
	r.c.add(e, ms)
	return r
}

// decision: ledgerMs is Decision.log_time_ms, appendMs the record's time
// on sluice.decisions (later, under load).
func (r *req) decision(st schemas.Status, reason schemas.Reason, ledgerMs, appendMs int64) *req {
	e := r.env(schemas.TypeDecision)
	e.Node = "ledger-1"
	gd := schemas.GDAdmitted
	d := &schemas.Decision{Status: st, Reason: reason, GatewayDecision: gd, LogTimeMs: ledgerMs, HoldTTLMs: 60000}
	if st == schemas.StatusQueued || st == schemas.StatusDenied {
		d.LimitPath, d.LimitDimension = "org:o1/tenant:"+r.tenant, schemas.DimInputTokens
		d.GatewayDecision = schemas.GDQueued
		if st == schemas.StatusDenied {
			d.GatewayDecision = schemas.GDRejectedLocally
		}
	}
	e.Decision = d
	r.c.add(e, appendMs)
	return r
}

func (r *req) dispatched(ms int64) *req {
	e := r.env(schemas.TypeDispatched)
	e.Dispatched = &schemas.Dispatched{Provider: "openai", Deployment: "d1", Model: "gpt-4o", QueueMs: 5}
	r.c.add(e, ms)
	return r
}

// rejectedRetried: the provider's 429, then the gateway's RetryRequested
// (no new ReserveRequested: admission/lifecycle upstreamError).
func (r *req) rejectedRetried(ms int64, withRejection bool) *req {
	if withRejection {
		e := r.env(schemas.TypeProviderRejected)
		e.ProviderRejected = &schemas.ProviderRejected{HTTPStatus: 429, Kind: "rate_limited", Limiter: schemas.DimRequests, RetryAfterMs: 1000}
		r.c.add(e, ms)
	}
	prev := r.attempt
	r.attempt++
	e := r.env(schemas.TypeRetryRequested)
	e.RetryRequested = &schemas.RetryRequested{PreviousAttempt: prev, Reason: "retryable_capacity", RetryAfterMs: 1000}
	r.c.add(e, ms)
	return r
}

// sdkRetry: the same client's retry of it, a new request id with the
// SDK's retry count (and the idempotency key, if any, unchanged).
func (r *req) sdkRetry(id string, count int32) *req {
	n := r.c.request(id, r.tenant, r.estIn, r.estOut)
	n.clientRetries, n.idemKey = count, r.idemKey
	return n
}

// rejected: the provider's 503, not retried by the gateway.
func (r *req) rejected(ms int64) *req {
	e := r.env(schemas.TypeProviderRejected)
	e.ProviderRejected = &schemas.ProviderRejected{HTTPStatus: 503, Kind: "overloaded"}
	r.c.add(e, ms)
	return r
}

func (r *req) reconciled(ms, in, out int64) *req {
	e := r.env(schemas.TypeReconciled)
	e.Reconciled = &schemas.Reconciled{InputTokens: in, OutputTokens: out, HTTPStatus: 200, TotalMs: 100,
		EstimatedInputTokens: r.estIn, EstimatedOutputTokens: r.estOut}
	r.c.add(e, ms)
	return r
}

func (r *req) released(ms int64, reason schemas.Reason, in, out int64) *req {
	e := r.env(schemas.TypeReleased)
	e.Released = &schemas.Released{Reason: reason, InputTokens: in, OutputTokens: out}
	r.c.add(e, ms)
	return r
}

func (r *req) outcome(ms int64, st schemas.OutcomeStatus) *req {
	e := r.env(schemas.TypeOutcome)
	e.Outcome = &schemas.Outcome{Status: st, HTTPStatus: 200, Attempts: r.attempt, TotalMs: 100, GatewayDecision: schemas.GDAdmitted}
	r.c.add(e, ms)
	return r
}

// oracleCases is one hand-made log with a tenant (and a tenant bucket)
// per case of issue 22: each is what the gateway and the ledger really
// write, and each broke a figure the report gives.
func oracleCases() []synth.Record {
	c := &caseLog{}
	t := caseT0
	var buckets []map[string]any
	bucket := func(tenant string) {
		buckets = append(buckets, map[string]any{"level": "tenant", "id": tenant, "dimension": "input_tokens",
			"capacity": 60000, "period_ms": 60000, "window_ms": 1000},
			map[string]any{"level": "tenant", "id": tenant, "dimension": "output_tokens", "capacity": 600000, "period_ms": 60000, "window_ms": 10000})
	}
	for _, tn := range []string{"m1", "m2", "m3", "m4", "m5", "partial", "late", "sdk", "idem"} {
		bucket(tn)
	}
	caseBuckets := buckets
	buckets = nil
	bucket("split")
	doc, _ := json.Marshal(map[string]any{"scopes": []any{map[string]any{"name": caseScope, "buckets": caseBuckets},
		map[string]any{"name": splitScope, "partitions": 2, "buckets": buckets}}})
	c.add(&schemas.Event{Type: schemas.TypeConfigChanged, Scope: caseScope,
		ConfigChanged: &schemas.ConfigChanged{ConfigVersion: "v1", Source: "cases", Ledger: doc}}, t)

	// M1: a provider 429, retried without a ReserveRequested; attempt 2
	// keeps attempt 1's path and estimates (ledger/feedback.go retry).
	for i := range 4 {
		t += 10_000
		r := c.request(fmt.Sprintf("m1-%d", i), "m1", 1000, 200).reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t + 2)
		r.rejectedRetried(t+100, true).decision(schemas.StatusQueued, "capacity", t+101, t+101).
			decision(schemas.StatusGranted, "", t+1200, t+1200).dispatched(t+1201).reconciled(t+1500, 1000, 200).outcome(t+1501, schemas.OutcomeSuccess)
	}
	// M2: the ledger ends a hold at a RetryRequested (and at a
	// ProviderRejected) of the attempt it holds for.
	t += 10_000
	c.request("m2-a", "m2", 1000, 500).reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t+2).
		rejectedRetried(t+400, false).decision(schemas.StatusDenied, "retry_budget_exhausted", t+401, t+401).outcome(t+402, schemas.OutcomeFailure)
	t += 10_000
	c.request("m2-b", "m2", 1000, 500).reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t+2).
		rejectedRetried(t+300, true).decision(schemas.StatusGranted, "", t+2000, t+2000).dispatched(t+2001).
		reconciled(t+2500, 900, 400).outcome(t+2501, schemas.OutcomeSuccess)
	// M3: a grant its gateway abandoned (killed): the ledger expires the
	// hold after its TTL (hold_ttl_abandoned) or on node loss.
	t += 10_000
	c.request("m3-a", "m3", 2000, 1000).reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).
		decision(schemas.StatusHoldExpired, schemas.ReasonHoldAbandoned, t+60_001, t+60_002)
	t += 10_000
	c.request("m3-b", "m3", 3000, 500).reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t+2).
		decision(schemas.StatusHoldExpired, schemas.ReasonNodeLost, t+15_000, t+15_010)
	// M4: the grant's record reached sluice.decisions 700 ms after the
	// ledger charged the bucket.
	t += 10_000
	c.request("m4", "m4", 1000, 1000).reserve(t).decision(schemas.StatusGranted, "", t+1, t+701).dispatched(t+702).
		reconciled(t+1001, 500, 500).outcome(t+1002, schemas.OutcomeSuccess)
	// M5: retries refused before they went upstream again: one logical
	// request each, one upstream attempt each.
	for i := range 3 {
		t += 10_000
		c.request(fmt.Sprintf("m5-%d", i), "m5", 100, 100).reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t+2).
			rejectedRetried(t+50, true).decision(schemas.StatusDenied, "retry_budget_exhausted", t+51, t+51).outcome(t+52, schemas.OutcomeFailure)
	}
	// A release with partial usage strands only what it did not use.
	t += 10_000
	c.request("partial", "partial", 1000, 500).reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t+2).
		released(t+1001, schemas.ReasonClientDisconnect, 1000, 100).outcome(t+1002, schemas.OutcomeCancelled)
	// A late grant: granted, released unused by the gateway (the grant
	// reached it too late to dispatch).
	t += 10_000
	c.request("late", "late", 800, 400).reserve(t).decision(schemas.StatusGranted, "", t+1, t+3000).
		released(t+3001, schemas.ReasonLateGrant, 0, 0).outcome(t+3002, schemas.OutcomeTimeout)
	// Item 5, SDK retries: sdk-a went upstream, a 429 retried by the
	// gateway and a 503 it gave up on; the SDK sent sdk-b (retry count 1,
	// a new request id) 3 s later. One logical request, 3 upstream
	// attempts. sdk-r is a first try; sdk-late, a retry 61 s after it,
	// is outside the 60 s window and counts as a logical request of its own.
	t += 10_000
	a := c.request("sdk-a", "sdk", 100, 100).reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t + 2)
	a.rejectedRetried(t+50, true).decision(schemas.StatusGranted, "", t+1100, t+1100).dispatched(t+1101).
		rejected(t+1200).outcome(t+1201, schemas.OutcomeFailure)
	a.sdkRetry("sdk-b", 1).reserve(t+3000).decision(schemas.StatusGranted, "", t+3001, t+3001).dispatched(t+3002).
		reconciled(t+3100, 100, 100).outcome(t+3101, schemas.OutcomeSuccess)
	t += 10_000
	root := c.request("sdk-r", "sdk", 100, 100).reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t+2).
		reconciled(t+100, 100, 100).outcome(t+101, schemas.OutcomeSuccess)
	root.sdkRetry("sdk-late", 1).reserve(t+61_000).decision(schemas.StatusGranted, "", t+61_001, t+61_001).dispatched(t+61_002).
		reconciled(t+61_100, 100, 100).outcome(t+61_101, schemas.OutcomeSuccess)
	// Item 5, client duplicates: idem-a and idem-b carry the same
	// idempotency key with retry count 0 (the client sent it twice), both
	// went upstream; idem-c is the SDK's retry of it (same key, count 1),
	// refused by the ledger. One logical request, 2 upstream attempts.
	t += 70_000
	ia := c.request("idem-a", "idem", 100, 100)
	ia.idemKey = "key-1"
	ia.reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t+2).reconciled(t+100, 100, 100).outcome(t+101, schemas.OutcomeSuccess)
	ib := ia.sdkRetry("idem-b", 0)
	ib.reserve(t+500).decision(schemas.StatusGranted, "", t+501, t+501).dispatched(t+502).reconciled(t+600, 100, 100).outcome(t+601, schemas.OutcomeSuccess)
	ia.sdkRetry("idem-c", 1).reserve(t+1500).decision(schemas.StatusDenied, "capacity", t+1501, t+1501).outcome(t+1502, schemas.OutcomeFailure)
	// A split scope: tenant split's keys land in both sub-scopes. split-0
	// (sub-scope 0) had a 429, retried; split-1 (sub-scope 1) was
	// released with partial use. The report shows one deployment.
	t += 10_000
	s0 := c.request("split-0", "split", 1000, 500)
	s0.scope = ledger.SubScope(splitScope, 0)
	s0.reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t+2).
		rejectedRetried(t+100, true).decision(schemas.StatusGranted, "", t+1100, t+1100).dispatched(t+1101).
		reconciled(t+1400, 1000, 200).outcome(t+1401, schemas.OutcomeSuccess)
	t += 10_000
	s1 := c.request("split-1", "split", 1000, 500)
	s1.scope = ledger.SubScope(splitScope, 1)
	s1.reserve(t).decision(schemas.StatusGranted, "", t+1, t+1).dispatched(t+2).
		released(t+1001, schemas.ReasonClientDisconnect, 400, 100).outcome(t+1002, schemas.OutcomeCancelled)
	return c.recs
}

// TestIntegrationOracleCases: issue 22's cases (M1–M5, the definitions),
// through the real Kafka and sink into ClickHouse 18.16 and on chDB; the
// oracle's figures and, for each case, the figure worked out by hand.
func TestIntegrationOracleCases(t *testing.T) {
	recs := oracleCases()
	conn, db := sinkFixture(t, recs)
	rng := fixtureRange()
	got := runAll(t, conn, db, rng)
	checkOracle(t, recs, got, rng, false)

	rangeMs := float64(rng.To.Unix()-rng.From.Unix()) * 1000
	type want struct {
		name, query string
		keys        []string
		key, col    string
		value       float64
	}
	for _, w := range []want{
		// M1: 4 retried upstream attempts of 1000 + 200 estimated tokens;
		// every estimate exact, so no estimation error.
		{"M1 retried tokens", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|m1|interactive", "retried_tokens", 4 * 1200},
		{"M1 amplification", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|m1|interactive", "amplification", 2},
		{"M1 input bias", "estimation_error", []string{"by", "key"}, "tenant|m1", "in_bias", 0},
		{"M1 route ratio", "route_calibration", []string{"route"}, "route-m1", "in_ratio", 1},
		// M2: m2-a held 1000 input for 399 ms until its RetryRequested;
		// m2-b 1000 for 299 ms until its ProviderRejected, then 100 for
		// 500 ms after its retry's grant.
		{"M2 stranded input", "stranded_quota", []string{"scope", "bucket", "dimension"}, caseScope + "|tenant:m2|input_tokens", "stranded_token_ms", 1000*399 + 1000*299 + 100*500},
		// M3: abandoned holds end at their hold_expired decision.
		{"M3 stranded input", "stranded_quota", []string{"scope", "bucket", "dimension"}, caseScope + "|tenant:m3|input_tokens", "stranded_token_ms", 2000*60_000 + 3000*14_999},
		// M4: the hold began when the ledger charged the bucket.
		{"M4 stranded input", "stranded_quota", []string{"scope", "bucket", "dimension"}, caseScope + "|tenant:m4|input_tokens", "stranded_token_ms", 500 * 1000},
		// pct_of_capacity: the bucket holds 60000 × 1000 ÷ 60000 = 1000 tokens.
		{"M4 pct", "stranded_quota", []string{"scope", "bucket", "dimension"}, caseScope + "|tenant:m4|input_tokens", "pct_of_capacity", 100 * 500 * 1000 / (1000 * rangeMs)},
		// M5: 3 requests, 3 upstream attempts.
		{"M5 requests", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|m5|interactive", "requests", 3},
		{"M5 amplification", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|m5|interactive", "amplification", 1},
		// Item 5: sdk-a/sdk-b are one logical request (3 upstream
		// attempts: a gateway retry, an SDK retry); sdk-r and sdk-late
		// two (outside the window).
		{"SDK logical", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|sdk|interactive", "logical_requests", 3},
		{"SDK requests", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|sdk|interactive", "requests", 4},
		{"SDK retries", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|sdk|interactive", "sdk_retries", 1},
		{"SDK gateway retries", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|sdk|interactive", "gateway_retries", 1},
		{"SDK per logical", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|sdk|interactive", "attempts_per_logical", 5.0 / 3},
		{"SDK amplification", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|sdk|interactive", "amplification", 5.0 / 4},
		// Item 5: idem-a, idem-b (a duplicate) and idem-c (an SDK retry
		// the ledger refused) are one logical request, 2 upstream attempts.
		{"idem logical", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|idem|interactive", "logical_requests", 1},
		{"idem duplicates", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|idem|interactive", "client_duplicates", 1},
		{"idem SDK retries", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|idem|interactive", "sdk_retries", 1},
		{"idem per logical", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|idem|interactive", "attempts_per_logical", 2},
		{"idem amplification", "retry_amplification", []string{"provider", "tenant", "class"}, "openai|idem|interactive", "amplification", 1},
		// Partial release: 400 output tokens unused for 1000 ms; input all used.
		{"partial output", "stranded_quota", []string{"scope", "bucket", "dimension"}, caseScope + "|tenant:partial|output_tokens", "stranded_token_ms", 400 * 1000},
		{"partial input", "stranded_quota", []string{"scope", "bucket", "dimension"}, caseScope + "|tenant:partial|input_tokens", "stranded_token_ms", 0},
		{"late grant broken out", "stranded_by_owner", []string{"scope", "tenant", "route", "class"}, caseScope + "|late|route-late|interactive", "late_grant_token_s", (800 + 400) * 3},
		{"hold_expired broken out", "stranded_by_owner", []string{"scope", "tenant", "route", "class"}, caseScope + "|m3|route-m3|interactive", "hold_expired_token_s", (2000+1000)*60 + (3000+500)*14.999},
		{"retried holds broken out", "stranded_by_owner", []string{"scope", "tenant", "route", "class"}, caseScope + "|m2|route-m2|interactive", "retried", 2},
		{"late grant", "stranded_quota", []string{"scope", "bucket", "dimension"}, caseScope + "|tenant:late|input_tokens", "stranded_token_ms", 800 * 3000},
		// The split scope, folded: split-0's first attempt held 1000 input
		// for 99 ms until its retry, its second used all it held;
		// split-1 held 600 unused input for 1000 ms. Both sub-scopes'
		// attempts join the bucket the split scope's config states.
		{"split stranded input", "stranded_quota", []string{"scope", "bucket", "dimension"}, splitScope + "|tenant:split|input_tokens", "stranded_token_ms", 1000*99 + 600*1000},
		{"split stranded output", "stranded_quota", []string{"scope", "bucket", "dimension"}, splitScope + "|tenant:split|output_tokens", "stranded_token_ms", 500*99 + 300*300 + 400*1000},
		{"split upstream attempts", "scope_429", []string{"scope"}, splitScope, "upstream_attempts", 3},
		{"split 429s", "scope_429", []string{"scope"}, splitScope, "provider_429", 1},
		{"split grants", "stranded_by_owner", []string{"scope", "tenant", "route", "class"}, splitScope + "|split|route-split|interactive", "grants", 3},
	} {
		t.Run(w.name, func(t *testing.T) {
			res := got[w.query]
			row := rowsBy(t, res, w.keys...)[w.key]
			if row == nil {
				t.Fatalf("%s: no row %s: %v", w.query, w.key, res.Rows)
			}
			if g := num(t, res, row, w.col); fmt.Sprintf("%.9g", g) != fmt.Sprintf("%.9g", w.value) {
				t.Errorf("%s %s %s = %v, want %v", w.query, w.key, w.col, g, w.value)
			}
		})
	}
	t.Run("M5 no undispatched row", func(t *testing.T) {
		res := got["retry_amplification"]
		for _, row := range res.Rows {
			if row[res.Col("provider")] == "" {
				t.Errorf("a row for attempts that never went upstream: %v", row)
			}
		}
	})
	t.Run("no sub-scope rows", func(t *testing.T) {
		for _, name := range []string{"scope_429", "stranded_quota", "stranded_by_owner", "daily_headroom", "shadow_limits"} {
			res := got[name]
			for _, row := range res.Rows {
				if s := row[res.Col("scope")].(string); strings.Contains(s, ledger.SplitSep) {
					t.Errorf("%s: a row of sub-scope %s: %v", name, s, row)
				}
			}
		}
	})
	t.Run("chdb_26", func(t *testing.T) { compareWithChDBRange(t, conn, db, got, rng, false) })
}
