// Package shell is the gateway's request shell: the loop that drives one
// request's lifecycle (admission/lifecycle, every rule of reserve,
// dispatch, retry, fallback, reconcile and release) and carries out the
// effects it asks for, until the client has its answer.
//
// The shell reaches the world only through Env, the narrow interfaces it
// really needs: a clock, a log to produce events to the ledger's
// partitions, an inbox that receives this request's decisions and wakes it
// at its next timer or when its client goes, an upstream call, and the
// node's local admission and counters. The gateway (services/gateway)
// gives it Kafka, the wall clock and HTTP; the pipeline simulation
// (services/loadtest/pipesim) gives it a simulated bus, virtual time and a
// provider model with injected faults, so that a seed runs this very code,
// not a model of it.
package shell

import (
	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/lifecycle"
	"github.com/sluice-dev/sluice/schemas"
)

// Env is everything a request's shell does outside its lifecycle. Its
// methods are called from the request's one goroutine, in the order the
// lifecycle's effects ask for; the blocking ones (Log.Produce,
// Inbox.Wait, Upstream.Dispatch and Upstream.Relay) are where time
// passes.
type Env interface {
	Clock
	Log
	Inbox
	Upstream
	Node
}

// Clock is the shell's time, in unix milliseconds: what every lifecycle
// step and timer is measured against.
type Clock interface {
	NowMs() int64
}

// Log is the way to the ledger's partitions.
type Log interface {
	// Produce sends the reservation of attempt (ReserveRequested or
	// RetryRequested) to its scope's partition and waits for the log's
	// ack; an error means the ledger never saw it.
	Produce(attempt int32, ev *schemas.Event) error
	// Report sends an event the ledger must see (Reconciled, Released,
	// ProviderRejected, ProviderObserved) without waiting for it.
	Report(ev *schemas.Event)
	// Telemetry sends an analytics event (Dispatched, Outcome) off the
	// request path.
	Telemetry(ev *schemas.Event)
}

// Inbox is where the request waits.
type Inbox interface {
	// Wait blocks until a decision for the request arrives at this node,
	// the clock reaches atMs (only when timer is true: otherwise no timer
	// is pending), or the request's context ends, which it says once.
	Wait(atMs int64, timer bool) Wake
}

// Upstream is the provider call of a granted attempt and the client's
// answer.
type Upstream interface {
	// Dispatch sends attempt to route target target and returns what
	// came back: an answer (UpstreamDone, held for Respond), a stream
	// about to start (StreamStarted, held for Relay), or no answer.
	Dispatch(target int, attempt int32) lifecycle.Input
	// Relay relays the stream held since the dispatch to the client and
	// returns its end (StreamEnded).
	Relay(attempt int32) lifecycle.Input
	// Respond writes the client's answer: the error contract when e is
	// set, else the provider's answer held since the dispatch.
	Respond(e *apierr.Error)
}

// Node is what the request shares with the rest of its node.
type Node interface {
	// LocalAdmission says whether attempt, which the ledger left
	// unanswered, may be admitted locally: by degraded mode's share, or
	// else by the emergency cap.
	LocalAdmission(attempt int32) (degradedOK, emergencyOK bool)
	// Settled tells the node that the wait of scope ended with d (the
	// node's heartbeats track its open waits).
	Settled(scope string, d schemas.Decision)
	// Count counts one of the lifecycle's metrics.
	Count(m lifecycle.Metric, label string)
}

// WakeKind says what ended a Wait.
type WakeKind uint8

// The ends of a Wait.
const (
	WakeDecision   WakeKind = iota + 1 // a decision arrived (Wake.Attempt, Wake.Decision)
	WakeTimer                          // the clock reached the timer
	WakeClientGone                     // the client went away
	WakeDeadline                       // the request's deadline passed
)

// Wake is what ended a Wait.
type Wake struct {
	Kind     WakeKind
	Attempt  int32
	Decision schemas.Decision
}

// shell is one request's run: its lifecycle, its pending timers and its
// world.
type shell struct {
	lc     *lifecycle.Lifecycle
	env    Env
	timers timers
}

