// Package lifecycle is one request's life in a gateway as a pure state
// machine: reserve → (queued) → granted → dispatch → retry or fallback →
// reconcile or release → respond. The gateway (services/gateway) is its
// shell: it turns HTTP and Kafka into Inputs, calls Step, and executes the
// Effects it gets back (produce an event, call the provider, answer the
// client, set a timer). Every rule of a request's life is here; every I/O is
// in the shell.
//
// Like ledger/, the package uses no wall clock (time is Step's nowMs), no
// randomness, no goroutines and no I/O; purity_test.go holds it to that.
// Events it builds carry no id: the shell stamps one (eventid.NewID) before
// producing, and the pipeline simulation stamps deterministic ones.
package lifecycle

import (
	"math"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/internal/invariants"
	"github.com/sluice-dev/sluice/schemas"
)

// Config holds the gateway settings a lifecycle obeys. The zero value is
// not usable: AnswerTimeoutMs must be positive.
type Config struct {
	// AnswerTimeoutMs bounds the wait for the ledger's first answer
	// (granted, queued, denied …) to a reservation or retry.
	AnswerTimeoutMs int64
	// LateGrantBoundMs is the class's late-grant bound (late.go).
	LateGrantBoundMs int64
	// Emergency: the gateway admits locally, under its emergency cap, when
	// the ledger does not answer; the shell tells with Input.EmergencyOK
	// whether the cap has room for this request now.
	Emergency bool
	// Degraded: the gateway admits locally in degraded mode, within its
	// share of the last known capacity (degraded.go), when the ledger
	// does not answer; the shell tells with Input.DegradedOK whether the
	// share covers this request now. It is tried before the emergency cap.
	Degraded bool
}

// Request is what the gateway knows about a request when its life starts.
type Request struct {
	ID                   string // logical request id
	Node                 string // this gateway
	Tenant, KeyID, Class string
	Priority             int32
	StartMs              int64 // when the gateway received it
	DeadlineMs           int64 // total deadline from StartMs; 0: none
	// FallbackAllowed: the client allows fallback.
	FallbackAllowed bool
	Estimate        Usage
	// MaxOutputTokens is what a provider that counts max_tokens on arrival
	// charges for the output (estimate.Estimate.ArrivalOutputTokens; 0:
	// the output estimate).
	MaxOutputTokens int64
	Streaming       bool
	// PromptFamily groups requests by system prompt and tools for the
	// estimation-error analytics (computed by the shell).
	PromptFamily string
	// ClientRetryCount is the client's own retry count of the request
	// (the SDK's X-Stainless-Retry-Count), recorded on every reservation.
	ClientRetryCount int32
	// NeedsTools: the request has tools; NeedsStructuredOutput: it asks
	// for json_object or json_schema output. A fallback must offer them.
	NeedsTools, NeedsStructuredOutput bool
	// Targets are the route's candidates in the route's order; Eligible
	// picks those the request uses, at least one.
	Targets []Target
}

// Target is one route candidate resolved to its provider.
type Target struct {
	Scope    string // provider scope (the ledger partition key)
	Profile  string // model profile (Event.Route)
	Provider string // provider (deployment) name
	Kind     schemas.ProviderKind
	Model    string // upstream model name
	Path     []schemas.PathLevel
	// Prices in USD per million tokens (micro-USD per token).
	InputCostPerMTok, OutputCostPerMTok float64
	// What the candidate offers a request (Request.Fits): its context
	// window in tokens (0: unknown), tools, structured output.
	ContextTokens           int64
	Tools, StructuredOutput bool
	// Unserved: the provider cannot answer this request (it does not speak
	// the request's API, or the request does not translate to it), as the
	// provider adapter tells the shell.
	Unserved bool
	// Estimate is the request's estimate on this target when its provider
	// counts the request otherwise than the client's API does (a chat
	// completion translated to Anthropic Messages is counted as the
	// Messages request it becomes, with Claude's tokenizer); zero: the
	// request's Estimate. Its reservations and reconciles use it.
	Estimate Usage
}

// EstimateOn is the request's estimate on target t: t's own, else the
// request's.
func (r *Request) EstimateOn(t *Target) Usage {
	if t.Estimate != (Usage{}) {
		return t.Estimate
	}
	return r.Estimate
}

