package lifecycle

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// Builders and the step-table runner, as ledger/helpers_test.go has them.

func target(scope string) Target {
	return Target{Scope: scope, Profile: "p-" + scope, Provider: "d-" + scope, Kind: schemas.ProviderOpenAI, Model: "m",
		Path: []schemas.PathLevel{{Level: "tenant", ID: "t"}, {Level: "key", ID: "k"}}}
}

func request(scopes ...string) Request {
	r := Request{ID: "r", Node: "gw", Tenant: "t", KeyID: "k", Class: "interactive", StartMs: 1000,
		Estimate: Usage{InputTokens: 100, OutputTokens: 50}, FallbackAllowed: len(scopes) > 1}
	for _, s := range scopes {
		r.Targets = append(r.Targets, target(s))
	}
	return r
}

var testConfig = Config{AnswerTimeoutMs: 2000, LateGrantBoundMs: 300}

func start() Input { return Input{Kind: Start} }
func decided(att int32, d schemas.Decision) Input {
	return Input{Kind: Decided, Attempt: att, Decision: d}
}
func granted(att int32, logMs int64) Input {
	return decided(att, schemas.Decision{Status: schemas.StatusGranted, GatewayDecision: schemas.GDAdmitted, LogTimeMs: logMs})
}
func queued(att int32) Input {
	return decided(att, schemas.Decision{Status: schemas.StatusQueued, GatewayDecision: schemas.GDQueued})
}
func denied(att int32, reason schemas.Reason, class schemas.RetryClass, fallback bool) Input {
	return decided(att, schemas.Decision{Status: schemas.StatusDenied, Reason: reason, RetryClass: class,
		GatewayDecision: schemas.GDRejectedLocally, FallbackAllowed: fallback})
}
func answered(att int32, status int) Input {
	return Input{Kind: UpstreamDone, Attempt: att, Upstream: Upstream{Status: status, Usage: Usage{InputTokens: 90, OutputTokens: 40}}}
}
func rejected(att int32, status int, kind schemas.RejectionKind, retryAfterMs int64) Input {
	return Input{Kind: UpstreamDone, Attempt: att, Upstream: Upstream{Status: status,
		Rejection: schemas.ProviderRejected{HTTPStatus: int32(status), Kind: kind, RetryAfterMs: retryAfterMs}}}
}
func noAnswer(att int32, why schemas.Reason) Input {
	return Input{Kind: UpstreamDone, Attempt: att, Upstream: Upstream{Failure: why}}
}
func streamStarted(att int32) Input { return Input{Kind: StreamStarted, Attempt: att} }
func streamEnded(att int32, cut schemas.Reason) Input {
	return Input{Kind: StreamEnded, Attempt: att, Upstream: Upstream{Failure: cut, Usage: Usage{OutputTokens: 7}}}
}
func fired(k TimerKind, att int32) Input {
	return Input{Kind: TimerFired, Timer: Timer{Kind: k, Attempt: att}}
}
func silent(att int32, emergencyOK bool) Input {
	return Input{Kind: TimerFired, Timer: Timer{Kind: TimerAnswer, Attempt: att}, EmergencyOK: emergencyOK}
}
func silentDegraded(att int32) Input {
	return Input{Kind: TimerFired, Timer: Timer{Kind: TimerAnswer, Attempt: att}, DegradedOK: true, EmergencyOK: true}
}
func clientGone() Input { return Input{Kind: ClientGone} }

// render is the compact form step tables compare against.
func render(e *Effect) string {
	switch e.Kind {
	case Produce, Report, Telemetry:
		verb := map[EffectKind]string{Produce: "produce", Report: "report", Telemetry: "telemetry"}[e.Kind]
		return verb + " " + renderEvent(e.Event)
	case WaitEnded:
		if e.Decision.Status == "" {
			return "wait_ended " + e.Scope
		}
		return fmt.Sprintf("wait_ended %s %s", e.Scope, e.Decision.Status)
	case Dispatch:
		return fmt.Sprintf("dispatch %d/%d", e.Target, e.Attempt)
	case Relay:
		return fmt.Sprintf("relay %d", e.Attempt)
	case Respond:
		if e.Error == nil {
			return "respond upstream"
		}
		return fmt.Sprintf("respond %d %s %s", e.Error.Status, e.Error.Code, e.Error.Sluice.GatewayDecision)
	case SetTimer:
		name := map[TimerKind]string{TimerAnswer: "answer", TimerDeadline: "deadline"}[e.Timer.Kind]
		return fmt.Sprintf("timer %s/%d @%d", name, e.Timer.Attempt, e.AtMs)
	case Count:
		name := map[Metric]string{MetricRequests: "requests", MetricLateGrant: "late_grant", MetricDegraded: "degraded"}[e.Metric]
		return "count " + name + " " + e.Label
	}
	return fmt.Sprintf("effect %d", e.Kind)
}

func renderEvent(ev *schemas.Event) string {
	s := fmt.Sprintf("%s %s/%d", ev.Type, ev.Scope, ev.Attempt)
	switch {
	case ev.ReserveRequested != nil && ev.ReserveRequested.Degraded:
		s += " degraded"
		if !ev.ReserveRequested.EmergencyAdmitted {
			s += " (not emergency_admitted)"
		}
	case ev.ReserveRequested != nil && ev.ReserveRequested.EmergencyAdmitted:
		s += " emergency"
	case ev.RetryRequested != nil:
		s += fmt.Sprintf(" after %d %s", ev.RetryRequested.PreviousAttempt, ev.RetryRequested.Reason)
	case ev.Released != nil:
		s += " " + string(ev.Released.Reason)
	case ev.ProviderRejected != nil:
		s += " " + string(ev.ProviderRejected.Kind)
	case ev.Reconciled != nil:
		s += fmt.Sprintf(" %d in=%d out=%d", ev.Reconciled.HTTPStatus, ev.Reconciled.InputTokens, ev.Reconciled.OutputTokens)
		if ev.Reconciled.Partial {
			s += " partial"
		}
	case ev.Outcome != nil:
		s += fmt.Sprintf(" %s %s", ev.Outcome.Status, ev.Outcome.GatewayDecision)
	}
	return s
}

// step is one row of a step table: at nowMs, apply In; the effects
// rendered must equal Want (in order).
type step struct {
	At   int64
	In   Input
	Want []string
	// Check, if set, runs after the step.
	Check func(t *testing.T, l *Lifecycle, out []Effect)
}

// runSteps applies a step table to a new lifecycle and reports every step
// whose effects differ (Errorf, as x/time/rate's tests do), and each
// event that would not pass schemas validation once the shell stamps its id.
func runSteps(t *testing.T, cfg Config, req Request, steps []step) *Lifecycle {
	t.Helper()
	l := New(cfg, req)
	for i, s := range steps {
		out := l.Step(s.At, s.In)
		got := make([]string, len(out))
		for j := range out {
			got[j] = render(&out[j])
			if ev := out[j].Event; ev != nil {
				stamped := *ev
				stamped.ID = "id"
				if err := stamped.Validate(); err != nil {
					t.Errorf("step %d: effect %d: invalid event: %v", i, j, err)
				}
			}
		}
		if strings.Join(got, "\n") != strings.Join(s.Want, "\n") {
			t.Errorf("step %d (t=%d input %d):\n got  %q\n want %q", i, s.At, s.In.Kind, got, s.Want)
		}
		if s.Check != nil {
			s.Check(t, l, out)
		}
	}
	return l
}