// Run follows lc's life from its start: it steps the lifecycle, executes
// the effects it asks for through env, and waits in env for what comes
// next, until the lifecycle is done (the client has its answer and no
// grant is left held).
func Run(lc *lifecycle.Lifecycle, env Env) {
	sh := shell{lc: lc, env: env}
	pending := []lifecycle.Input{{Kind: lifecycle.Start}}
	for {
		for len(pending) > 0 {
			in := pending[0]
			pending = pending[1:]
			pending = sh.execute(lc.Step(env.NowMs(), in), pending)
		}
		if lc.Done() {
			return
		}
		at, ok := sh.timers.next()
		w := env.Wait(at, ok)
		switch w.Kind {
		case WakeDecision:
			pending = append(pending, lifecycle.Input{Kind: lifecycle.Decided, Attempt: w.Attempt, Decision: w.Decision})
		case WakeTimer:
			for _, t := range sh.timers.due(env.NowMs()) {
				pending = append(pending, sh.timerInput(t))
			}
		case WakeClientGone:
			pending = append(pending, lifecycle.Input{Kind: lifecycle.ClientGone})
		case WakeDeadline:
			pending = append(pending, lifecycle.Input{Kind: lifecycle.TimerFired, Timer: lifecycle.Timer{Kind: lifecycle.TimerDeadline}})
		}
	}
}

// execute carries out effects in order and returns pending with the inputs
// they produced (an upstream answer, a failed produce) appended.
func (sh *shell) execute(effects []lifecycle.Effect, pending []lifecycle.Input) []lifecycle.Input {
	env := sh.env
	for i := range effects {
		e := &effects[i]
		switch e.Kind {
		case lifecycle.Produce:
			if err := env.Produce(e.Attempt, e.Event); err != nil {
				pending = append(pending, sh.localAdmission(lifecycle.Input{Kind: lifecycle.ProduceFailed, Attempt: e.Attempt}, e.Attempt))
			}
		case lifecycle.Report:
			env.Report(e.Event)
		case lifecycle.Telemetry:
			env.Telemetry(e.Event)
		case lifecycle.WaitEnded:
			env.Settled(e.Scope, e.Decision)
		case lifecycle.Dispatch:
			pending = append(pending, env.Dispatch(e.Target, e.Attempt))
		case lifecycle.Relay:
			pending = append(pending, env.Relay(e.Attempt))
		case lifecycle.Respond:
			env.Respond(e.Error)
		case lifecycle.SetTimer:
			sh.timers.set(e.Timer, e.AtMs)
		case lifecycle.Count:
			env.Count(e.Metric, e.Label)
		}
	}
	return pending
}

// timerInput is the input of timer t: the answer bound says whether the
// request may be admitted locally, taken only when the lifecycle still
// waits.
func (sh *shell) timerInput(t lifecycle.Timer) lifecycle.Input {
	in := lifecycle.Input{Kind: lifecycle.TimerFired, Timer: t}
	if t.Kind == lifecycle.TimerAnswer {
		in = sh.localAdmission(in, t.Attempt)
	}
	return in
}

// localAdmission says in in whether attempt may be admitted locally
// (Node.LocalAdmission).
func (sh *shell) localAdmission(in lifecycle.Input, attempt int32) lifecycle.Input {
	in.DegradedOK, in.EmergencyOK = sh.env.LocalAdmission(attempt)
	return in
}

// timers holds a lifecycle's pending timers (a handful per request).
type timers struct {
	at []timerAt
}

type timerAt struct {
	t    lifecycle.Timer
	atMs int64
}

func (ts *timers) set(t lifecycle.Timer, atMs int64) { ts.at = append(ts.at, timerAt{t, atMs}) }

// next is when the earliest timer is due (ok false when none is set).
func (ts *timers) next() (atMs int64, ok bool) {
	for i, t := range ts.at {
		if i == 0 || t.atMs < atMs {
			atMs = t.atMs
		}
	}
	return atMs, len(ts.at) > 0
}

// due removes and returns the timers due at nowMs, in the order they were
// set.
func (ts *timers) due(nowMs int64) []lifecycle.Timer {
	var out []lifecycle.Timer
	keep := ts.at[:0]
	for _, t := range ts.at {
		if t.atMs <= nowMs {
			out = append(out, t.t)
		} else {
			keep = append(keep, t)
		}
	}
	ts.at = keep
	return out
}
