package ledger

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// Step tables, one per rule. Each row: log time, event, decisions.

func TestEnforcementWindow(t *testing.T) {
	// 600 RPM with a 1 s window: at most 10 at once, then 1 per 100 ms.
	cfg := testConfig(rpm("scope", "*", 600, 1000))
	var steps []step
	for i := 0; i < 10; i++ {
		id := string(rune('a' + i))
		steps = append(steps, step{At: 0, Ev: reserve(id), Want: []string{id + "/1 granted admitted"}})
	}
	steps = append(steps,
		step{At: 0, Ev: reserve("k"), Want: []string{"k/1 queued capacity queued"}},
		step{At: 50, Ev: tick()},
		step{At: 100, Ev: tick(), Want: []string{"k/1 granted queued_then_admitted"}},
		// Waiting 250 ms exceeds interactive max wait (300 ms)? No: fits at 200.
		step{At: 100, Ev: reserve("l"), Want: []string{"l/1 queued capacity queued"}},
		step{At: 100, Ev: reserve("m", maxWait(50)), Want: []string{"m/1 denied wait_exceeds_max rejected_locally"}},
		step{At: 200, Ev: tick(), Want: []string{"l/1 granted queued_then_admitted"}},
	)
	runSteps(t, cfg, steps)
}

func TestExceedsCapacityAndBadInput(t *testing.T) {
	cfg := testConfig(
		BucketConfig{Level: "tenant", ID: "*", Dimension: schemas.DimInputTokens, Capacity: 6000, WindowMs: 10_000},
	)
	bad := reserve("bad", tokens(-1, 0))
	unknownScope := reserve("u")
	unknownScope.Scope = "nope"
	runSteps(t, cfg, []step{
		// 6,000 per minute: a request above it can never be admitted (one
		// above the 10 s window's 1,000 can: TestLargerThanWindow).
		{At: 0, Ev: reserve("big", tokens(6001, 0)), Want: []string{"big/1 denied exceeds_capacity rejected_locally"}},
		{At: 0, Ev: bad, Want: []string{"bad/1 denied invalid_input_tokens rejected_locally"}},
		{At: 0, Ev: unknownScope, Want: []string{"u/1 denied unknown_scope rejected_policy"}},
		{At: 0, Ev: reserve("c", class("vip")), Want: []string{"c/1 denied unknown_class rejected_locally"}},
		{At: 0, Ev: reserve("ok", tokens(1000, 0)), Want: []string{"ok/1 granted admitted"}},
	})
}

func TestHierarchyAllOrNothing(t *testing.T) {
	cfg := testConfig(
		rpm("tenant", "*", 60, 60_000),
		rpm("key", "*", 2, 60_000),
	)
	avail := func(lv uint8, id string, want int64) func(*testing.T, *Ledger, []Output) {
		return func(t *testing.T, l *Ledger, _ []Output) {
			t.Helper()
			ni := l.nodeIdx[nodeKey{0, lv, id}]
			b := &l.st.Buckets[l.st.Nodes[ni].First]
			if got := l.available(b, &l.cc.specs[b.Spec]); got != want {
				t.Fatalf("%s available %d, want %d", id, got, want)
			}
		}
	}
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", maxWait(1)), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("b", maxWait(1)), Want: []string{"b/1 granted admitted"}},
		// The key bucket is empty: nothing is taken from the tenant bucket.
		{At: 0, Ev: reserve("c", maxWait(1)), Want: []string{"c/1 denied wait_exceeds_max rejected_locally"}, Check: avail(2, "t1", 58)},
		{At: 0, Ev: reserve("d", maxWait(1), path("tenant", "t1", "key", "k2")), Want: []string{"d/1 granted admitted"}, Check: avail(2, "t1", 57)},
	})
}

