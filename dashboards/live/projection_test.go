package live

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// clock is a manually advanced clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func env(t schemas.Type, tenant, key, req string) *schemas.Event {
	ev := eventid.New(t, 0)
	ev.RequestID, ev.Attempt = req, 1
	ev.Scope, ev.Tenant, ev.KeyID, ev.Class, ev.Route = "sim-openai", tenant, key, "interactive", "gpt-4o-mini"
	return ev
}

func reserve(tenant, key, req string) *schemas.Event {
	ev := env(schemas.TypeReserveRequested, tenant, key, req)
	ev.ReserveRequested = &schemas.ReserveRequested{InputTokens: 100, OutputTokens: 50}
	return ev
}

func decision(tenant, key, req string, d schemas.Decision) *schemas.Event {
	ev := env(schemas.TypeDecision, tenant, key, req)
	ev.Decision = &d
	return ev
}

func granted(tenant, key, req string) *schemas.Event {
	return decision(tenant, key, req, schemas.Decision{Status: schemas.StatusGranted, GatewayDecision: schemas.GDAdmitted})
}

func reconciled(tenant, key, req string, estIn, actIn, estOut, actOut int64) *schemas.Event {
	ev := env(schemas.TypeReconciled, tenant, key, req)
	ev.Reconciled = &schemas.Reconciled{InputTokens: actIn, OutputTokens: actOut, HTTPStatus: 200,
		EstimatedInputTokens: estIn, EstimatedOutputTokens: estOut}
	return ev
}

func rejected(tenant, key, req string, status int32) *schemas.Event {
	ev := env(schemas.TypeProviderRejected, tenant, key, req)
	ev.ProviderRejected = &schemas.ProviderRejected{HTTPStatus: status, Kind: "rate_limited", Message: "secret-ish provider text"}
	return ev
}

func released(tenant, key, req string) *schemas.Event {
	ev := env(schemas.TypeReleased, tenant, key, req)
	ev.Released = &schemas.Released{Reason: "client_disconnect"}
	return ev
}

func observedEv(tenant string, remaining int64) *schemas.Event {
	ev := env(schemas.TypeProviderObserved, tenant, "k", "r-obs")
	ev.ProviderObserved = &schemas.ProviderObserved{Deployment: "sim-openai", Observations: []schemas.Observation{
		{Dimension: schemas.DimRequests, Limit: 600, Remaining: remaining, ResetMs: 100},
	}}
	return ev
}

func tenantRow(t *testing.T, s Snapshot, tenant string) TenantRow {
	t.Helper()
	for _, r := range s.Tenants {
		if r.Tenant == tenant {
			return r
		}
	}
	t.Fatalf("tenant %q not in snapshot %+v", tenant, s.Tenants)
	return TenantRow{}
}

