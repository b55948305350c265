package loadtest

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/sim"
)

// The dispatch model: the ledger decides in log time, the provider counts
// in wall time (DESIGN.md §11). Here the scenario's arrivals go through the
// ledger it generates, in virtual time, and every decision reaches the
// gateway after a delivery delay that stalls periodically — the ledger's
// loop blocked in a transaction commit, a starved gateway consumer, a GC
// pause: whatever the decisions of inputs appended during the stall leave
// together when it ends. The gateway judges each grant as
// admission/lifecycle does (released and reserved again when later than
// its class's late-grant bound) and dispatches the rest to the real
// simulator, whose clock is the model's wall clock. No Kafka, no HTTP
// listener, no wall clock: one run is one deterministic answer.

// stallDelay delivers the decisions of an input appended at log time l:
// after baseMs, or, when l falls in a stall of stallMs that begins every
// everyMs, when that stall ends.
func stallDelay(everyMs, stallMs, baseMs int64) func(l int64) int64 {
	return func(l int64) int64 {
		if stallMs > 0 {
			if ph := l % everyMs; ph < stallMs {
				return l - ph + stallMs + baseMs
			}
		}
		return l + baseMs
	}
}

type dispatchResult struct {
	dispatched, provider429, lateReserved, servedInteractive, interactive, served int
	firstAt                                                                       int64 // first 429's wall time (ms into the run), -1 none
}

func (r dispatchResult) String() string {
	return fmt.Sprintf("dispatched %d provider429 %d (first at %d ms) late-reserved %d served %d interactive %d/%d",
		r.dispatched, r.provider429, r.firstAt, r.lateReserved, r.served, r.servedInteractive, r.interactive)
}

type modelClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *modelClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *modelClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.t) {
		c.t = t
	}
}