func TestReconcileRefundAndDebt(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "tenant", ID: "*", Dimension: schemas.DimTotalTokens, Capacity: 1000, PeriodMs: 60_000, WindowMs: 60_000})
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", tokens(500, 300)), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("b", tokens(200, 100), maxWait(1)), Want: []string{"b/1 denied wait_exceeds_max rejected_locally"}},
		// Actual 100: 700 come back at once.
		{At: 0, Ev: reconcile("a", 50, 50)},
		{At: 0, Ev: reserve("c", tokens(800, 0)), Want: []string{"c/1 granted admitted"}},
		// Overage of 700 becomes debt: level 100 - 700 = -600.
		{At: 0, Ev: reconcile("c", 1400, 100), Check: func(t *testing.T, l *Ledger, _ []Output) {
			b := &l.st.Buckets[0]
			if got := l.available(b, &l.cc.specs[b.Spec]); got != -600 {
				t.Fatalf("level %d, want -600", got)
			}
		}},
		// Debt refills back: 1000/min → 1 unit per 60 ms: 700 units after 42 s.
		{At: 42_000, Ev: reserve("d", tokens(100, 0)), Want: []string{"d/1 granted admitted"}},
	})
}

func TestIdempotencyAndConflict(t *testing.T) {
	cfg := testConfig(rpm("tenant", "*", 60, 60_000))
	a := reserve("a")
	runSteps(t, cfg, []step{
		{At: 0, Ev: a, Want: []string{"a/1 granted admitted"}},
		{At: 5, Ev: a},
		{At: 5, Ev: reserve("a", tokens(1, 1)), Want: []string{"a/1 conflict same_id_different_content rejected_locally"}},
		{At: 6, Ev: reconcile("a", 1, 1)},
		{At: 7, Ev: reconcile("a", 1, 1)},
		{At: 8, Ev: a},
		{At: 9, Ev: reserve("a", attempt(2)), Want: []string{"a/2 granted admitted"}},
	})
}

func TestHoldTTLExpiresAbandoned(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	cfg.HoldTTLMs = 1000
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("b", class("batch")), Want: []string{"b/1 queued capacity queued"}},
		{At: 999, Ev: tick()},
		{At: 1000, Ev: tick(), Want: []string{"a/1 hold_expired hold_ttl_abandoned admitted", "b/1 granted queued_then_admitted"}},
		{At: 1001, Ev: reconcile("a", 1, 1)}, // too late: already expired
	})
}

func TestQueueExpiryAndCancel(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("b"), Want: []string{"b/1 queued capacity queued"}},
		{At: 0, Ev: reserve("c", class("agent")), Want: []string{"c/1 queued capacity queued"}},
		{At: 300, Ev: tick(), Want: []string{"b/1 expired max_wait_exceeded queued_then_expired"}},
		{At: 400, Ev: releaseEv("c"), Want: []string{"c/1 cancelled released_while_queued queued"}},
		{At: 500, Ev: releaseEv("a")},
		{At: 500, Ev: reserve("d"), Want: []string{"d/1 granted admitted"}},
	})
}

func TestConcurrencyReturnedOnReconcile(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 2})
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("b", streaming()), Want: []string{"b/1 granted admitted"}},
		{At: 0, Ev: reserve("c"), Want: []string{"c/1 queued capacity queued"}},
		{At: 10, Ev: reconcile("a", 10, 10), Want: []string{"c/1 granted queued_then_admitted"}},
	})
}

func TestFairnessBetweenTenants(t *testing.T) {
	// One request per 100 ms. Tenant A queues four, then tenant B one:
	// B is served second, not fifth (virtual-clock WFQ).
	cfg := testConfig(rpm("scope", "*", 600, 100))
	cfg.FairCostMs = 100
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a0", tenant("A")), Want: []string{"a0/1 granted admitted"}},
		{At: 0, Ev: reserve("a1", tenant("A"), class("batch")), Want: []string{"a1/1 queued capacity queued"}},
		{At: 0, Ev: reserve("a2", tenant("A"), class("batch")), Want: []string{"a2/1 queued capacity queued"}},
		{At: 0, Ev: reserve("a3", tenant("A"), class("batch")), Want: []string{"a3/1 queued capacity queued"}},
		{At: 1, Ev: reserve("b1", tenant("B"), class("batch")), Want: []string{"b1/1 queued capacity queued"}},
		{At: 100, Ev: tick(), Want: []string{"a1/1 granted queued_then_admitted"}},
		{At: 200, Ev: tick(), Want: []string{"b1/1 granted queued_then_admitted"}},
		{At: 300, Ev: tick(), Want: []string{"a2/1 granted queued_then_admitted"}},
		{At: 400, Ev: tick(), Want: []string{"a3/1 granted queued_then_admitted"}},
	})
}