// SpendMicros is the cost of in input and out output tokens on t.
func (t *Target) SpendMicros(in, out int64) int64 {
	return int64(math.Ceil(float64(in)*t.InputCostPerMTok + float64(out)*t.OutputCostPerMTok))
}

// Usage is a token count: an estimate or what the provider reported.
type Usage struct {
	InputTokens, CachedInputTokens, OutputTokens int64
}

// InputKind names an Input.
type InputKind uint8

// Inputs.
const (
	// Start begins the life: the first reservation.
	Start InputKind = iota
	// Decided: the ledger's Decision for Attempt.
	Decided
	// ProduceFailed: the Produce effect of Attempt failed (the broker did
	// not take it).
	ProduceFailed
	// TimerFired: a timer set by a SetTimer effect is due.
	TimerFired
	// UpstreamDone: the Dispatch of Attempt ended before any byte reached
	// the client: an answer (Upstream.Status), or none (Status 0 and
	// Upstream.Failure).
	UpstreamDone
	// StreamStarted: the provider answered 2xx to a stream, whose first
	// byte goes to the client next. From here on no retry is possible.
	StreamStarted
	// StreamEnded: the stream relay ended (Upstream.Failure says why if it
	// was cut).
	StreamEnded
	// ClientGone: the client closed the request.
	ClientGone
)

// Input is one thing that happened to the request.
type Input struct {
	Kind     InputKind
	Attempt  int32
	Decision schemas.Decision
	Timer    Timer
	Upstream Upstream
	// EmergencyOK, with a TimerFired of the answer timer or a
	// ProduceFailed: the gateway's emergency cap admits one request now.
	EmergencyOK bool
	// DegradedOK, likewise: the gateway's degraded-mode share covers this
	// request now (Degraded.Admit said so).
	DegradedOK bool
}

// Upstream is what a Dispatch brought back.
type Upstream struct {
	// Status is the provider's HTTP status; 0 means no (complete) answer.
	Status int
	// Failure says why there was no answer or the stream was cut:
	// ReasonClientDisconnect, ReasonDeadline or ReasonError. "" = none.
	Failure schemas.Reason
	// BuildError: the provider request could not be built (nothing sent).
	BuildError string
	// Rejection is the parsed refusal of a Status ≥ 400.
	Rejection    schemas.ProviderRejected
	Observations []schemas.Observation // rate-limit headers
	Usage        Usage
	Partial      bool // usage counted from an interrupted stream
	FirstByteMs  int64
	TotalMs      int64
}

// TimerKind names a timer.
type TimerKind uint8

// Timers.
const (
	TimerAnswer   TimerKind = iota + 1 // the ledger's answer bound of Attempt
	TimerDeadline                      // the request's deadline
)

// Timer is a timer a lifecycle set; a timer that no longer applies when it
// fires (its attempt was answered) changes nothing.
type Timer struct {
	Kind    TimerKind
	Attempt int32
}

// EffectKind names an Effect.
type EffectKind uint8

// Effects.
const (
	// Produce Event (a ReserveRequested or RetryRequested) to
	// sluice.requests and wait for the broker's ack; a failure comes back
	// as ProduceFailed. The gateway waits for decisions in Event.Scope
	// from now on (it heartbeats the scope).
	Produce EffectKind = iota + 1
	// Report Event to sluice.requests without waiting (reconcile, release,
	// provider feedback). Events of one request keep their order.
	Report
	// Telemetry sends Event to sluice.telemetry (Dispatched, Outcome).
	Telemetry
	// WaitEnded: the wait for decisions in Scope ended with Decision (zero
	// when none came): the gateway's heartbeat bookkeeping.
	WaitEnded
	// Dispatch sends Attempt to Request.Targets[Target]. It comes back as
	// UpstreamDone, or StreamStarted then StreamEnded.
	Dispatch
	// Relay: go on relaying the provider's stream of Attempt to the
	// client; it comes back as StreamEnded.
	Relay
	// Respond answers the client: with Error in the error contract, or
	// (Error nil) with the provider's answer the shell holds.
	Respond
	// SetTimer asks for TimerFired with Timer once nowMs reaches AtMs.
	SetTimer
	// Count adds one to the gateway metric Metric with label Label.
	Count
)