// runDispatchModel runs sc with decisions delivered by deliver and grants
// judged against lateBound(class); tweak, if not nil, changes the generated
// ledger config first.
//
// counted, if not nil, maps a dispatch's wall time to when the provider
// counts it (a provider that is itself stalled counts the requests that
// queued meanwhile when it resumes: the simulator on a loaded machine).
func runDispatchModel(t *testing.T, sc *Scenario, deliver, counted func(int64) int64, lateBound func(class string) int64, tweak func(*ledger.Config)) dispatchResult {
	t.Helper()
	cfg, err := LedgerConfig(sc)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(&cfg)
	}
	l := ledger.New(0, cfg)
	if e := l.ConfigError(); e != "" {
		t.Fatal(e)
	}
	t0 := time.Date(2026, 1, 2, 7, 0, 0, 0, time.UTC)
	clk := &modelClock{t: t0}
	simCfg := sc.SimConfig
	simCfg.Now = clk.Now
	simCfg.Sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
	prov, err := sim.New(simCfg)
	if err != nil {
		t.Fatal(err)
	}
	arr := Schedule(sc, sc.Seed, sc.Duration.D())
	type reqState struct {
		tenant   *TenantSpec
		deadline int64
		attempt  int32
		done     bool
		served   bool
		late     int
	}
	reqs := map[string]*reqState{}
	var q modelQueue
	var seq int64
	push := func(at int64, ev *schemas.Event, resp *modelResp) {
		seq++
		heap.Push(&q, &modelEvent{at: at, seq: seq, ev: ev, resp: resp})
	}
	reserve := func(id string, st *reqState, at int64) {
		tn := st.tenant
		push(at, &schemas.Event{V: 1, Type: schemas.TypeReserveRequested, ID: fmt.Sprintf("e-%s-%d", id, st.attempt), RequestID: id, Attempt: st.attempt,
			Node: "gw", Scope: simScope, Tenant: tn.ID, KeyID: "k-" + tn.ID, Route: sc.Model, Class: tn.Class,
			ReserveRequested: &schemas.ReserveRequested{
				Path: []schemas.PathLevel{{Level: "tenant", ID: tn.ID}, {Level: "key", ID: "k-" + tn.ID},
					{Level: "deployment", ID: simProviderName}},
				InputTokens: int64(tn.PromptTokens), OutputTokens: int64(tn.MaxTokens), MaxOutputTokens: int64(tn.MaxTokens),
				DeadlineMs: st.deadline - at,
			}}, nil)
	}
	res := dispatchResult{firstAt: -1}
	for i, a := range arr {
		tn := &sc.Tenants[a.Tenant]
		id := fmt.Sprintf("r%d", i)
		at := a.At.Milliseconds()
		st := &reqState{tenant: tn, deadline: at + sc.Classes[tn.Class].Deadline.D().Milliseconds(), attempt: 1}
		reqs[id] = st
		if tn.Class == "interactive" {
			res.interactive++
		}
		reserve(id, st, at)
	}
	body, _ := json.Marshal(map[string]any{"model": sc.Model, "max_tokens": 64,
		"messages": []map[string]string{{"role": "user", "content": "hello"}}})
	ttft := sc.SimConfig.Latency.TimeToFirstToken.D().Milliseconds()
	env := func(tp schemas.Type, id string, att int32) *schemas.Event {
		return &schemas.Event{V: 1, Type: tp, ID: fmt.Sprintf("e-%s-%s-%d", tp, id, att), RequestID: id, Attempt: att, Node: "gw", Scope: simScope}
	}
	var out []ledger.Output
	var offset, now int64
	apply := func(ev *schemas.Event) {
		out = l.Apply(now, offset, ev, out[:0])
		offset++
		at := deliver(now) // when this input's decisions reach the gateway
		for _, o := range out {
			st := reqs[o.RequestID]
			if st == nil || st.done || o.Attempt != st.attempt {
				continue
			}
			switch o.Decision.Status {
			case schemas.StatusQueued:
			case schemas.StatusGranted:
				if at-o.Decision.LogTimeMs > lateBound(st.tenant.Class) {
					// Late: released unsent and reserved again (at
					// most twice, as lifecycle does; then refused).
					rel := env(schemas.TypeReleased, o.RequestID, o.Attempt)
					rel.Released = &schemas.Released{Reason: schemas.ReasonLateGrant}
					push(at, rel, nil)
					st.late++
					if st.late > 2 || at >= st.deadline {
						st.done = true
						continue
					}
					res.lateReserved++
					st.attempt++
					reserve(o.RequestID, st, at)
					continue
				}
				push(at, nil, &modelResp{id: o.RequestID, attempt: o.Attempt})
			default:
				st.done = true
			}
		}
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(*modelEvent)
		if w, ok := l.NextWakeMs(); ok && w < e.at {
			heap.Push(&q, e)
			now = max(now, w)
			apply(&schemas.Event{V: 1, Type: schemas.TypeTick, ID: fmt.Sprintf("tick-%d", offset), Tick: &schemas.Tick{}})
			continue
		}
		now = max(now, e.at)
		if e.ev != nil {
			apply(e.ev)
			continue
		}
		// A dispatch: the simulator decides at the model's wall time.
		r := e.resp
		st := reqs[r.id]
		at := e.at
		if counted != nil {
			at = counted(at)
		}
		clk.set(t0.Add(time.Duration(at) * time.Millisecond))
		req := httptest.NewRequest(http.MethodPost, "/openai/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-model")
		rec := httptest.NewRecorder()
		prov.ServeHTTP(rec, req)
		res.dispatched++
		if rec.Code == http.StatusOK {
			ev := env(schemas.TypeReconciled, r.id, r.attempt)
			ev.Reconciled = &schemas.Reconciled{InputTokens: int64(st.tenant.PromptTokens), OutputTokens: 32, HTTPStatus: 200, TotalMs: ttft}
			push(e.at+ttft, ev, nil)
			st.done = true
			if e.at+ttft <= st.deadline {
				st.served = true
				res.served++
				if st.tenant.Class == "interactive" {
					res.servedInteractive++
				}
			}
			continue
		}
		if rec.Code != http.StatusTooManyRequests {
			t.Fatalf("simulator answered %d: %s", rec.Code, rec.Body.String())
		}
		res.provider429++
		if res.firstAt < 0 {
			res.firstAt = e.at
		}
		ev := env(schemas.TypeProviderRejected, r.id, r.attempt)
		ev.ProviderRejected = &schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRateLimited, RetryAfterMs: 100, Limiter: schemas.DimRequests}
		push(e.at, ev, nil)
		st.done = true // the client sees the refusal; the count is what matters here
	}
	return res
}