func TestAgingAndPriority(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	cfg.Classes[0].MaxWaitMs = 60_000
	cfg.Classes[1].MaxWaitMs = 60_000
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("x"), Want: []string{"x/1 granted admitted"}},
		// Batch (age offset 30 s) queued at 0 outranks interactive arriving at 31 s
		// (its own expiry, 40 s, is earlier than theirs: no deadline rescue)…
		{At: 0, Ev: reserve("b", class("batch"), maxWait(40_000)), Want: []string{"b/1 queued capacity queued"}},
		{At: 31_000, Ev: reserve("i1"), Want: []string{"i1/1 queued capacity queued"}},
		// …but not an interactive one arriving at 29 s with priority.
		{At: 31_000, Ev: reserve("i2", priority(100)), Want: []string{"i2/1 queued capacity queued"}},
		{At: 31_001, Ev: reconcile("x", 1, 1), Want: []string{"i2/1 granted queued_then_admitted"}},
		{At: 31_002, Ev: reconcile("i2", 1, 1), Want: []string{"b/1 granted queued_then_admitted"}},
		{At: 31_003, Ev: reconcile("b", 1, 1), Want: []string{"i1/1 granted queued_then_admitted"}},
	})
}

func TestDeadlineRescue(t *testing.T) {
	// One in flight at a time. Batch b (max wait 20 min) has aged past
	// fresh interactive requests (max wait 300 ms): b could still wait, they
	// cannot, so they go first. A waiter yields only to a higher-class one
	// whose expiry + class age offset is earlier than its own: b2 keeps its
	// turn over an interactive request that may wait 40 s.
	cfg := testConfig(BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("x", maxWait(1)), Want: []string{"x/1 granted admitted"}},
		{At: 0, Ev: reserve("b", class("batch")), Want: []string{"b/1 queued capacity queued"}},
		// b2 expires at 32_200: it cannot wait past an interactive request
		// arriving at 32 s that may wait 40 s (72_000 > 32_200 + 30_000).
		{At: 0, Ev: reserve("b2", class("batch"), maxWait(32_200)), Want: []string{"b2/1 queued capacity queued"}},
		{At: 31_000, Ev: reserve("i1"), Want: []string{"i1/1 queued capacity queued"}},
		{At: 31_100, Ev: reconcile("x", 1, 1), Want: []string{"i1/1 granted queued_then_admitted"},
			Check: func(t *testing.T, l *Ledger, _ []Output) {
				if got := l.st.Scopes[0].Rescued; got != 1 {
					t.Errorf("rescued %d, want 1", got)
				}
			}},
		{At: 31_200, Ev: reconcile("i1", 1, 1), Want: []string{"b/1 granted queued_then_admitted"},
			Check: func(t *testing.T, l *Ledger, _ []Output) {
				if got := l.st.Scopes[0].Rescued; got != 0 {
					t.Errorf("rescued %d after a grant in key order, want 0", got)
				}
			}},
		{At: 32_000, Ev: reserve("i2", maxWait(40_000)), Want: []string{"i2/1 queued capacity queued"}},
		{At: 32_100, Ev: reconcile("b", 1, 1), Want: []string{"b2/1 granted queued_then_admitted"}},
		{At: 32_150, Ev: reconcile("b2", 1, 1), Want: []string{"i2/1 granted queued_then_admitted"}},
	})
}