// Metric names a gateway metric a Count effect adds to.
type Metric uint8

// Metrics.
const (
	MetricRequests  Metric = iota + 1 // requests by outcome or error code
	MetricLateGrant                   // late grants by action (reserved_again, refused)
	MetricDegraded                    // degraded-mode admissions (admitted)
)

// Effect is one thing the shell must do, in order.
type Effect struct {
	Kind     EffectKind
	Event    *schemas.Event
	Scope    string
	Decision schemas.Decision
	Target   int
	Attempt  int32
	Error    *apierr.Error
	Timer    Timer
	AtMs     int64
	Metric   Metric
	Label    string
}

type phase uint8

const (
	reserving phase = iota + 1 // waiting for the ledger's decision on attempt
	upstream                   // attempt dispatched, nothing sent to the client yet
	streaming                  // the provider's stream is being relayed
	done                       // the client has its answer
)

// Lifecycle is one request's state. Create it with New and drive it with
// Step from one goroutine.
type Lifecycle struct {
	cfg Config
	req Request

	order    []int // Eligible(req): the targets the request may use
	phase    phase
	ti       int   // current target: req.Targets[order[ti]]
	attempt  int32 // current attempt (1-based)
	answered bool  // the ledger answered the current wait (queued counts)
	held     bool  // the current wait outlived the answer bound (holdsThrough)
	// rec is the current attempt's reservation: envelope and estimates.
	// For a retry it is never produced itself, but it is what the
	// emergency path and every later event and error are built from.
	rec *schemas.Event
	// waitOn is the event whose decision the current wait expects (rec or
	// a RetryRequested).
	waitOn     *schemas.Event
	lastRej    *schemas.ProviderRejected // the refusal the current retry follows
	lateGrants int                       // late grants released and reserved again
	queueMs    int64                     // enqueue → first upstream attempt
	svcPriorMs int64                     // the longest service time a deadline refusal named
	grant      schemas.Decision          // the dispatched attempt's grant
	emergency  bool                      // the current attempt was admitted locally
	degraded   bool                      // … in degraded mode
	streamed   bool                      // a stream reached the client: no retry, ever

	out []Effect
}

// New returns the lifecycle of req under cfg. It panics on a request
// without an eligible target (the shell checks Eligible first) or a config
// without an answer bound: programmer errors.
func New(cfg Config, req Request) *Lifecycle {
	order := Eligible(&req)
	if len(order) == 0 || cfg.AnswerTimeoutMs <= 0 {
		panic("lifecycle: a request needs an eligible target and an answer bound")
	}
	// Step reuses out; sized once for the effects a step emits (a handful),
	// it is one allocation per request instead of one per doubling.
	return &Lifecycle{cfg: cfg, req: req, order: order, out: make([]Effect, 0, 8)}
}

// Done reports whether the client has its answer and nothing is held.
func (l *Lifecycle) Done() bool { return l.phase == done }

// Attempts is the number of attempts so far.
func (l *Lifecycle) Attempts() int32 { return l.attempt }

// Awaiting reports whether the ledger's first answer to attempt is still
// awaited (the shell then takes an emergency-cap slot only when it can be
// used).
func (l *Lifecycle) Awaiting(attempt int32) bool {
	return l.phase == reserving && attempt == l.attempt && !l.answered && !l.emergency
}

// Target is the index in Request.Targets of the current attempt's target.
func (l *Lifecycle) Target() int { return l.order[l.ti] }

// DegradedAdmitted reports whether the current attempt was admitted
// locally in degraded mode.
func (l *Lifecycle) DegradedAdmitted() bool { return l.degraded }

// QueueMs is the wait from the request's start to its first dispatch.
func (l *Lifecycle) QueueMs() int64 { return l.queueMs }

// Streamed reports whether the response was (or is being) streamed to the
// client.
func (l *Lifecycle) Streamed() bool { return l.streamed }

