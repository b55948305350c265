package lifecycle

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestDegradedAdmission: with degraded mode on, a request the ledger left
// unanswered, and whose share the shell found room for, is admitted
// locally at the answer bound (not held to its deadline): a new attempt
// whose ReserveRequested carries degraded and emergency_admitted, so the
// ledger charges it when it reads it. Degraded mode comes before the
// emergency cap; without room in either the request fails closed, and one
// held through the silence to its deadline is never admitted late.
func TestDegradedAdmission(t *testing.T) {
	cfg := testConfig
	cfg.Degraded, cfg.Emergency = true, true
	req := request("s1")
	req.DeadlineMs = 8000
	runSteps(t, cfg, req, []step{
		{At: 1000, In: start(), Want: []string{"timer deadline/0 @9000", "produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 3000, In: silentDegraded(1), Want: []string{"report Released s1/1 ledger_timeout", "wait_ended s1",
			"count degraded admitted", "report ReserveRequested s1/2 degraded", "wait_ended s1 granted", "telemetry Dispatched s1/2", "dispatch 0/2"},
			Check: func(t *testing.T, l *Lifecycle, out []Effect) {
				if !l.DegradedAdmitted() {
					t.Error("DegradedAdmitted is false after a degraded admission")
				}
				if d := out[4].Decision; d.Reason != schemas.ReasonDegradedMode || d.GatewayDecision != schemas.GDDegradedAdmitted {
					t.Errorf("local grant = %+v, want reason degraded_mode, degraded_admitted", d)
				}
			}},
		{At: 3100, In: granted(2, 3090)}, // the ledger's own grant of it later: not awaited
		{At: 3300, In: answered(2, 200), Want: []string{"respond upstream", "report Reconciled s1/2 200 in=90 out=40",
			"telemetry Outcome s1/2 success degraded_admitted", "count requests success"}},
	})
	// No share left, the emergency cap has room: the cap admits it.
	runSteps(t, cfg, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 3000, In: silent(1, true), Want: []string{"report Released s1/1 ledger_timeout", "wait_ended s1",
			"report ReserveRequested s1/2 emergency", "wait_ended s1 granted", "telemetry Dispatched s1/2", "dispatch 0/2"}},
	})
	// Degraded mode off: a share the shell reports is not used.
	off := testConfig
	runSteps(t, off, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 3000, In: silentDegraded(1), Want: []string{"report Released s1/1 ledger_timeout", "wait_ended s1",
			"telemetry Outcome s1/1 failure ledger_unavailable", "count requests ledger_unavailable", "respond 503 ledger_unavailable ledger_unavailable"}},
	})
	// No share: held through the silence (deadline), then 503 at the
	// deadline, not admitted then.
	runSteps(t, cfg, req, []step{
		{At: 1000, In: start(), Want: []string{"timer deadline/0 @9000", "produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 3000, In: silent(1, false)},
		{At: 9000, In: fired(TimerDeadline, 0), Want: []string{"report Released s1/1 ledger_timeout", "wait_ended s1",
			"telemetry Outcome s1/1 failure ledger_unavailable", "count requests ledger_unavailable", "respond 503 ledger_unavailable ledger_unavailable"}},
	})
	// A produce abandoned at the request's deadline is not admitted: the
	// dispatch could only fail.
	runSteps(t, cfg, req, []step{
		{At: 1000, In: start(), Want: []string{"timer deadline/0 @9000", "produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 9000, In: Input{Kind: ProduceFailed, Attempt: 1, DegradedOK: true, EmergencyOK: true}, Want: []string{"wait_ended s1",
			"telemetry Outcome s1/1 failure ledger_unavailable", "count requests ledger_unavailable", "respond 503 ledger_unavailable ledger_unavailable"}},
	})
	// A produce that failed outright is admitted the same way.
	runSteps(t, cfg, request("s1"), []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}},
		{At: 1005, In: Input{Kind: ProduceFailed, Attempt: 1, DegradedOK: true}, Want: []string{"wait_ended s1",
			"count degraded admitted", "report ReserveRequested s1/2 degraded", "wait_ended s1 granted", "telemetry Dispatched s1/2", "dispatch 0/2"}},
	})
}

// degradedStep is one row of a budget step table: at At, a request of
// scope s (known: the ledger reported the scope; gateways alive) needing
// what bs say; Done gives back an earlier admission's slots instead;
// Answered ends the scope's episode instead.
type degradedStep struct {
	At       int64
	Scope    string
	Known    bool
	Gateways int
	Bs       []DegradedBucket
	Done     bool
	Answered bool
	Want     DegradedVerdict
}

func runDegraded(t *testing.T, cfg DegradedConfig, steps []degradedStep) {
	t.Helper()
	d := NewDegraded(cfg)
	for i, s := range steps {
		switch {
		case s.Done:
			d.Done(s.Bs)
		case s.Answered:
			d.Answered(s.Scope)
		default:
			if got := d.Admit(s.At, s.Scope, s.Known, s.Gateways, s.Bs); got != s.Want {
				t.Errorf("step %d (t=%d %s): %s, want %s", i, s.At, s.Scope, got, s.Want)
			}
		}
	}
}

// rpm is a requests bucket of 600 per minute with a 1 s window (burst 10)
// that the ledger last saw with rem left, and a request of it.
func rpm(rem int64) DegradedBucket {
	return DegradedBucket{Key: "s1/deployment:d/requests", Capacity: 600, PeriodMs: 60_000, BurstUnits: 10, Remaining: rem, Need: 1}
}