func TestProjectionCounters(t *testing.T) {
	clk := newClock()
	p := NewProjection(0, clk.Now)
	p.Apply(
		reserve("acme", "k1", "r1"), reserve("acme", "k1", "r2"), reserve("acme", "k1", "r3"),
		reserve("acme", "k1", "r4"), reserve("acme", "k1", "r5"),
		granted("acme", "k1", "r1"),
		granted("acme", "k1", "r2"),
		granted("acme", "k1", "r5"),
		decision("acme", "k1", "r3", schemas.Decision{Status: schemas.StatusQueued, GatewayDecision: schemas.GDQueued}),
		decision("acme", "k1", "r4", schemas.Decision{
			Status: schemas.StatusDenied, Reason: "capacity", LimitPath: "tenant:acme/key:k1",
			LimitDimension: schemas.DimInputTokens, Needed: 1200, Available: 300, RetryAfterMs: 2400,
			GatewayDecision: schemas.GDRejectedLocally, RetryClass: "retryable_capacity",
		}),
		decision("acme", "k1", "r3", schemas.Decision{Status: schemas.StatusExpired, Reason: "queue_deadline", GatewayDecision: schemas.GDQueuedThenExpired}),
		reconciled("acme", "k1", "r1", 100, 80, 50, 100),
		rejected("acme", "k1", "r2", 429),
		observedEv("acme", 42),
	)
	clk.Advance(300 * time.Millisecond)
	s := p.Snapshot()

	if s.View != "operator" || s.WindowS != 60 {
		t.Fatalf("view %q window %d", s.View, s.WindowS)
	}
	c := s.Totals
	want := map[string][2]int64{
		"received": {c.Received, 5}, "granted": {c.Granted, 3}, "queued": {c.Queued, 1},
		"denied": {c.Denied, 1}, "expired": {c.Expired, 1}, "reconciled": {c.Reconciled, 1},
		"provider_429": {c.Provider429, 1}, "provider_503": {c.Provider503, 0},
		"in_flight": {c.InFlight, 1}, // r5 only: r1 reconciled, r2 rejected
		"est_in":    {c.EstInputTokens, 100}, "act_in": {c.ActInputTokens, 80},
		"denied_input_tokens": {c.DeniedByDimension["input_tokens"], 1},
	}
	for name, g := range want {
		if g[0] != g[1] {
			t.Errorf("%s = %d, want %d", name, g[0], g[1])
		}
	}
	if c.InputEstimationError == nil || *c.InputEstimationError != 0.25 {
		t.Errorf("input estimation error = %v, want 0.25", c.InputEstimationError)
	}
	if c.OutputEstimationError == nil || *c.OutputEstimationError != -0.5 {
		t.Errorf("output estimation error = %v, want -0.5", c.OutputEstimationError)
	}
	if len(s.Series) != 1 || s.Series[0].KeyID != "k1" || s.Series[0].Scope != "sim-openai" || s.Series[0].Class != "interactive" {
		t.Fatalf("series %+v", s.Series)
	}
	if len(s.ProviderObserved) != 1 || s.ProviderObserved[0].Remaining != 42 || s.ProviderObserved[0].Dimension != "requests" {
		t.Fatalf("observed %+v", s.ProviderObserved)
	}
	if len(s.RecentDecisions) != 6 {
		t.Fatalf("recent decisions: %d", len(s.RecentDecisions))
	}
	// Newest first; the denial explains itself.
	if s.RecentDecisions[0].Status != "expired" {
		t.Errorf("newest decision %+v", s.RecentDecisions[0])
	}
	d := s.RecentDecisions[1]
	if d.Status != "denied" || d.LimitPath != "tenant:acme/key:k1" || d.LimitDimension != "input_tokens" ||
		d.Needed != 1200 || d.Available != 300 || d.RetryAfterMs != 2400 || d.GatewayDecision != "rejected_locally" {
		t.Errorf("denial row %+v", d)
	}
	if s.Stream == nil || s.Stream.Events != 14 {
		t.Errorf("stream %+v", s.Stream)
	}
	b, _ := json.Marshal(s)
	for _, bad := range []string{"secret-ish", "message"} {
		if strings.Contains(string(b), bad) {
			t.Errorf("snapshot leaks %q: %s", bad, b)
		}
	}
}

func TestProjectionRollingWindow(t *testing.T) {
	clk := newClock()
	p := NewProjection(60*time.Second, clk.Now)
	p.Apply(reserve("acme", "k1", "r1"), granted("acme", "k1", "r1"))
	clk.Advance(30 * time.Second)
	p.Apply(reserve("acme", "k1", "r2"), reserve("acme", "k1", "r3"))
	if got := p.Snapshot().Totals.Received; got != 3 {
		t.Fatalf("at +30s received = %d, want 3", got)
	}
	clk.Advance(30 * time.Second) // r1 is now 60 s old: out of the window
	s := p.Snapshot()
	if s.Totals.Received != 2 || s.Totals.Granted != 0 {
		t.Fatalf("at +60s received=%d granted=%d, want 2 and 0", s.Totals.Received, s.Totals.Granted)
	}
	if s.Totals.InFlight != 1 {
		t.Fatalf("in-flight is a gauge, not windowed: got %d", s.Totals.InFlight)
	}
	clk.Advance(31 * time.Second)
	p.Apply(reconciled("acme", "k1", "r1", 10, 10, 10, 10))
	s = p.Snapshot()
	if s.Totals.Received != 0 || s.Totals.InFlight != 0 || s.Totals.Reconciled != 1 {
		t.Fatalf("at +91s %+v", s.Totals)
	}
	clk.Advance(2 * time.Minute)
	p.Apply(reserve("other", "k9", "r9")) // triggers pruning
	s = p.Snapshot()
	if len(s.Series) != 1 || s.Series[0].Tenant != "other" || s.Stream.Series != 1 {
		t.Fatalf("expired series not pruned: %+v / %+v", s.Series, s.Stream)
	}
}

