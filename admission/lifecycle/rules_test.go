package lifecycle

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// Step tables, one per rule. Each row: the gateway's clock, the input, the
// effects. Requests start at t=1000.

func TestGrantedDispatchedAndReconciled(t *testing.T) {
	runSteps(t, testConfig, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: queued(1)},
		// A queued answer stops the answer bound: the late timer is a no-op.
		{At: 3000, In: silent(1, false)},
		{At: 3200, In: granted(1, 3150), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"},
			Check: func(t *testing.T, l *Lifecycle, _ []Effect) {
				if l.QueueMs() != 2200 {
					t.Errorf("queue ms %d, want 2200", l.QueueMs())
				}
			}},
		{At: 3500, In: answered(1, 200), Want: []string{"respond upstream", "report Reconciled s1/1 200 in=90 out=40",
			"telemetry Outcome s1/1 success admitted", "count requests success"}},
		// Done: anything later changes nothing.
		{At: 3600, In: granted(1, 3150)},
		{At: 3600, In: clientGone()},
	})
}

func TestDeniedAnswersInTheErrorContract(t *testing.T) {
	runSteps(t, testConfig, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1005, In: denied(1, schemas.ReasonNoCapacity, schemas.RetryCapacity, false), Want: []string{"wait_ended s1 denied",
			"telemetry Outcome s1/1 failure rejected_locally", "count requests rate_limit_exceeded", "respond 429 rate_limit_exceeded rejected_locally"}},
	})
	runSteps(t, testConfig, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1005, In: decided(1, schemas.Decision{Status: schemas.StatusExpired, Reason: schemas.ReasonMaxWaitExceeded, GatewayDecision: schemas.GDQueuedThenExpired}),
			Want: []string{"wait_ended s1 expired", "telemetry Outcome s1/1 timeout queued_then_expired", "count requests queue_timeout", "respond 429 queue_timeout queued_then_expired"}},
	})
}

func TestFallbackOnADenialThatAllowsIt(t *testing.T) {
	runSteps(t, testConfig, request("s1", "s2"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1005, In: denied(1, schemas.ReasonQueueFull, schemas.RetryOverload, true), Want: []string{"wait_ended s1 denied",
			"produce ReserveRequested s2/2", "timer answer/2 @3005"}},
		// A decision for the abandoned attempt is not this wait's.
		{At: 1006, In: granted(1, 1006)},
		{At: 1010, In: granted(2, 1010), Want: []string{"wait_ended s2 granted", "telemetry Dispatched s2/2", "dispatch 1/2"}},
	})
	// No fallback target left: the denial is the answer.
	runSteps(t, testConfig, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1005, In: denied(1, schemas.ReasonQueueFull, schemas.RetryOverload, true), Want: []string{"wait_ended s1 denied",
			"telemetry Outcome s1/1 failure rejected_locally", "count requests rate_limit_exceeded", "respond 429 rate_limit_exceeded rejected_locally"}},
	})
}

// TestFallbackCarriesTheServiceTime: a deadline refusal names the route's
// expected service time (Needed); the fallback's reservation carries it
// (ServicePriorMs), since its scope's ledger, often another partition,
// may not have learned the route. A reservation before any such refusal
// carries none.
func TestFallbackCarriesTheServiceTime(t *testing.T) {
	prior := func(want int64) func(*testing.T, *Lifecycle, []Effect) {
		return func(t *testing.T, _ *Lifecycle, out []Effect) {
			t.Helper()
			for _, e := range out {
				if e.Kind == Produce && e.Event.Type == schemas.TypeReserveRequested {
					if got := e.Event.ReserveRequested.ServicePriorMs; got != want {
						t.Errorf("service_prior_ms %d, want %d", got, want)
					}
					return
				}
			}
			t.Errorf("no ReserveRequested produced")
		}
	}
	expired := schemas.Decision{Status: schemas.StatusExpired, Reason: schemas.ReasonDeadlineBelowService, Needed: 1200, Available: 900,
		GatewayDecision: schemas.GDQueuedThenExpired, RetryClass: schemas.RetryDeadline, FallbackAllowed: true}
	runSteps(t, testConfig, request("s1", "s2"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}, Check: prior(0)},
		{At: 1010, In: queued(1)},
		{At: 1500, In: decided(1, expired), Want: []string{"wait_ended s1 expired", "produce ReserveRequested s2/2", "timer answer/2 @3500"}, Check: prior(1200)},
	})
}