// Step applies in at nowMs (unix ms, the gateway's clock) and returns the
// effects to execute, in order. The slice is reused by the next Step.
func (l *Lifecycle) Step(nowMs int64, in Input) []Effect {
	l.out = l.out[:0]
	if l.phase == done {
		return l.out
	}
	if invariants.Enabled {
		defer l.checkStep(l.phase, in.Kind)
	}
	switch in.Kind {
	case Start:
		if l.phase == 0 {
			l.attempt = 1
			if l.req.DeadlineMs > 0 {
				l.setTimer(Timer{Kind: TimerDeadline}, l.req.StartMs+l.req.DeadlineMs)
			}
			l.reserve(nowMs)
		}
	case Decided:
		if l.phase == reserving && in.Attempt == l.attempt && !l.emergency {
			l.decided(nowMs, in.Decision)
		}
	case ProduceFailed:
		if l.phase == reserving && in.Attempt == l.attempt && !l.answered {
			l.ledgerSilent(nowMs, l.local(nowMs, in), false)
		}
	case TimerFired:
		l.timer(nowMs, in)
	case UpstreamDone:
		if l.phase == upstream && in.Attempt == l.attempt {
			l.upstreamDone(nowMs, &in.Upstream)
		}
	case StreamStarted:
		if l.phase == upstream && in.Attempt == l.attempt {
			l.observed(nowMs, in.Upstream.Observations)
			l.phase, l.streamed = streaming, true
			l.emit(Effect{Kind: Relay, Attempt: l.attempt})
		}
	case StreamEnded:
		if l.phase == streaming && in.Attempt == l.attempt {
			l.streamEnded(nowMs, &in.Upstream)
		}
	case ClientGone:
		if l.phase == reserving {
			l.stopWaiting(nowMs, schemas.ReasonCancel)
			l.fail(nowMs, cancelledWaiting(), schemas.GDQueued)
		}
		// While dispatched, the shell's upstream call is cancelled with the
		// client and comes back as UpstreamDone or StreamEnded.
	}
	return l.out
}

func (l *Lifecycle) timer(nowMs int64, in Input) {
	switch in.Timer.Kind {
	case TimerAnswer:
		if l.phase == reserving && in.Timer.Attempt == l.attempt && !l.answered && !l.emergency {
			if l.holdsThrough(nowMs, l.local(nowMs, in)) {
				l.held = true
				return
			}
			l.ledgerSilent(nowMs, l.local(nowMs, in), true)
		}
	case TimerDeadline:
		if l.phase == reserving && l.held && !l.answered && !l.emergency {
			// Held through the ledger's silence to the end: the ledger
			// is what failed, not the capacity.
			l.ledgerSilent(nowMs, localNone, true)
			return
		}
		if l.phase == reserving {
			l.stopWaiting(nowMs, schemas.ReasonCancel)
			l.fail(nowMs, deadlineWaiting(l.req.DeadlineMs), schemas.GDQueuedThenExpired)
		}
	}
}

// holdsThrough reports whether a wait the ledger left unanswered for the
// answer bound goes on instead of failing: while the request's deadline
// allows, and no emergency admission applies. A reservation whose event
// the broker acked is in the log, so it is decided once a ledger owns its
// partition again — after a takeover the next owner reads on from the last
// committed offset, which is before every input whose decision was not
// committed — and a decision the dead owner produced in an aborted
// transaction comes again with the same ids (the client's Dedup drops the
// copy). Waiting needs no new event; failing at the first answer bound
// answered 503 to every request that a 2–10 s takeover would have served.
func (l *Lifecycle) holdsThrough(nowMs int64, la localAdmission) bool {
	if la != localNone {
		return false
	}
	at := l.deadlineAt()
	return at > 0 && nowMs < at
}

// reserve asks the ledger for the current attempt on the current target.
func (l *Lifecycle) reserve(nowMs int64) {
	l.rec = l.reserveEvent(nowMs)
	l.wait(nowMs, l.rec)
}

func (l *Lifecycle) wait(nowMs int64, ev *schemas.Event) {
	l.phase, l.waitOn, l.answered, l.emergency, l.degraded, l.held = reserving, ev, false, false, false, false
	l.emit(Effect{Kind: Produce, Event: ev, Attempt: l.attempt})
	l.setTimer(Timer{Kind: TimerAnswer, Attempt: l.attempt}, nowMs+l.cfg.AnswerTimeoutMs)
}