// TestDispatchModelStallBurst: the mechanism of the provider 429s seen on
// loaded machines (docs/cluster.md, "The provider 429s are still open"),
// and its fix. The delivery of decisions stalls for part of every second
// (a commit under load); the grants of inputs appended during a stall leave
// together when it ends. With the old generated config — the ledger's
// window the provider's own, late-grant bounds up to 1 s — every one of
// them is within its class's bound, so all are dispatched, and they overrun
// the provider's window, whose slack over the ledger is only what the 3 %
// headroom has refilled since the flood's first burst: 1–4 provider 429s
// from 250 ms stalls on, none on time. With the ledger's window the
// provider's minus the late-grant bound J (DispatchJitterMs: 500 ms), and
// grants later than J released and reserved again, a bunch can never
// exceed the provider's burst: 0 at every stall. The price is in the
// grants too late to send: they are reserved again, not dispatched. A
// stalled provider (the simulator starved on a loaded machine counts what
// queued meanwhile at once) is jitter the gateway cannot see: 1 provider
// 429 with the old windows at 300 ms of every second, 0 with the room.
func TestDispatchModelStallBurst(t *testing.T) {
	sc, err := LoadScenario("noisy-neighbor", "")
	if err != nil {
		t.Fatal(err)
	}
	gw, err := GatewayConfig(sc, "http://sim.invalid", NewKeys(sc))
	if err != nil {
		t.Fatal(err)
	}
	jitter := DispatchJitterMs(sc)
	// The config before the fix: windows mirror the provider's (1 s) and
	// the bound is the class's max wait within [100 ms, 1 s].
	mirror := func(c *ledger.Config) {
		for i := range c.Scopes[0].Buckets {
			if b := &c.Scopes[0].Buckets[i]; b.Refill == ledger.RefillToken && b.WindowMs > 0 {
				b.WindowMs += jitter
			}
		}
	}
	oldBound := func(class string) int64 {
		return min(max(sc.Classes[class].MaxWait.D().Milliseconds(), 100), 1000)
	}
	for _, tc := range []struct {
		name    string
		stallMs int64
		simMs   int64 // the provider stalled this long every second
		old     bool
		min429  int // at least (the old config), else exactly 0
	}{
		{name: "old config, on time", old: true},
		{name: "old config, stall 100ms/s", old: true, stallMs: 100},
		{name: "old config, stall 250ms/s", old: true, stallMs: 250, min429: 1},
		{name: "old config, stall 500ms/s", old: true, stallMs: 500, min429: 1},
		{name: "old config, stall 800ms/s", old: true, stallMs: 800, min429: 1},
		{name: "old config, simulator stalled 300ms/s", old: true, simMs: 300, min429: 1},
		{name: "on time"},
		{name: "stall 100ms/s", stallMs: 100},
		{name: "stall 250ms/s", stallMs: 250},
		{name: "stall 500ms/s", stallMs: 500},
		{name: "stall 800ms/s", stallMs: 800},
		{name: "simulator stalled 300ms/s", simMs: 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bound, tweak := gw.LateGrantBoundMs, (func(*ledger.Config))(nil)
			if tc.old {
				bound, tweak = oldBound, mirror
			}
			var counted func(int64) int64
			if tc.simMs > 0 {
				counted = stallDelay(1000, tc.simMs, 0)
			}
			r := runDispatchModel(t, sc, stallDelay(1000, tc.stallMs, 5), counted, bound, tweak)
			t.Logf("%s: %v", tc.name, r)
			if tc.min429 > 0 && r.provider429 < tc.min429 {
				t.Errorf("%d provider 429s, want at least %d: the model no longer shows the burst", r.provider429, tc.min429)
			}
			if tc.min429 == 0 && r.provider429 != 0 {
				t.Errorf("%d provider 429s, want 0", r.provider429)
			}
			if tc.stallMs == 0 && tc.simMs == 0 && r.servedInteractive != r.interactive {
				t.Errorf("on time: %d of %d interactive served, want all", r.servedInteractive, r.interactive)
			}
		})
	}
}
