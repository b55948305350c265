package shell

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/lifecycle"
	"github.com/sluice-dev/sluice/schemas"
)

// script is an Env that answers from a script and records every call:
// the shell's side of a request, without Kafka, HTTP or the wall clock.
type script struct {
	nowMs      int64
	produceErr error
	wakes      []Wake // what each Wait returns, in order
	upstream   lifecycle.Upstream
	calls      []string
}

func (s *script) log(format string, args ...any) {
	s.calls = append(s.calls, fmt.Sprintf(format, args...))
}

func (s *script) NowMs() int64 { return s.nowMs }
func (s *script) Produce(attempt int32, ev *schemas.Event) error {
	s.log("produce %s/%d", ev.Type, attempt)
	return s.produceErr
}
func (s *script) Report(ev *schemas.Event)    { s.log("report %s/%d", ev.Type, ev.Attempt) }
func (s *script) Telemetry(ev *schemas.Event) { s.log("telemetry %s", ev.Type) }
func (s *script) Wait(atMs int64, timer bool) Wake {
	if len(s.wakes) == 0 {
		panic(fmt.Sprintf("shell waits past the script (calls %q)", s.calls))
	}
	w := s.wakes[0]
	s.wakes = s.wakes[1:]
	if w.Kind == WakeTimer {
		if !timer {
			panic("a timer wake with no timer set")
		}
		s.nowMs = atMs
	}
	s.log("wait %d", w.Kind)
	return w
}
func (s *script) Dispatch(target int, attempt int32) lifecycle.Input {
	s.log("dispatch %d/%d", target, attempt)
	return lifecycle.Input{Kind: lifecycle.UpstreamDone, Attempt: attempt, Upstream: s.upstream}
}
func (s *script) Relay(attempt int32) lifecycle.Input {
	s.log("relay %d", attempt)
	return lifecycle.Input{Kind: lifecycle.StreamEnded, Attempt: attempt, Upstream: s.upstream}
}
func (s *script) Respond(e *apierr.Error) {
	if e == nil {
		s.log("respond ok")
		return
	}
	s.log("respond %d", e.Status)
}
func (s *script) LocalAdmission(attempt int32) (bool, bool) {
	s.log("local %d", attempt)
	return false, false
}
func (s *script) Settled(scope string, d schemas.Decision) { s.log("settled %s", scope) }
func (s *script) Count(m lifecycle.Metric, label string)   {}

func grant(attempt int32) Wake {
	return Wake{Kind: WakeDecision, Attempt: attempt, Decision: schemas.Decision{Status: schemas.StatusGranted, GatewayDecision: schemas.GDAdmitted, LogTimeMs: 1000}}
}

// TestRun drives the shell through a request's main paths and checks
// that the calls it makes of its Env come in the order the lifecycle
// asks for them (want is a subsequence of the calls): the effects after
// the client's answer (the reconcile) are carried out too, and a release
// is reported however the wait ended. The whole pipeline runs this shell
// under faults in services/loadtest/pipesim.
func TestRun(t *testing.T) {
	ok := lifecycle.Upstream{Status: 200, Usage: lifecycle.Usage{InputTokens: 90, OutputTokens: 40}}
	for _, c := range []struct {
		name string
		env  script
		want []string
	}{
		{"granted, answered, reconciled", script{wakes: []Wake{grant(1)}, upstream: ok},
			[]string{"produce ReserveRequested/1", "wait 1", "settled s1", "telemetry Dispatched", "dispatch 0/1", "respond ok", "report Reconciled/1", "telemetry Outcome"}},
		{"the client goes while the ledger decides: released", script{wakes: []Wake{{Kind: WakeClientGone}}},
			[]string{"produce ReserveRequested/1", "wait 3", "report Released/1", "respond 499"}},
		{"the deadline passes while the ledger decides: released", script{wakes: []Wake{{Kind: WakeDeadline}}},
			[]string{"produce ReserveRequested/1", "wait 4", "report Released/1"}},
		{"a failed produce asks for local admission", script{produceErr: errors.New("broker away")},
			[]string{"produce ReserveRequested/1", "local 1", "settled s1", "respond 503"}},
		{"the answer bound passes: local admission, then released", script{wakes: []Wake{{Kind: WakeTimer}}},
			[]string{"produce ReserveRequested/1", "wait 2", "local 1", "report Released/1", "respond 503"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := c.env
			env.nowMs = 1000
			lc := lifecycle.New(lifecycle.Config{AnswerTimeoutMs: 2000, LateGrantBoundMs: 300}, request())
			Run(lc, &env)
			if !lc.Done() {
				t.Fatalf("Run returned with the lifecycle not done; calls %q", env.calls)
			}
			i := 0
			for _, call := range env.calls {
				if i < len(c.want) && call == c.want[i] {
					i++
				}
			}
			if i < len(c.want) {
				t.Errorf("want %q (in order) among the calls, missing %q; calls:\n  %s", c.want, c.want[i], strings.Join(env.calls, "\n  "))
			}
		})
	}
}

func request() lifecycle.Request {
	return lifecycle.Request{ID: "r", Node: "gw", Tenant: "t", KeyID: "k", Class: "interactive", StartMs: 1000,
		Estimate: lifecycle.Usage{InputTokens: 100, OutputTokens: 50},
		Targets: []lifecycle.Target{{Scope: "s1", Profile: "p", Provider: "d", Kind: schemas.ProviderOpenAI, Model: "m",
			Path: []schemas.PathLevel{{Level: "tenant", ID: "t"}, {Level: "key", ID: "k"}}}}}
}