// stopWaiting ends a wait the client no longer needs: the ledger drops the
// reservation (queued or about to be).
func (l *Lifecycle) stopWaiting(nowMs int64, reason schemas.Reason) {
	l.emit(Effect{Kind: Report, Event: l.released(nowMs, l.waitOn, reason)})
	l.emit(Effect{Kind: WaitEnded, Scope: l.waitOn.Scope})
}

// ledgerSilent handles a wait the ledger did not answer (timedOut) or
// whose event never reached the broker: admit locally under the emergency
// cap, or fail closed. The emergency reservation is a new attempt carrying
// the current attempt's whole reservation, flagged, so the ledger charges
// it whether the silent wait was a reservation or a retry.
func (l *Lifecycle) ledgerSilent(nowMs int64, la localAdmission, timedOut bool) {
	if timedOut {
		l.stopWaiting(nowMs, schemas.ReasonLedgerTimeout)
	} else {
		l.emit(Effect{Kind: WaitEnded, Scope: l.waitOn.Scope})
	}
	if la == localNone {
		l.fail(nowMs, ledgerUnavailable(), schemas.GDLedgerUnavailable)
		return
	}
	l.attempt++
	ev := l.reserveEvent(nowMs)
	ev.ReserveRequested.EmergencyAdmitted = true
	d := schemas.Decision{Status: schemas.StatusGranted, Reason: schemas.ReasonEmergencyCap, GatewayDecision: schemas.GDEmergencyAdmitted}
	if la == localDegraded {
		// Still an emergency admission to the ledger (one that predates
		// the flag charges it the same way), named for what it is.
		ev.ReserveRequested.Degraded = true
		d.Reason, d.GatewayDecision = schemas.ReasonDegradedMode, schemas.GDDegradedAdmitted
		l.emit(Effect{Kind: Count, Metric: MetricDegraded, Label: "admitted"})
	}
	l.rec, l.waitOn, l.emergency, l.degraded = ev, ev, true, la == localDegraded
	l.emit(Effect{Kind: Report, Event: ev})
	l.emit(Effect{Kind: WaitEnded, Scope: ev.Scope, Decision: d})
	l.dispatch(nowMs, d)
}

// decided follows the ledger's decision on the current attempt.
func (l *Lifecycle) decided(nowMs int64, d schemas.Decision) {
	l.answered = true
	if d.Status == schemas.StatusQueued {
		return // the terminal decision follows
	}
	l.emit(Effect{Kind: WaitEnded, Scope: l.waitOn.Scope, Decision: d})
	if d.Status != schemas.StatusGranted {
		l.refused(nowMs, d)
		return
	}
	if v := judgeGrant(d, nowMs, l.cfg.LateGrantBoundMs, l.deadlineAt(), l.lateGrants); v != grantInTime {
		// Too late after the ledger decided: dispatching now would join
		// a burst (late.go). Give it back and, if the deadline allows,
		// ask again at the ledger's current log time.
		l.emit(Effect{Kind: Report, Event: l.released(nowMs, l.rec, schemas.ReasonLateGrant)})
		if v == lateRefuse {
			l.emit(Effect{Kind: Count, Metric: MetricLateGrant, Label: "refused"})
			l.fail(nowMs, lateGrantError(nowMs-d.LogTimeMs, l.cfg.LateGrantBoundMs), schemas.GDLateGrant)
			return
		}
		l.emit(Effect{Kind: Count, Metric: MetricLateGrant, Label: "reserved_again"})
		l.lateGrants++
		l.attempt++
		l.reserve(nowMs)
		return
	}
	l.dispatch(nowMs, d)
}

// refused follows a refusal. A denial may allow a fallback (the class
// overloads to fallback, or the ledger refused a retry after a provider
// rejection): the fallback is a new reservation, in its own scope, that the
// ledger decides like any other.
func (l *Lifecycle) refused(nowMs int64, d schemas.Decision) {
	if d.Reason == schemas.ReasonDeadlineBelowService {
		// The route's service time where it was learned: the fallback's
		// ledger may not know it (ReserveRequested.ServicePriorMs).
		l.svcPriorMs = max(l.svcPriorMs, d.Needed)
	}
	if l.ti+1 < len(l.order) && (d.FallbackAllowed || (l.lastRej != nil && d.RetryClass != schemas.RetryDeadline)) {
		l.ti++
		l.attempt++
		l.lastRej = nil
		l.reserve(nowMs)
		return
	}
	if l.lastRej != nil {
		l.fail(nowMs, providerError(*l.lastRej, l.rec, d), schemas.GDAdmittedThenProviderReject)
		return
	}
	l.fail(nowMs, decisionError(d, l.rec), d.GatewayDecision)
}