func TestProjectionSettleBeforeGrant(t *testing.T) {
	clk := newClock()
	p := NewProjection(0, clk.Now)
	// The topics are read independently: a reconcile may be seen first.
	p.Apply(reconciled("acme", "k1", "r1", 1, 1, 1, 1), granted("acme", "k1", "r1"))
	p.Apply(granted("acme", "k1", "r2"), released("acme", "k1", "r2"))
	p.Apply(granted("acme", "k1", "r3"),
		decision("acme", "k1", "r3", schemas.Decision{Status: schemas.StatusExpired, Reason: "hold_abandoned"}))
	p.Apply(granted("acme", "k1", "r4"), granted("acme", "k1", "r4")) // duplicate delivery
	if got := p.Snapshot().Totals.InFlight; got != 1 {
		t.Fatalf("in-flight = %d, want 1 (r4)", got)
	}
}

func TestProjectionTenantFilter(t *testing.T) {
	clk := newClock()
	p := NewProjection(0, clk.Now)
	for i := 0; i < 3; i++ {
		p.Apply(reserve("acme", "ka", "a"+itoa(int64(i))), granted("acme", "ka", "a"+itoa(int64(i))))
	}
	p.Apply(reserve("globex", "kg", "g1"),
		decision("globex", "kg", "g1", schemas.Decision{Status: schemas.StatusDenied, LimitPath: "tenant:globex", LimitDimension: schemas.DimRequests}),
		observedEv("globex", 7))
	// Fill the global ring with globex so acme's decisions fall out of it:
	// the tenant view must still have its own.
	for i := 0; i < RecentDecisions+5; i++ {
		p.Apply(decision("globex", "kg", "gx"+itoa(int64(i)), schemas.Decision{Status: schemas.StatusQueued}))
	}

	s := p.TenantSnapshot("acme")
	if s.View != "tenant" || s.Tenant != "acme" {
		t.Fatalf("view %q tenant %q", s.View, s.Tenant)
	}
	if len(s.Tenants) != 1 || s.Tenants[0].Tenant != "acme" || s.Totals.Received != 3 || s.Totals.Denied != 0 {
		t.Fatalf("tenant view leaks or misses: tenants %+v totals %+v", s.Tenants, s.Totals)
	}
	for _, r := range s.Series {
		if r.Tenant != "acme" {
			t.Fatalf("foreign series %+v", r)
		}
	}
	if len(s.RecentDecisions) != 3 {
		t.Fatalf("acme decisions: %d", len(s.RecentDecisions))
	}
	for _, d := range s.RecentDecisions {
		if d.Tenant != "acme" {
			t.Fatalf("foreign decision %+v", d)
		}
	}
	if len(s.ProviderObserved) != 0 || s.Stream != nil {
		t.Fatalf("tenant view shows scope-wide data: %+v %+v", s.ProviderObserved, s.Stream)
	}
	if s := p.TenantSnapshot("nobody"); len(s.Series) != 0 || len(s.RecentDecisions) != 0 || s.Totals.Received != 0 {
		t.Fatalf("unknown tenant sees data: %+v", s)
	}

	op := p.Snapshot()
	if len(op.Tenants) != 2 || tenantRow(t, op, "globex").Denied != 1 {
		t.Fatalf("operator tenants %+v", op.Tenants)
	}
	if len(op.RecentDecisions) != RecentDecisions {
		t.Fatalf("global ring holds %d, want %d", len(op.RecentDecisions), RecentDecisions)
	}
}

func TestProjectionInvalidRecords(t *testing.T) {
	p := NewProjection(0, newClock().Now)
	p.ApplyRecord([]byte("not json"))
	p.ApplyRecord([]byte(`{"v":1,"type":"Decision","id":"x"}`)) // payload missing
	b, err := schemas.Encode(reserve("acme", "k", "r"))
	if err != nil {
		t.Fatal(err)
	}
	p.ApplyRecord(b)
	s := p.Snapshot()
	if s.Stream.InvalidRecords != 2 || s.Totals.Received != 1 {
		t.Fatalf("stream %+v totals %+v", s.Stream, s.Totals)
	}
}

