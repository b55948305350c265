package ledger

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// Event builders for tests.

type reqOpt func(*schemas.Event)

func reserve(id string, opts ...reqOpt) *schemas.Event {
	ev := &schemas.Event{
		V: 1, Type: schemas.TypeReserveRequested, ID: "e-" + id, RequestID: id, Attempt: 1,
		Node: "gw1", Scope: "s", Tenant: "t1", KeyID: "k1", Route: "gpt", Class: "interactive",
		ReserveRequested: &schemas.ReserveRequested{
			Path:        []schemas.PathLevel{{Level: "tenant", ID: "t1"}, {Level: "key", ID: "k1"}},
			InputTokens: 100, OutputTokens: 50,
		},
	}
	for _, o := range opts {
		o(ev)
	}
	return ev
}

func tenant(t string) reqOpt {
	return func(ev *schemas.Event) {
		ev.Tenant = t
		ev.KeyID = "k-" + t
		ev.ReserveRequested.Path = []schemas.PathLevel{{Level: "tenant", ID: t}, {Level: "key", ID: "k-" + t}}
	}
}
func class(c string) reqOpt { return func(ev *schemas.Event) { ev.Class = c } }
func tokens(in, out int64) reqOpt {
	return func(ev *schemas.Event) { ev.ReserveRequested.InputTokens, ev.ReserveRequested.OutputTokens = in, out }
}
func maxWait(ms int64) reqOpt { return func(ev *schemas.Event) { ev.ReserveRequested.MaxWaitMs = ms } }
func deadline(ms int64) reqOpt {
	return func(ev *schemas.Event) { ev.ReserveRequested.DeadlineMs = ms }
}
func streaming() reqOpt       { return func(ev *schemas.Event) { ev.ReserveRequested.Streaming = true } }
func priority(p int32) reqOpt { return func(ev *schemas.Event) { ev.ReserveRequested.Priority = p } }
func fallback() reqOpt        { return func(ev *schemas.Event) { ev.ReserveRequested.FallbackAllowed = true } }
func emergency() reqOpt {
	return func(ev *schemas.Event) { ev.ReserveRequested.EmergencyAdmitted = true }
}
func attempt(a int32) reqOpt { return func(ev *schemas.Event) { ev.Attempt = a } }
func spend(micros int64) reqOpt {
	return func(ev *schemas.Event) { ev.ReserveRequested.SpendMicros = micros }
}
func path(p ...string) reqOpt {
	return func(ev *schemas.Event) {
		ev.ReserveRequested.Path = nil
		for i := 0; i+1 < len(p); i += 2 {
			ev.ReserveRequested.Path = append(ev.ReserveRequested.Path, schemas.PathLevel{Level: p[i], ID: p[i+1]})
		}
	}
}

func envelope(t schemas.Type, id string, att int32) *schemas.Event {
	return &schemas.Event{V: 1, Type: t, ID: fmt.Sprintf("e-%s-%s-%d", t, id, att), RequestID: id, Attempt: att, Node: "gw1", Scope: "s"}
}

func reconcile(id string, in, out int64) *schemas.Event {
	ev := envelope(schemas.TypeReconciled, id, 1)
	ev.Reconciled = &schemas.Reconciled{InputTokens: in, OutputTokens: out, HTTPStatus: 200, TotalMs: 100}
	return ev
}

func reconcileAtt(id string, att int32, in, out int64) *schemas.Event {
	ev := reconcile(id, in, out)
	ev.Attempt = att
	return ev
}

func releaseEv(id string) *schemas.Event {
	ev := envelope(schemas.TypeReleased, id, 1)
	ev.Released = &schemas.Released{Reason: "cancel"}
	return ev
}

func rejected(id string, att int32, kind schemas.RejectionKind, retryAfterMs int64) *schemas.Event {
	ev := envelope(schemas.TypeProviderRejected, id, att)
	ev.ProviderRejected = &schemas.ProviderRejected{HTTPStatus: 429, Kind: kind, RetryAfterMs: retryAfterMs}
	return ev
}

func retryEv(id string, prev int32, reason schemas.RetryClass, retryAfterMs int64) *schemas.Event {
	ev := envelope(schemas.TypeRetryRequested, id, 0)
	ev.RetryRequested = &schemas.RetryRequested{PreviousAttempt: prev, Reason: reason, RetryAfterMs: retryAfterMs}
	return ev
}

func observed(dim schemas.Dimension, remaining int64) *schemas.Event {
	ev := envelope(schemas.TypeProviderObserved, "", 0)
	ev.ID = fmt.Sprintf("obs-%s-%d", dim, remaining)
	ev.ProviderObserved = &schemas.ProviderObserved{Observations: []schemas.Observation{{Dimension: dim, Remaining: remaining}}}
	return ev
}

func tick() *schemas.Event {
	return &schemas.Event{V: 1, Type: schemas.TypeTick, ID: "tick", Tick: &schemas.Tick{}}
}

func heartbeat(node string) *schemas.Event {
	return &schemas.Event{V: 1, Type: schemas.TypeHeartbeat, ID: "hb-" + node, Node: node, Scope: "s", Heartbeat: &schemas.Heartbeat{}}
}

func configEv(t testing.TB, c Config) *schemas.Event {
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return &schemas.Event{V: 1, Type: schemas.TypeConfigChanged, ID: "cfg", ConfigChanged: &schemas.ConfigChanged{ConfigVersion: "v", Ledger: b}}
}

// render is the compact form step tables compare against:
// "<request>/<attempt> <status> [<reason>] <gateway_decision>".
func render(o *Output) string {
	parts := []string{fmt.Sprintf("%s/%d", o.RequestID, o.Attempt), string(o.Decision.Status)}
	if o.Decision.Reason != "" {
		parts = append(parts, string(o.Decision.Reason))
	}
	parts = append(parts, string(o.Decision.GatewayDecision))
	return strings.Join(parts, " ")
}

// step is one row of a step table: at log time At, apply Ev; the decisions
// rendered must equal Want (in order).
type step struct {
	At   int64
	Ev   *schemas.Event
	Want []string
	// Check, if set, runs after the step.
	Check func(t *testing.T, l *Ledger, out []Output)
}

// runSteps applies a step table to a new ledger and reports the first step
// whose decisions differ.
func runSteps(t *testing.T, cfg Config, steps []step) *Ledger {
	t.Helper()
	l := New(0, cfg)
	if e := l.ConfigError(); e != "" {
		t.Fatalf("config: %s", e)
	}
	var out []Output
	for i, s := range steps {
		out = l.Apply(s.At, int64(i), s.Ev, out[:0])
		got := make([]string, len(out))
		for j := range out {
			got[j] = render(&out[j])
		}
		if strings.Join(got, "\n") != strings.Join(s.Want, "\n") {
			t.Fatalf("step %d (t=%d %s %s):\n got  %q\n want %q", i, s.At, s.Ev.Type, s.Ev.RequestID, got, s.Want)
		}
		if s.Check != nil {
			s.Check(t, l, out)
		}
		if err := l.checkInvariants(); err != nil {
			t.Fatalf("step %d: invariant: %v", i, err)
		}
	}
	return l
}

// testConfig returns a config for scope "s" with the given buckets.
func testConfig(buckets ...BucketConfig) Config {
	c := Config{Scopes: []ScopeConfig{{Name: "s", Buckets: buckets}}}
	c.fillDefaults()
	return c
}

func rpm(level, id string, perMin, windowMs int64) BucketConfig {
	return BucketConfig{Level: level, ID: id, Dimension: schemas.DimRequests, Capacity: perMin, PeriodMs: 60_000, WindowMs: windowMs}
}