func (l *Lifecycle) dispatch(nowMs int64, d schemas.Decision) {
	if l.queueMs == 0 {
		l.queueMs = max(1, nowMs-l.req.StartMs)
	}
	l.phase, l.grant = upstream, d
	t := l.target()
	dis := l.derive(nowMs, schemas.TypeDispatched, l.rec)
	dis.Dispatched = &schemas.Dispatched{Provider: t.Kind, Deployment: t.Provider, Model: t.Model, QueueMs: l.queueMs, Fallback: l.ti > 0}
	l.emit(Effect{Kind: Telemetry, Event: dis})
	l.emit(Effect{Kind: Dispatch, Target: l.order[l.ti], Attempt: l.attempt})
}

// upstreamDone follows an attempt that ended before any byte reached the
// client.
func (l *Lifecycle) upstreamDone(nowMs int64, u *Upstream) {
	t := l.target()
	switch {
	case u.BuildError != "":
		l.emit(Effect{Kind: Report, Event: l.released(nowMs, l.rec, schemas.ReasonError)})
		l.fail(nowMs, apierr.New(500, apierr.CodeInternal, u.BuildError), schemas.GDAdmitted)
		return
	case u.Status == 0:
		l.emit(Effect{Kind: Report, Event: l.released(nowMs, l.rec, failureReason(u.Failure))})
		l.fail(nowMs, transportError(failureReason(u.Failure), t.Provider, l.req.DeadlineMs), schemas.GDAdmitted)
		return
	}
	l.observed(nowMs, u.Observations)
	if u.Status >= 400 {
		l.upstreamError(nowMs, u)
		return
	}
	l.emit(Effect{Kind: Respond})
	l.reconcile(nowMs, u, int32(u.Status), false)
	l.outcome(nowMs, schemas.OutcomeSuccess, int32(u.Status), "", l.successDecision(), u.Usage)
	l.emit(Effect{Kind: Count, Metric: MetricRequests, Label: string(schemas.OutcomeSuccess)})
	l.phase = done
}

// upstreamError handles a provider status ≥ 400 before any byte reached
// the client. Capacity refusals (429, 5xx) become ProviderRejected, which
// settles the grant in the ledger and cools the scope; a retryable one is
// then a RetryRequested the ledger answers like a reservation (queued until
// the backoff and Retry-After floor pass, then granted, or denied when the
// budget or deadline says no). Other errors are final: the grant is
// reconciled with no usage and the client gets the error contract with the
// provider's scrubbed message.
func (l *Lifecycle) upstreamError(nowMs int64, u *Upstream) {
	t := l.target()
	if u.Status == 429 || u.Status >= 500 {
		rej := u.Rejection
		rej.Deployment = t.Provider
		pr := l.derive(nowMs, schemas.TypeProviderRejected, l.rec)
		pr.ProviderRejected = &rej
		l.emit(Effect{Kind: Report, Event: pr})
		class := rej.Kind.RetryClass()
		if !class.Retryable() {
			l.fail(nowMs, providerError(rej, l.rec, schemas.Decision{}), schemas.GDAdmittedThenProviderReject)
			return
		}
		l.lastRej = &rej
		prev := l.rec
		l.attempt++
		retry := l.derive(nowMs, schemas.TypeRetryRequested, prev)
		retry.Attempt = l.attempt
		retry.RetryRequested = &schemas.RetryRequested{PreviousAttempt: prev.Attempt, Reason: class, RetryAfterMs: rej.RetryAfterMs}
		// rec stays the attempt's record (envelope and estimates for the
		// events and errors that follow); it is never produced itself.
		next := *prev
		rr := *prev.ReserveRequested
		next.ReserveRequested, next.Attempt = &rr, l.attempt
		l.rec = &next
		l.wait(nowMs, retry)
		return
	}
	l.reconcile(nowMs, &Upstream{}, int32(u.Status), false)
	l.fail(nowMs, upstreamStatusError(u.Status, t.Provider, u.Rejection.Message), schemas.GDAdmitted)
}