func TestDeadlineRescueStarvationGuard(t *testing.T) {
	// With rescue_max 2 an aged batch waiter lets two interactive waiters
	// go first, then takes its turn even though a third one is waiting.
	cfg := testConfig(BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	cfg.RescueMax = 2
	guarded := func(id string, want bool) func(*testing.T, *Ledger, []Output) {
		return func(t *testing.T, l *Ledger, _ []Output) {
			t.Helper()
			ri, ok := l.resFind(id, 1)
			if !ok {
				t.Fatalf("%s not found", id)
			}
			if got := l.st.Res[ri].Flags&fGuard != 0; got != want {
				t.Errorf("%s guard flag %v, want %v", id, got, want)
			}
		}
	}
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("x", maxWait(1)), Want: []string{"x/1 granted admitted"}},
		{At: 0, Ev: reserve("b", class("batch")), Want: []string{"b/1 queued capacity queued"}},
		{At: 31_000, Ev: reserve("i1"), Want: []string{"i1/1 queued capacity queued"}},
		{At: 31_010, Ev: reconcile("x", 1, 1), Want: []string{"i1/1 granted queued_then_admitted"}},
		{At: 31_020, Ev: reserve("i2"), Want: []string{"i2/1 queued capacity queued"}},
		{At: 31_030, Ev: reconcile("i1", 1, 1), Want: []string{"i2/1 granted queued_then_admitted"}},
		{At: 31_040, Ev: reserve("i3"), Want: []string{"i3/1 queued capacity queued"}},
		{At: 31_050, Ev: reconcile("i2", 1, 1), Want: []string{"b/1 granted queued_then_admitted"}, Check: guarded("b", true)},
		{At: 31_060, Ev: reconcile("b", 1, 1), Want: []string{"i3/1 granted queued_then_admitted"}, Check: guarded("i3", false)},
	})
}

func TestProviderRateLimitedCooldown(t *testing.T) {
	cfg := testConfig(rpm("scope", "*", 600, 1000))
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 10, Ev: rejected("a", 1, schemas.KindRateLimited, 2000)},
		{At: 20, Ev: reserve("b", maxWait(100)), Want: []string{"b/1 denied wait_exceeds_max rejected_locally"}},
		// (Deadlines near enough that the storm hold does not keep c and d back.)
		{At: 20, Ev: reserve("c", class("agent"), deadline(5000)), Want: []string{"c/1 queued cooldown_rate_limited queued"}},
		{At: 2009, Ev: tick()},
		// The bucket was drained at 10: one request per 100 ms after the cooldown.
		{At: 2010, Ev: tick(), Want: []string{"c/1 granted queued_then_admitted"}},
		{At: 2010, Ev: reserve("d", class("agent"), deadline(5000)), Want: []string{"d/1 granted admitted"}},
	})
}

func TestProviderQuotaExhausted(t *testing.T) {
	cfg := testConfig(rpm("scope", "*", 600, 1000))
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 10, Ev: rejected("a", 1, schemas.KindQuotaExhausted, 0)},
		{At: 20, Ev: reserve("b"), Want: []string{"b/1 denied quota_exhausted rejected_policy"}},
		{At: dayMs, Ev: reserve("c"), Want: []string{"c/1 granted admitted"}},
	})
}

func TestProviderObservedLowersLevel(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimInputTokens, Capacity: 60_000, WindowMs: 60_000})
	// The level rule alone: with learning on, 50 remaining after 100 sent
	// would also bound the limit by 150 a minute (TestLearnRemaining).
	cfg.Learn.Off = true
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", tokens(100, 0)), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: observed(schemas.DimInputTokens, 50)},
		{At: 0, Ev: reserve("b", tokens(100, 0), maxWait(10)), Want: []string{"b/1 denied wait_exceeds_max rejected_locally"}},
		{At: 0, Ev: observed(schemas.DimInputTokens, 5000)}, // never raises
		{At: 50, Ev: reserve("c", tokens(100, 0)), Want: []string{"c/1 granted admitted"}},
	})
}

func TestCentralRetry(t *testing.T) {
	cfg := testConfig(rpm("scope", "*", 6000, 1000))
	cfg.Retry = RetryConfig{MaxAttempts: 3, BaseMs: 100, MaxMs: 1000, RatioPermille: 1000, BurstMax: 1}
	j2 := jitter("a", 2, 100)
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 10, Ev: rejected("a", 1, schemas.KindRequestError, 0)},
		// Floor: Retry-After 700, the jitter on top of it.
		{At: 20, Ev: retryEv("a", 1, schemas.RetryOverload, 700), Want: []string{"a/2 queued retry_backoff queued"},
			Check: func(t *testing.T, l *Ledger, out []Output) {
				if got := out[0].Decision.RetryAfterMs; got != 700+j2 {
					t.Fatalf("retry_after %d, want 700 + jitter %d", got, j2)
				}
			}},
		{At: 20, Ev: retryEv("a", 1, schemas.RetryOverload, 700)}, // redelivery
		{At: 719 + j2, Ev: tick()},
		{At: 720 + j2, Ev: tick(), Want: []string{"a/2 granted queued_then_admitted"}},
		// Scope budget: burst 1 credit, spent; each first attempt earns 1.
		{At: 730, Ev: retryEv("a", 2, schemas.RetryCapacity, 0), Want: []string{"a/3 denied retry_budget_exhausted rejected_policy"}},
		{At: 740, Ev: reserve("b"), Want: []string{"b/1 granted admitted"}},
		{At: 750, Ev: retryEv("b", 1, schemas.RetryPolicy, 0), Want: []string{"b/2 denied not_retryable rejected_policy"}},
		{At: 760, Ev: reserve("c", attempt(3)), Want: []string{"c/3 granted admitted"}},
		{At: 770, Ev: retryEv("c", 3, schemas.RetryCapacity, 0), Want: []string{"c/4 denied retry_attempts_exhausted rejected_policy"}},
		{At: 780, Ev: retryEv("zz", 1, schemas.RetryCapacity, 0), Want: []string{"zz/2 denied unknown_previous_attempt rejected_locally"}},
	})
}