func TestProviderRejectionAsksTheLedgerForARetry(t *testing.T) {
	runSteps(t, testConfig, request("s1", "s2"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: granted(1, 1010), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"}},
		{At: 1100, In: rejected(1, 429, schemas.KindRateLimited, 500), Want: []string{"report ProviderRejected s1/1 rate_limited",
			"produce RetryRequested s1/2 after 1 retryable_capacity", "timer answer/2 @3100"}},
		{At: 1150, In: queued(2)},
		{At: 1700, In: granted(2, 1690), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/2", "dispatch 0/2"}},
		{At: 1800, In: rejected(2, 503, schemas.KindOverloaded, 0), Want: []string{"report ProviderRejected s1/2 overloaded",
			"produce RetryRequested s1/3 after 2 retryable_overload", "timer answer/3 @3800"}},
		// The ledger refuses the retry: the fallback gets its chance.
		{At: 1810, In: denied(3, schemas.ReasonRetryBudgetExhausted, schemas.RetryPolicy, false), Want: []string{"wait_ended s1 denied",
			"produce ReserveRequested s2/4", "timer answer/4 @3810"}},
	})
	// Without a fallback the provider's refusal is the answer.
	runSteps(t, testConfig, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: granted(1, 1010), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"}},
		{At: 1100, In: rejected(1, 429, schemas.KindRateLimited, 500), Want: []string{"report ProviderRejected s1/1 rate_limited",
			"produce RetryRequested s1/2 after 1 retryable_capacity", "timer answer/2 @3100"}},
		{At: 1110, In: denied(2, schemas.ReasonDeadlineExceeded, schemas.RetryDeadline, false), Want: []string{"wait_ended s1 denied",
			"telemetry Outcome s1/2 failure admitted_then_provider_rejected", "count requests upstream_rate_limited",
			"respond 429 upstream_rate_limited admitted_then_provider_rejected"}},
	})
	// A deadline refusal of the retry never falls back.
	runSteps(t, testConfig, request("s1", "s2"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: granted(1, 1010), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"}},
		{At: 1100, In: rejected(1, 429, schemas.KindRateLimited, 0), Want: []string{"report ProviderRejected s1/1 rate_limited",
			"produce RetryRequested s1/2 after 1 retryable_capacity", "timer answer/2 @3100"}},
		{At: 1110, In: denied(2, schemas.ReasonDeadlineExceeded, schemas.RetryDeadline, false), Want: []string{"wait_ended s1 denied",
			"telemetry Outcome s1/2 failure admitted_then_provider_rejected", "count requests upstream_rate_limited",
			"respond 429 upstream_rate_limited admitted_then_provider_rejected"}},
	})
}

func TestNonRetryableProviderRefusalIsFinal(t *testing.T) {
	runSteps(t, testConfig, request("s1", "s2"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: granted(1, 1010), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"}},
		{At: 1100, In: rejected(1, 429, schemas.KindQuotaExhausted, 0), Want: []string{"report ProviderRejected s1/1 quota_exhausted",
			"telemetry Outcome s1/1 failure admitted_then_provider_rejected", "count requests insufficient_quota",
			"respond 429 insufficient_quota admitted_then_provider_rejected"}},
	})
	// A 400 is the caller's: reconciled with no usage, its status kept.
	runSteps(t, testConfig, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: granted(1, 1010), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"}},
		{At: 1100, In: answered(1, 400), Want: []string{"report Reconciled s1/1 400 in=0 out=0",
			"telemetry Outcome s1/1 failure admitted", "count requests upstream_request_error", "respond 400 upstream_request_error admitted"}},
	})
}

func TestNoRetryAfterAPartlyStreamedResponse(t *testing.T) {
	req := request("s1", "s2")
	req.Streaming = true
	runSteps(t, testConfig, req, []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: granted(1, 1010), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"}},
		{At: 1100, In: streamStarted(1), Want: []string{"relay 1"}, Check: func(t *testing.T, l *Lifecycle, _ []Effect) {
			if !l.Streamed() {
				t.Error("not marked streamed")
			}
		}},
		// The provider cuts the stream: settled with what was counted,
		// never retried and never falling back.
		{At: 1500, In: streamEnded(1, schemas.ReasonError), Want: []string{"report Reconciled s1/1 502 in=100 out=7 partial",
			"telemetry Outcome s1/1 failure admitted", "count requests failure"}},
		{At: 1600, In: rejected(1, 429, schemas.KindRateLimited, 0)},
	})
	runSteps(t, testConfig, req, []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: granted(1, 1010), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"}},
		{At: 1100, In: streamStarted(1), Want: []string{"relay 1"}},
		{At: 1200, In: streamEnded(1, schemas.ReasonClientDisconnect), Want: []string{"report Reconciled s1/1 499 in=100 out=7 partial",
			"telemetry Outcome s1/1 cancelled admitted", "count requests cancelled"}},
	})
}