func TestProjectionSeriesCap(t *testing.T) {
	p := NewProjection(0, newClock().Now)
	for i := 0; i < MaxSeries+10; i++ {
		p.Apply(reserve("t", "k"+itoa(int64(i)), "r"))
	}
	s := p.Snapshot()
	if s.Stream.Series != MaxSeries || s.Stream.DroppedEvents != 10 {
		t.Fatalf("stream %+v", s.Stream)
	}
}

// TestProjectionShadowVerdict: a grant's shadow verdict reaches the recent
// decisions, in the tenant's view too (it concerns its own path only).
func TestProjectionShadowVerdict(t *testing.T) {
	p := NewProjection(0, newClock().Now)
	sv := &schemas.ShadowVerdict{Limited: true, Reason: schemas.ReasonCapacity, LimitPath: "tenant:acme/key:k1",
		LimitDimension: schemas.DimRequests, Needed: 1, Buckets: 1}
	p.Apply(reserve("acme", "k1", "r1"), decision("acme", "k1", "r1", schemas.Decision{Status: schemas.StatusGranted, GatewayDecision: schemas.GDAdmitted, Shadow: sv}))
	for _, s := range []Snapshot{p.Snapshot(), p.TenantSnapshot("acme")} {
		if len(s.RecentDecisions) != 1 || s.RecentDecisions[0].Shadow == nil || *s.RecentDecisions[0].Shadow != *sv {
			t.Fatalf("%s view: recent decisions %+v", s.View, s.RecentDecisions)
		}
	}
}

// TestProjectionLearnedCapacity: the newest CapacityLearned per provider
// bucket shows configured against learned, in the operator view only.
func TestProjectionLearnedCapacity(t *testing.T) {
	p := NewProjection(0, newClock().Now)
	learned := func(prev, now int64, src string) *schemas.Event {
		return &schemas.Event{V: 1, Type: schemas.TypeCapacityLearned, ID: fmt.Sprintf("c-0-%d-0", now), Scope: "sim-openai",
			CapacityLearned: &schemas.CapacityLearned{Level: "deployment", ID: "sim-openai", Dimension: schemas.DimRequests, PeriodMs: 60_000,
				ConfiguredCapacity: 600, PreviousCapacity: prev, LearnedCapacity: now, Source: src}}
	}
	p.Apply(learned(600, 420, schemas.LearnedRefusal), learned(420, 480, schemas.LearnedSuccess))
	s := p.Snapshot()
	if len(s.ProviderCapacity) != 1 || s.ProviderCapacity[0].Learned != 480 || s.ProviderCapacity[0].Configured != 600 || s.ProviderCapacity[0].Source != schemas.LearnedSuccess {
		t.Fatalf("provider capacity %+v", s.ProviderCapacity)
	}
	if ts := p.TenantSnapshot("acme"); len(ts.ProviderCapacity) != 0 {
		t.Fatalf("tenant view shows scope-wide capacity: %+v", ts.ProviderCapacity)
	}
}