func TestRetryDeadline(t *testing.T) {
	cfg := testConfig(rpm("scope", "*", 6000, 1000))
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", deadline(1000)), Want: []string{"a/1 granted admitted"}},
		{At: 900, Ev: retryEv("a", 1, schemas.RetryCapacity, 200), Want: []string{"a/2 denied deadline_exceeded rejected_locally"}},
	})
}

func TestJitterDeterministicAndBounded(t *testing.T) {
	seen := map[int64]bool{}
	for i := 0; i < 1000; i++ {
		id := string(rune('a'+i%26)) + string(rune('a'+i/26))
		v := jitter(id, 2, 1000)
		if v < 0 || v > 1000 || v != jitter(id, 2, 1000) {
			t.Fatalf("jitter %d", v)
		}
		seen[v/100] = true
	}
	if len(seen) < 10 {
		t.Fatalf("jitter poorly spread: %v", seen)
	}
}

func TestRampGovernor(t *testing.T) {
	cfg := testConfig(BucketConfig{
		Level: "deployment", ID: "new", Dimension: schemas.DimRamp, Capacity: 600, PeriodMs: 60_000, WindowMs: 1000,
		Ramp: &RampConfig{StartPerPeriod: 60, StepPerPeriod: 60, PauseRejectPermille: 100},
	})
	dep := path("deployment", "new")
	var steps []step
	// Minute 0: 60/min → burst 1 per second window.
	steps = append(steps,
		step{At: 0, Ev: reserve("a", dep), Want: []string{"a/1 granted admitted"}},
		step{At: 0, Ev: reserve("b", dep, maxWait(10)), Want: []string{"b/1 denied wait_exceeds_max rejected_locally"}},
		// After one minute the rate is 120/min → 2 per window.
		step{At: 61_000, Ev: reserve("c", dep), Want: []string{"c/1 granted admitted"}},
		step{At: 61_000, Ev: reserve("d", dep), Want: []string{"d/1 granted admitted"}},
		step{At: 61_000, Ev: reserve("e", dep, maxWait(10)), Want: []string{"e/1 denied wait_exceeds_max rejected_locally"}},
		// Provider rejections above 10 % of grants pause growth.
		step{At: 61_001, Ev: rejected("c", 1, schemas.KindRequestError, 0)},
		step{At: 180_000, Ev: reserve("f", dep), Want: []string{"a/1 hold_expired hold_ttl_abandoned admitted", "f/1 granted admitted"}},
		step{At: 180_000, Ev: reserve("g", dep), Want: []string{"g/1 granted admitted"}},
		step{At: 180_000, Ev: reserve("h", dep, maxWait(10)), Want: []string{"h/1 denied wait_exceeds_max rejected_locally"}},
	)
	runSteps(t, cfg, steps)
}