func TestLateGrantIsReleasedAndReservedAgain(t *testing.T) {
	runSteps(t, testConfig, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: queued(1)},
		// Decided at log time 2000, reaching the gateway at 2301: late.
		{At: 2301, In: granted(1, 2000), Want: []string{"wait_ended s1 granted", "report Released s1/1 late_grant",
			"count late_grant reserved_again", "produce ReserveRequested s1/2", "timer answer/2 @4301"}},
		{At: 2700, In: granted(2, 2300), Want: []string{"wait_ended s1 granted", "report Released s1/2 late_grant",
			"count late_grant reserved_again", "produce ReserveRequested s1/3", "timer answer/3 @4700"}},
		// lateGrantRetriesMax reached: refused.
		{At: 3100, In: granted(3, 2700), Want: []string{"wait_ended s1 granted", "report Released s1/3 late_grant", "count late_grant refused",
			"telemetry Outcome s1/3 failure late_grant", "count requests late_grant", "respond 503 late_grant late_grant"}},
	})
}

func TestLedgerSilenceFailsClosed(t *testing.T) {
	runSteps(t, testConfig, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 3000, In: silent(1, true), Want: []string{"report Released s1/1 ledger_timeout", "wait_ended s1",
			"telemetry Outcome s1/1 failure ledger_unavailable", "count requests ledger_unavailable", "respond 503 ledger_unavailable ledger_unavailable"}},
	})
	runSteps(t, testConfig, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1001, In: Input{Kind: ProduceFailed, Attempt: 1}, Want: []string{"wait_ended s1",
			"telemetry Outcome s1/1 failure ledger_unavailable", "count requests ledger_unavailable", "respond 503 ledger_unavailable ledger_unavailable"}},
	})
}