func conc(slots int64) DegradedBucket {
	return DegradedBucket{Key: "s1/deployment:d/concurrency", Concurrency: true, Capacity: slots, Need: 1}
}

// TestDegradedBudget: a gateway's local share is Share ÷ gateways of what
// the ledger last reported left (capped at the burst) and of its refill;
// it refuses beyond it, refuses every request MaxMs after the episode's
// first, knows nothing of a scope the ledger never reported, and starts
// again from the ledger's new report after an answer.
func TestDegradedBudget(t *testing.T) {
	cfg := DegradedConfig{Share: 0.5, MaxMs: 30_000}
	one := []DegradedBucket{rpm(10)}
	runDegraded(t, cfg, []degradedStep{
		// 2 gateways: 0.5 / 2 × 10 left = 2.5 requests now.
		{At: 1000, Scope: "s1", Known: true, Gateways: 2, Bs: one, Want: DegradedAdmitted},
		{At: 1000, Scope: "s1", Known: true, Gateways: 2, Bs: one, Want: DegradedAdmitted},
		{At: 1000, Scope: "s1", Known: true, Gateways: 2, Bs: one, Want: DegradedOverShare},
		// Refill at 0.25 × 10/s = 2.5/s: 0.5 left + 0.5 s × 2.5 = 1.75.
		{At: 1500, Scope: "s1", Known: true, Gateways: 2, Bs: one, Want: DegradedAdmitted},
		{At: 1500, Scope: "s1", Known: true, Gateways: 2, Bs: one, Want: DegradedOverShare},
		// Another scope: an episode of its own, and nothing known of it.
		{At: 1500, Scope: "s2", Known: false, Gateways: 2, Bs: one, Want: DegradedUnknown},
		// 30 s after the episode's first request: closed.
		{At: 30_999, Scope: "s1", Known: true, Gateways: 2, Bs: one, Want: DegradedAdmitted},
		{At: 31_000, Scope: "s1", Known: true, Gateways: 2, Bs: one, Want: DegradedExpired},
		// A ledger answered: the next silence starts afresh.
		{Scope: "s1", Answered: true},
		{At: 40_000, Scope: "s1", Known: true, Gateways: 2, Bs: one, Want: DegradedAdmitted},
	})
	// What the ledger reported left bounds the start, debt gives nothing,
	// and every bucket must cover the request or none is charged.
	runDegraded(t, cfg, []degradedStep{
		{At: 1000, Scope: "s1", Known: true, Gateways: 1, Bs: []DegradedBucket{rpm(-5)}, Want: DegradedOverShare},
		// 400 ms of refill at 0.5 × 10/s = 2 requests.
		{At: 1400, Scope: "s1", Known: true, Gateways: 1, Bs: []DegradedBucket{rpm(-5)}, Want: DegradedAdmitted},
		{At: 1400, Scope: "s1", Known: true, Gateways: 1, Bs: []DegradedBucket{rpm(-5), {Key: "s1/tenant:t/input_tokens", Capacity: 60_000, PeriodMs: 60_000, BurstUnits: 1000, Remaining: 1000, Need: 600}}, Want: DegradedOverShare},
		{At: 1400, Scope: "s1", Known: true, Gateways: 1, Bs: []DegradedBucket{rpm(-5)}, Want: DegradedAdmitted},
		{At: 1400, Scope: "s1", Known: true, Gateways: 1, Bs: []DegradedBucket{rpm(-5)}, Want: DegradedOverShare},
	})
	// Concurrency: 0.5 ÷ 2 of 8 slots = 2 in flight; a finished one gives
	// its slot back, even across episodes.
	two := []DegradedBucket{conc(8)}
	runDegraded(t, cfg, []degradedStep{
		{At: 1000, Scope: "s1", Known: true, Gateways: 2, Bs: two, Want: DegradedAdmitted},
		{At: 1000, Scope: "s1", Known: true, Gateways: 2, Bs: two, Want: DegradedAdmitted},
		{At: 1000, Scope: "s1", Known: true, Gateways: 2, Bs: two, Want: DegradedOverShare},
		{Bs: two, Done: true},
		{At: 1000, Scope: "s1", Known: true, Gateways: 2, Bs: two, Want: DegradedAdmitted},
		{Scope: "s1", Answered: true},
		{At: 2000, Scope: "s1", Known: true, Gateways: 2, Bs: two, Want: DegradedOverShare},
	})
}

// TestDegradedSharesSum: N gateways, each with its own budget from the
// same report, together admit at most Share of what was left plus Share of
// the refill over MaxMs — the property that makes the mode safe. With 7
// gateways a gateway's share of the 10-request burst is under one request,
// so none admits anything: safe, not generous.
func TestDegradedSharesSum(t *testing.T) {
	cfg := DegradedConfig{Share: 0.5, MaxMs: 30_000}
	for _, n := range []int{1, 2, 3, 7} {
		total := 0
		for g := 0; g < n; g++ {
			d := NewDegraded(cfg)
			for ms := int64(0); ms < cfg.MaxMs; ms += 10 {
				for d.Admit(ms, "s1", true, n, []DegradedBucket{rpm(10)}) == DegradedAdmitted {
					total++
				}
			}
		}
		// 0.5 × (10 left + 10/s × 30 s) = 155.
		if limit := 155; total > limit {
			t.Errorf("%d gateways admitted %d together, more than %d", n, total, limit)
		}
		if n == 7 && total != 0 {
			t.Errorf("7 gateways admitted %d with a share under one request each", total)
		}
		if n <= 3 && total < 140 {
			t.Errorf("%d gateways admitted only %d together: the share is unused", n, total)
		}
	}
}