// streamEnded settles a stream: it is never retried, whatever cut it.
// Input the provider never reported (a cut stream) is taken from the
// estimate: the prompt was sent.
func (l *Lifecycle) streamEnded(nowMs int64, u *Upstream) {
	status := int32(200)
	outcome, code := schemas.OutcomeSuccess, ""
	if u.Failure != "" {
		u.Partial = true
		status, outcome, code = 499, schemas.OutcomeCancelled, apierr.CodeCancelled
		switch u.Failure {
		case schemas.ReasonDeadline:
			status, outcome, code = 504, schemas.OutcomeTimeout, apierr.CodeDeadlineExceeded
		case schemas.ReasonError:
			status, outcome, code = 502, schemas.OutcomeFailure, apierr.CodeUpstreamError
		}
	}
	l.reconcile(nowMs, u, status, true)
	l.outcome(nowMs, outcome, status, code, schemas.GDAdmitted, u.Usage)
	l.emit(Effect{Kind: Count, Metric: MetricRequests, Label: string(outcome)})
	l.phase = done
}

// fail answers the client with e (in the API's envelope) and records the
// outcome. Any grant is already settled.
func (l *Lifecycle) fail(nowMs int64, e *apierr.Error, gd schemas.GatewayDecision) {
	if e.Sluice.GatewayDecision == "" {
		e.Sluice.GatewayDecision = gd
	}
	fillSluice(e, l.rec)
	status := schemas.OutcomeFailure
	switch {
	case e.Code == apierr.CodeCancelled:
		status = schemas.OutcomeCancelled
	case e.Code == apierr.CodeDeadlineExceeded || e.Code == apierr.CodeQueueTimeout:
		status = schemas.OutcomeTimeout
	}
	l.outcome(nowMs, status, int32(e.Status), e.Code, e.Sluice.GatewayDecision, Usage{})
	l.emit(Effect{Kind: Count, Metric: MetricRequests, Label: e.Code})
	l.emit(Effect{Kind: Respond, Error: e})
	l.phase = done
}

func (l *Lifecycle) reconcile(nowMs int64, u *Upstream, status int32, streaming bool) {
	t := l.target()
	est := l.req.EstimateOn(t)
	in := u.Usage.InputTokens
	if in == 0 && u.Partial {
		in = est.InputTokens
	}
	rec := l.derive(nowMs, schemas.TypeReconciled, l.rec)
	rec.Reconciled = &schemas.Reconciled{
		InputTokens: in, CachedInputTokens: u.Usage.CachedInputTokens, OutputTokens: u.Usage.OutputTokens,
		SpendMicros: t.SpendMicros(in, u.Usage.OutputTokens), HTTPStatus: status,
		FirstByteMs: u.FirstByteMs, TotalMs: u.TotalMs, Streaming: streaming, Partial: u.Partial,
		EstimatedInputTokens: est.InputTokens, EstimatedOutputTokens: est.OutputTokens,
	}
	l.emit(Effect{Kind: Report, Event: rec})
}

func (l *Lifecycle) observed(nowMs int64, obs []schemas.Observation) {
	if len(obs) == 0 {
		return
	}
	po := l.derive(nowMs, schemas.TypeProviderObserved, l.rec)
	po.ProviderObserved = &schemas.ProviderObserved{Deployment: l.target().Provider, Observations: obs}
	l.emit(Effect{Kind: Report, Event: po})
}

