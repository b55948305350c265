package gateway

import (
	"time"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/lifecycle"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/gateway/shell"
)

// A call is its request's shell.Env: the wall clock, the ledger client
// (Kafka), the HTTP upstream and the client's response, and the node's
// degraded mode, emergency cap and metrics.
var _ shell.Env = (*call)(nil)

// NowMs is the wall clock.
func (c *call) NowMs() int64 { return time.Now().UnixMilli() }

// Produce produces the reservation of attempt (request) and remembers
// since when its first decision is awaited
// (sluice_gateway_ledger_answer_seconds) and where the ledger's answer
// ends a degraded episode.
func (c *call) Produce(attempt int32, ev *schemas.Event) error {
	c.askedAttempt, c.askedAt, c.askedScope = attempt, time.Now(), ev.Scope
	err := c.request(ev)
	if err != nil {
		c.s.log.Warn("ledger unavailable", "request_id", c.reqID, "err", err)
	}
	return err
}

// Report counts a reconcile's tokens and learns from its output, then
// reports the event to the ledger (Server.report).
func (c *call) Report(ev *schemas.Event) {
	if rec := ev.Reconciled; rec != nil {
		c.s.m.countTokens(ev.Tenant, rec)
		c.s.learnOutput(ev.Route, rec)
	}
	c.s.report(stamp(ev))
}

// Telemetry sends an analytics event (Server.background).
func (c *call) Telemetry(ev *schemas.Event) { c.s.background(stamp(ev), false) }

// Settled tells the ledger client that the wait of scope ended.
func (c *call) Settled(scope string, d schemas.Decision) { c.s.rc.Settled(scope, d) }

// Wait waits for this request's next decision, the wake timer set to
// atMs, or the end of the client's context: the client gone, or the
// request's deadline.
func (c *call) Wait(atMs int64, timer bool) shell.Wake {
	d := time.Hour // no timer: something else will wake the request first
	if timer {
		d = min(d, time.Duration(max(0, atMs-time.Now().UnixMilli()))*time.Millisecond)
	}
	c.wake.Reset(d)
	select {
	case d := <-c.decisions:
		c.s.deg.answered(c.askedScope)
		if !c.askedAt.IsZero() && d.Attempt == c.askedAttempt {
			c.s.m.answer.Observe(time.Since(c.askedAt).Seconds())
			c.askedAt = time.Time{}
		}
		c.noteSendAt(d.Attempt, &d.Decision)
		return shell.Wake{Kind: shell.WakeDecision, Attempt: d.Attempt, Decision: d.Decision}
	case <-c.wake.C:
		return shell.Wake{Kind: shell.WakeTimer}
	case <-c.gone:
		c.gone = nil // closed for good; said once
		if c.r.Context().Err() != nil {
			return shell.Wake{Kind: shell.WakeClientGone}
		}
		return shell.Wake{Kind: shell.WakeDeadline}
	}
}

// Dispatch sends attempt upstream to the route's candidate target
// (upstream.go), once its grant's send-at has come (sendhold.go).
func (c *call) Dispatch(target int, attempt int32) lifecycle.Input {
	c.holdForSendAt(attempt)
	return c.dispatch(c.cands[target], attempt)
}

// Relay relays the stream held since the dispatch (stream.go).
func (c *call) Relay(attempt int32) lifecycle.Input { return c.relay(attempt) }

// Respond writes the lifecycle's answer (respond).
func (c *call) Respond(e *apierr.Error) { c.respond(e) }

// LocalAdmission says whether attempt, which the ledger left unanswered,
// may be admitted locally: degraded mode's share first, then the
// emergency cap (whose slot is taken only if the share said no).
func (c *call) LocalAdmission(attempt int32) (degradedOK, emergencyOK bool) {
	if degradedOK = c.degradedOK(attempt); !degradedOK {
		emergencyOK = c.emergencyOK(attempt)
	}
	return degradedOK, emergencyOK
}

// Count counts one of the lifecycle's metrics.
func (c *call) Count(m lifecycle.Metric, label string) {
	switch m {
	case lifecycle.MetricRequests:
		c.s.m.count(label)
		c.s.m.countTenant(c.id.Tenant, label)
	case lifecycle.MetricLateGrant:
		c.s.m.lateGrants.WithLabelValues(c.adm.Class, label).Inc()
	case lifecycle.MetricDegraded:
		c.s.m.degraded.WithLabelValues(c.adm.Class, label).Inc()
	}
}