// TestHeldThroughLedgerSilence (issue 19, item 3): a request with a
// deadline is not failed at the answer bound when the ledger is silent (a
// takeover): it waits on, with no new event, and is served when the next
// owner decides; held to its deadline, it gets 503 ledger_unavailable. The
// emergency cap, when it has room, still admits at the answer bound.
func TestHeldThroughLedgerSilence(t *testing.T) {
	req := request("s1")
	req.DeadlineMs = 8000
	runSteps(t, testConfig, req, []step{
		{At: 1000, In: start(), Want: []string{"timer deadline/0 @9000", "produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 3000, In: silent(1, false)},
		{At: 6500, In: granted(6, 6490)}, // another attempt's: ignored
		{At: 6500, In: granted(1, 6490), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"}},
	})
	runSteps(t, testConfig, req, []step{
		{At: 1000, In: start(), Want: []string{"timer deadline/0 @9000", "produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 3000, In: silent(1, false)},
		{At: 9000, In: fired(TimerDeadline, 0), Want: []string{"report Released s1/1 ledger_timeout", "wait_ended s1",
			"telemetry Outcome s1/1 failure ledger_unavailable", "count requests ledger_unavailable", "respond 503 ledger_unavailable ledger_unavailable"}},
	})
	// Queued before the silence: the ledger answered, the deadline is the
	// capacity's, as before.
	runSteps(t, testConfig, req, []step{
		{At: 1000, In: start(), Want: []string{"timer deadline/0 @9000", "produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: queued(1)},
		{At: 3000, In: silent(1, false)},
		{At: 9000, In: fired(TimerDeadline, 0), Want: []string{"report Released s1/1 cancel", "wait_ended s1",
			"telemetry Outcome s1/1 timeout queued_then_expired", "count requests deadline_exceeded", "respond 504 deadline_exceeded queued_then_expired"}},
	})
	cfg := testConfig
	cfg.Emergency = true
	runSteps(t, cfg, req, []step{
		{At: 1000, In: start(), Want: []string{"timer deadline/0 @9000", "produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 3000, In: silent(1, true), Want: []string{"report Released s1/1 ledger_timeout", "wait_ended s1",
			"report ReserveRequested s1/2 emergency", "wait_ended s1 granted", "telemetry Dispatched s1/2", "dispatch 0/2"}},
	})
}

// TestEmergencyCapKeepsRetries: with the emergency cap configured, a
// provider 429 still asks the ledger for a retry (the old gateway switched
// retries off, because its emergency path could only flag a
// ReserveRequested), and a retry the ledger leaves unanswered is admitted
// locally as a new attempt that carries the whole reservation.
func TestEmergencyCapKeepsRetries(t *testing.T) {
	cfg := testConfig
	cfg.Emergency = true
	runSteps(t, cfg, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: granted(1, 1010), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"}},
		{At: 1100, In: rejected(1, 429, schemas.KindRateLimited, 0), Want: []string{"report ProviderRejected s1/1 rate_limited",
			"produce RetryRequested s1/2 after 1 retryable_capacity", "timer answer/2 @3100"}},
		{At: 3100, In: silent(2, true), Want: []string{"report Released s1/2 ledger_timeout", "wait_ended s1",
			"report ReserveRequested s1/3 emergency", "wait_ended s1 granted", "telemetry Dispatched s1/3", "dispatch 0/3"},
			Check: func(t *testing.T, _ *Lifecycle, out []Effect) {
				rr := out[2].Event.ReserveRequested
				if rr == nil || rr.InputTokens != 100 || rr.OutputTokens != 50 || len(rr.Path) != 2 {
					t.Errorf("emergency reservation lacks the attempt's reservation: %+v", rr)
				}
			}},
		// The ledger's late grant of the emergency attempt is not awaited.
		{At: 3150, In: granted(3, 3140)},
		{At: 3300, In: answered(3, 200), Want: []string{"respond upstream", "report Reconciled s1/3 200 in=90 out=40",
			"telemetry Outcome s1/3 success emergency_admitted", "count requests success"}},
	})
	// No room under the cap: fail closed.
	runSteps(t, cfg, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 3000, In: silent(1, false), Want: []string{"report Released s1/1 ledger_timeout", "wait_ended s1",
			"telemetry Outcome s1/1 failure ledger_unavailable", "count requests ledger_unavailable", "respond 503 ledger_unavailable ledger_unavailable"}},
	})
}

func TestClientGoneAndDeadlineWhileWaiting(t *testing.T) {
	runSteps(t, testConfig, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1010, In: queued(1)},
		{At: 1500, In: clientGone(), Want: []string{"report Released s1/1 cancel", "wait_ended s1",
			"telemetry Outcome s1/1 cancelled queued", "count requests cancelled", "respond 499 cancelled queued"}},
	})
	req := request("s1")
	req.DeadlineMs = 800
	runSteps(t, testConfig, req, []step{
		{At: 1000, In: start(), Want: []string{"timer deadline/0 @1800", "produce ReserveRequested s1/1", "timer answer/1 @3000"},
			Check: func(t *testing.T, _ *Lifecycle, out []Effect) {
				if d := out[1].Event.ReserveRequested.DeadlineMs; d != 800 {
					t.Errorf("deadline %d, want 800", d)
				}
			}},
		{At: 1010, In: queued(1)},
		{At: 1800, In: fired(TimerDeadline, 0), Want: []string{"report Released s1/1 cancel", "wait_ended s1",
			"telemetry Outcome s1/1 timeout queued_then_expired", "count requests deadline_exceeded", "respond 504 deadline_exceeded queued_then_expired"}},
	})
}

func TestNoAnswerFromTheProviderReleasesTheGrant(t *testing.T) {
	for _, tc := range []struct {
		why  schemas.Reason
		want []string
	}{
		{schemas.ReasonError, []string{"report Released s1/1 error", "telemetry Outcome s1/1 failure admitted", "count requests upstream_error", "respond 502 upstream_error admitted"}},
		{schemas.ReasonClientDisconnect, []string{"report Released s1/1 client_disconnect", "telemetry Outcome s1/1 cancelled admitted", "count requests cancelled", "respond 499 cancelled admitted"}},
		{schemas.ReasonDeadline, []string{"report Released s1/1 deadline", "telemetry Outcome s1/1 timeout admitted", "count requests deadline_exceeded", "respond 504 deadline_exceeded admitted"}},
	} {
		runSteps(t, testConfig, request("s1"), []step{
			{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
			{At: 1010, In: granted(1, 1010), Want: []string{"wait_ended s1 granted", "telemetry Dispatched s1/1", "dispatch 0/1"}},
			// While dispatched, a client gone is the shell's to report.
			{At: 1050, In: clientGone()},
			{At: 1100, In: noAnswer(1, tc.why), Want: tc.want},
		})
	}
}