func TestBorrowingAndReclaim(t *testing.T) {
	// Scope: 10 per 100 ms-window... tenant A guaranteed 300/min of 600/min.
	cfg := testConfig(
		BucketConfig{Level: "tenant", ID: "*", Dimension: schemas.DimRequests, Capacity: 600, WindowMs: 1000, Guaranteed: 120},
		BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 3},
	)
	cfg.Classes[0].MaxWaitMs = 10_000
	borrowed := func(want bool) func(*testing.T, *Ledger, []Output) {
		return func(t *testing.T, _ *Ledger, out []Output) {
			t.Helper()
			if out[len(out)-1].Decision.Borrowed != want {
				t.Fatalf("borrowed = %v, want %v", !want, want)
			}
		}
	}
	runSteps(t, cfg, []step{
		// Baseline 120/min with a 1 s window: 2 requests within baseline.
		{At: 0, Ev: reserve("a1", tenant("A")), Want: []string{"a1/1 granted admitted"}, Check: borrowed(false)},
		{At: 0, Ev: reserve("a2", tenant("A")), Want: []string{"a2/1 granted admitted"}, Check: borrowed(false)},
		{At: 0, Ev: reserve("a3", tenant("A")), Want: []string{"a3/1 granted admitted"}, Check: borrowed(true)},
		// Scope concurrency full: B (within its baseline) and A (borrowing) wait.
		{At: 1, Ev: reserve("b1", tenant("B")), Want: []string{"b1/1 queued capacity queued"}},
		{At: 2, Ev: reserve("a4", tenant("A"), priority(100)), Want: []string{"a4/1 queued capacity queued"}},
		// Capacity frees: B's guaranteed request goes first even though A's has priority.
		{At: 3, Ev: reconcile("a1", 1, 1), Want: []string{"b1/1 granted queued_then_admitted"}},
		{At: 4, Ev: reconcile("a2", 1, 1), Want: []string{"a4/1 granted queued_then_admitted"}, Check: borrowed(true)},
	})
}

func TestDailyFixedWindowAndSpend(t *testing.T) {
	cfg := testConfig(
		BucketConfig{Level: "tenant", ID: "*", Dimension: schemas.DimRequestsPerDay, Capacity: 2},
		BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimSpend, Capacity: 1000, PeriodMs: 3_600_000, Slots: 6},
	)
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", spend(600)), Want: []string{"a/1 granted admitted"}},
		{At: 1, Ev: reserve("b", spend(600)), Want: []string{"b/1 denied quota_exhausted rejected_policy"}},
		{At: 2, Ev: reconcile("a", 1, 1)}, // actual spend 0: refunded to its slot
		{At: 3, Ev: reserve("c", spend(600)), Want: []string{"c/1 granted admitted"}},
		{At: 4, Ev: reserve("d"), Want: []string{"d/1 denied quota_exhausted rejected_policy"}},
		{At: dayMs, Ev: reserve("e"), Want: []string{"c/1 hold_expired hold_ttl_abandoned admitted", "e/1 granted admitted"}},
	})
}

func TestConfigChangeKeepsHolds(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	bigger := testConfig(
		BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 2},
		rpm("tenant", "*", 600, 1000),
	)
	bad := configEv(t, Config{Scopes: []ScopeConfig{{Name: "s", Buckets: []BucketConfig{{Level: "galaxy", ID: "*", Dimension: "requests", Capacity: 1}}}}})
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("b"), Want: []string{"b/1 queued capacity queued"}},
		{At: 1, Ev: bad, Check: func(t *testing.T, l *Ledger, _ []Output) {
			if l.ConfigError() == "" {
				t.Fatal("bad config accepted")
			}
		}},
		{At: 2, Ev: configEv(t, bigger), Want: []string{"b/1 granted queued_then_admitted"}},
		// Concurrency frees only by events, so a short max wait still queues.
		{At: 3, Ev: reserve("c", maxWait(1)), Want: []string{"c/1 queued capacity queued"}},
		{At: 4, Ev: reconcile("a", 1, 1), Want: []string{"c/1 expired max_wait_exceeded queued_then_expired"}},
		{At: 5, Ev: reserve("d"), Want: []string{"d/1 granted admitted"}},
	})
}

func TestEmergencyAdmittedAndQueueFull(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	cfg.Classes[0].MaxDepth = 1
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("e", emergency()), Want: []string{"e/1 granted emergency_admitted"}},
		{At: 0, Ev: reserve("b"), Want: []string{"b/1 queued capacity queued"}},
		{At: 0, Ev: reserve("c", fallback()), Want: []string{"c/1 denied queue_full rejected_locally"},
			Check: func(t *testing.T, _ *Ledger, out []Output) {
				if !out[0].Decision.FallbackAllowed {
					t.Fatal("fallback not marked")
				}
			}},
		{At: 1, Ev: reconcile("a", 1, 1)}, // in flight: e still over capacity
		{At: 2, Ev: reconcile("e", 1, 1), Want: []string{"b/1 granted queued_then_admitted"}},
	})
}