func (l *Lifecycle) outcome(nowMs int64, status schemas.OutcomeStatus, httpStatus int32, code string, gd schemas.GatewayDecision, u Usage) {
	o := l.derive(nowMs, schemas.TypeOutcome, l.rec)
	o.Outcome = &schemas.Outcome{Status: status, HTTPStatus: httpStatus, Attempts: l.attempt, QueueMs: l.queueMs,
		TotalMs: nowMs - l.req.StartMs, ErrorCode: code, GatewayDecision: gd, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	l.emit(Effect{Kind: Telemetry, Event: o})
}

// successDecision says how a successful request got through.
func (l *Lifecycle) successDecision() schemas.GatewayDecision {
	if l.grant.GatewayDecision != "" {
		return l.grant.GatewayDecision
	}
	return schemas.GDAdmitted
}

func (l *Lifecycle) deadlineAt() int64 {
	if l.req.DeadlineMs > 0 {
		return l.req.StartMs + l.req.DeadlineMs
	}
	return 0
}

// reserveEvent builds the ReserveRequested of the current attempt on the
// current target.
func (l *Lifecycle) reserveEvent(nowMs int64) *schemas.Event {
	t := l.target()
	ev := &schemas.Event{V: schemas.Version, Type: schemas.TypeReserveRequested, ProducedAtMs: nowMs,
		RequestID: l.req.ID, Attempt: l.attempt, Node: l.req.Node,
		Scope: t.Scope, Tenant: l.req.Tenant, KeyID: l.req.KeyID, Route: t.Profile, Class: l.req.Class}
	deadline := int64(0)
	if l.req.DeadlineMs > 0 {
		deadline = max(1, l.req.DeadlineMs-(nowMs-l.req.StartMs))
	}
	est := l.req.EstimateOn(t)
	e := &est
	ev.ReserveRequested = &schemas.ReserveRequested{
		Path:              t.Path,
		InputTokens:       e.InputTokens,
		CachedInputTokens: e.CachedInputTokens,
		OutputTokens:      e.OutputTokens,
		MaxOutputTokens:   l.req.MaxOutputTokens,
		SpendMicros:       t.SpendMicros(e.InputTokens, e.OutputTokens),
		Streaming:         l.req.Streaming,
		Priority:          l.req.Priority,
		DeadlineMs:        deadline,
		FallbackAllowed:   l.req.FallbackAllowed && len(l.order) > 1,
		PromptFamily:      l.req.PromptFamily,
		ClientRetryCount:  l.req.ClientRetryCount,
		ServicePriorMs:    l.svcPriorMs,
	}
	return ev
}

// derive is schemas.Event.DeriveWithID without the id (the shell stamps it): an
// event of type t about ev's attempt, with no payload.
func (l *Lifecycle) derive(nowMs int64, t schemas.Type, ev *schemas.Event) *schemas.Event {
	out := &schemas.Event{V: schemas.Version, Type: t, ProducedAtMs: nowMs}
	out.RequestID, out.Attempt, out.Node = ev.RequestID, ev.Attempt, ev.Node
	out.Scope, out.Tenant, out.KeyID, out.Route, out.Class = ev.Scope, ev.Tenant, ev.KeyID, ev.Route, ev.Class
	return out
}

// released is the Released that gives back ev's attempt.
func (l *Lifecycle) released(nowMs int64, ev *schemas.Event, reason schemas.Reason) *schemas.Event {
	rel := l.derive(nowMs, schemas.TypeReleased, ev)
	rel.Released = &schemas.Released{Reason: reason}
	return rel
}

// target is the current target.
func (l *Lifecycle) target() *Target { return &l.req.Targets[l.order[l.ti]] }

func (l *Lifecycle) setTimer(t Timer, atMs int64) {
	l.emit(Effect{Kind: SetTimer, Timer: t, AtMs: atMs})
}

func (l *Lifecycle) emit(e Effect) { l.out = append(l.out, e) }

// failureReason is the Released reason of an attempt that got no answer.
func failureReason(r schemas.Reason) schemas.Reason {
	switch r {
	case schemas.ReasonClientDisconnect, schemas.ReasonDeadline:
		return r
	}
	return schemas.ReasonError
}

// localAdmission is how a request the ledger left unanswered may be
// admitted by the gateway itself.
type localAdmission uint8

const (
	localNone      localAdmission = iota // fail closed
	localDegraded                        // degraded mode: within the share
	localEmergency                       // the emergency cap
)

// local is the local admission in allows at nowMs: degraded mode first (it
// is bounded by the capacity the ledger last reported), then the emergency
// cap; none once the request's deadline has passed (a produce abandoned at
// the deadline: the dispatch could only fail, and the share is kept for
// requests that can use it).
func (l *Lifecycle) local(nowMs int64, in Input) localAdmission {
	switch at := l.deadlineAt(); {
	case at > 0 && nowMs >= at:
		return localNone
	case l.cfg.Degraded && in.DegradedOK:
		return localDegraded
	case l.cfg.Emergency && in.EmergencyOK:
		return localEmergency
	}
	return localNone
}