// TestStrandedQuota: each way a hold ends charges its owner (scope,
// tenant, route, class) max(0, reserved − used) × held time when it
// settles, late grants and expired holds broken out, a settlement seen
// before its grant included, tenants isolated, and the window forgets.
// Every reserve is 100 input + 50 output tokens.
func TestStrandedQuota(t *testing.T) {
	clk := newClock()
	p := NewProjection(time.Minute, clk.Now)
	t0 := clk.Now().UnixMilli()
	retry := func(tenant, req string) *schemas.Event {
		ev := env(schemas.TypeRetryRequested, tenant, "k", req)
		ev.Attempt = 2
		ev.RetryRequested = &schemas.RetryRequested{PreviousAttempt: 1, Reason: "retryable_capacity"}
		return ev
	}
	lateRelease := released("acme", "k", "r2")
	lateRelease.Released.Reason = schemas.ReasonLateGrant
	partial := released("acme", "k", "r6")
	partial.Released.InputTokens, partial.Released.OutputTokens = 100, 20
	steps := []struct {
		name    string
		advance time.Duration
		evs     []*schemas.Event
	}{
		{"r1 granted", 0, []*schemas.Event{reserve("acme", "k", "r1"), granted("acme", "k", "r1")}},
		// 40 output tokens unused for 2 s: 80 token·s.
		{"r1 reconciled", 2 * time.Second, []*schemas.Event{reconciled("acme", "k", "r1", 100, 100, 50, 10)}},
		{"r2 granted", 0, []*schemas.Event{reserve("acme", "k", "r2"), granted("acme", "k", "r2")}},
		// released unused, the grant too late: 150 × 1 s.
		{"r2 late grant", time.Second, []*schemas.Event{lateRelease}},
		{"r3 granted", 0, []*schemas.Event{reserve("acme", "k", "r3"), granted("acme", "k", "r3")}},
		// abandoned and expired by the ledger after 3 s: 150 × 3 s.
		{"r3 hold expired", 3 * time.Second, []*schemas.Event{decision("acme", "k", "r3",
			schemas.Decision{Status: schemas.StatusHoldExpired, Reason: schemas.ReasonHoldAbandoned, GatewayDecision: schemas.GDAdmitted})}},
		{"r4 granted", 0, []*schemas.Event{reserve("globex", "k", "r4"), granted("globex", "k", "r4")}},
		// the gateway retries: the ledger releases attempt 1's grant. 150 × 1 s.
		{"r4 retried", time.Second, []*schemas.Event{retry("globex", "r4")}},
		// the release is seen before its grant, which the ledger made 2 s
		// earlier: 150 × 2 s once the grant arrives.
		{"r5 released first", 0, []*schemas.Event{reserve("acme", "k", "r5"), released("acme", "k", "r5")}},
		{"r5 grant arrives", 0, []*schemas.Event{decision("acme", "k", "r5", schemas.Decision{Status: schemas.StatusGranted,
			GatewayDecision: schemas.GDAdmitted, LogTimeMs: t0 + 7000 - 2000})}},
		// a partial release: 30 output tokens unused for 1 s.
		{"r6 granted", 0, []*schemas.Event{reserve("acme", "k", "r6"), granted("acme", "k", "r6")}},
		{"r6 partial", time.Second, []*schemas.Event{partial}},
	}
	for _, st := range steps {
		clk.Advance(st.advance)
		p.Apply(st.evs...)
	}
	want := map[string]StrandedRow{
		"acme": {Scope: "sim-openai", Tenant: "acme", Route: "gpt-4o-mini", Class: "interactive", Holds: 5,
			TokenS: 80 + 150 + 450 + 300 + 30, InputTokenS: 100 * (1 + 3 + 2), OutputTokenS: 80 + 50*(1+3+2) + 30,
			LateGrantHolds: 1, LateGrantTokenS: 150, HoldExpiredHolds: 1, HoldExpiredTokenS: 450},
		"globex": {Scope: "sim-openai", Tenant: "globex", Route: "gpt-4o-mini", Class: "interactive", Holds: 1,
			TokenS: 150, InputTokenS: 100, OutputTokenS: 50},
	}
	for _, c := range []struct {
		name string
		snap Snapshot
		want []string
	}{
		{"operator", p.Snapshot(), []string{"acme", "globex"}},
		{"tenant acme", p.TenantSnapshot("acme"), []string{"acme"}},
		{"tenant globex", p.TenantSnapshot("globex"), []string{"globex"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if len(c.snap.Stranded) != len(c.want) {
				t.Fatalf("stranded = %+v, want tenants %v", c.snap.Stranded, c.want)
			}
			for i, tn := range c.want {
				if got := c.snap.Stranded[i]; got != want[tn] {
					t.Errorf("row %d = %+v\nwant    %+v", i, got, want[tn])
				}
			}
		})
	}
	if p.Snapshot().Totals.InFlight != 0 {
		t.Errorf("in flight = %d, want 0 (every hold settled)", p.Snapshot().Totals.InFlight)
	}
	clk.Advance(61 * time.Second)
	p.Apply(reserve("acme", "k", "r9"))
	if s := p.Snapshot().Stranded; len(s) != 0 {
		t.Errorf("after the window: %+v", s)
	}
}