func TestStaleOffsetIgnoredAndClockNeverBackwards(t *testing.T) {
	l := New(0, testConfig(rpm("scope", "*", 600, 1000)))
	out := l.Apply(1000, 5, reserve("a"), nil)
	if len(out) != 1 || l.Offset() != 6 {
		t.Fatal(out)
	}
	if out = l.Apply(2000, 5, reserve("b"), out[:0]); len(out) != 0 {
		t.Fatal("stale offset applied")
	}
	out = l.Apply(10, 6, reserve("c"), out[:0])
	if out[0].Decision.LogTimeMs != 1000 {
		t.Fatalf("clock went back: %d", out[0].Decision.LogTimeMs)
	}
}

// TestRetryWaitsForDimensionCooldown: a provider 429 that names its
// dimension closes that dimension; a retry needing it is due when the
// dimension reopens, not at the (shorter) jittered backoff, so it does not
// sit in the queue past its class's max wait and expire.
func TestRetryWaitsForDimensionCooldown(t *testing.T) {
	cfg := testConfig(rpm("scope", "*", 6000, 1000))
	cfg.Retry = RetryConfig{MaxAttempts: 3, BaseMs: 100, MaxMs: 1000, RatioPermille: 1000, BurstMax: 1}
	cfg.Cooldown.RateLimitedMs = 1000
	limited := rejected("a", 1, schemas.KindRateLimited, 0)
	limited.ProviderRejected.Limiter = schemas.DimInputTokens
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 10, Ev: limited},
		{At: 20, Ev: retryEv("a", 1, schemas.RetryCapacity, 0), Want: []string{"a/2 queued retry_backoff queued"},
			Check: func(t *testing.T, l *Ledger, out []Output) {
				if got := out[0].Decision.RetryAfterMs; got != 990 {
					t.Fatalf("retry_after %d ms, want 990 (the input_tokens cooldown until 1010)", got)
				}
			}},
		{At: 1010, Ev: tick(), Want: []string{"a/2 granted queued_then_admitted"}},
	})
}

// TestSignedConfigRollbackRefused: a signed change older than the one in
// force (an old change re-appended by whoever can write the topic) is
// refused, also after a snapshot; the same document under a new sequence
// (the operator going back on purpose) applies.
func TestSignedConfigRollbackRefused(t *testing.T) {
	one := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	two := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 2})
	signed := func(c Config, seq uint64) *schemas.Event {
		ev := configEv(t, c)
		ev.ConfigChanged.Seq = seq
		return ev
	}
	capOf := func(l *Ledger) int64 { return l.Config().Scopes[0].Buckets[0].Capacity }
	l := New(0, one)
	var off int64
	apply := func(ev *schemas.Event) {
		l.Apply(off, off, ev, nil)
		off++
	}
	apply(signed(one, 10))
	apply(signed(two, 20))
	if capOf(l) != 2 || l.ConfigError() != "" {
		t.Fatalf("signed newer change: capacity %d, error %q", capOf(l), l.ConfigError())
	}
	b, err := l.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if l, err = Restore(b); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		ev      *schemas.Event
		cap     int64
		refused bool
	}{
		{"old change re-appended", signed(one, 10), 2, true},
		{"same change redelivered", signed(two, 20), 2, false},
		{"going back under a new sequence", signed(one, 30), 1, false},
		{"the replaced change again", signed(two, 20), 1, true},
		{"unsigned (the process's verifier is the gate)", configEv(t, two), 2, false},
	} {
		apply(c.ev)
		if capOf(l) != c.cap {
			t.Errorf("%s: capacity %d, want %d", c.name, capOf(l), c.cap)
		}
		if got := strings.Contains(l.ConfigError(), ErrConfigRollback.Error()); got != c.refused {
			t.Errorf("%s: refused %v (%q), want %v", c.name, got, l.ConfigError(), c.refused)
		}
	}
}
