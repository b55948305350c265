package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// Step tables of the storm rules: after a provider 429, queued work waits
// for the provider's Retry-After (not a longer blanket cooldown, and not
// against its class's max wait); what cannot make its deadline is refused
// at once; the rest flows out when the cooldown ends.

func TestStormRetryAfterIsTheCooldown(t *testing.T) {
	// The provider asked for 400 ms: the scope reopens then, not after
	// cooldown.rate_limited_ms (1 s). Without a Retry-After the default
	// applies. (The deadlines are short enough that the storm hold does
	// not keep the waiters back.)
	cfg := testConfig(rpm("scope", "*", 600, 1000))
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 10, Ev: rejected("a", 1, schemas.KindRateLimited, 400)},
		{At: 20, Ev: reserve("b", class("agent"), deadline(1000)), Want: []string{"b/1 queued cooldown_rate_limited queued"}},
		// The bucket was drained at 10; at 410 it has refilled 4 requests.
		{At: 410, Ev: tick(), Want: []string{"b/1 granted queued_then_admitted"}},
		{At: 420, Ev: rejected("b", 1, schemas.KindRateLimited, 0)},
		{At: 430, Ev: reserve("c", class("agent"), deadline(2000)), Want: []string{"c/1 queued cooldown_rate_limited queued"}},
		{At: 1419, Ev: tick()},
		{At: 1420, Ev: tick(), Want: []string{"c/1 granted queued_then_admitted"}},
	})
}

func TestStormWaitingOutTheCooldown(t *testing.T) {
	// Interactive: max wait 300 ms. A 1 s Retry-After does not make its
	// waiters expire at 300 ms: each waits until the cooldown ends plus its
	// max wait, within its deadline.
	cfg := testConfig(rpm("scope", "*", 600, 1000))
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 10, Ev: rejected("a", 1, schemas.KindRateLimited, 1000)},
		// Arrives during the cooldown with a 5 s deadline: it waits.
		{At: 100, Ev: reserve("b", deadline(5000)), Want: []string{"b/1 queued cooldown_rate_limited queued"}},
		// A 500 ms deadline ends before the cooldown: refused at once.
		{At: 100, Ev: reserve("c", deadline(500)), Want: []string{"c/1 denied deadline_exceeded rejected_locally"}},
		// No deadline: it waits too (the cooldown plus its max wait).
		{At: 200, Ev: reserve("d"), Want: []string{"d/1 queued cooldown_rate_limited queued"}},
		// Its own max wait is the caller's bound: refused as before.
		{At: 200, Ev: reserve("e", maxWait(100)), Want: []string{"e/1 denied wait_exceeds_max rejected_locally"}},
		// 400 ms: past the 300 ms max wait of b and d, nothing expires.
		{At: 400, Ev: tick()},
		{At: 1009, Ev: tick()},
		// The cooldown ends. d has no deadline; its queue expiry (the
		// cooldown's end plus its max wait) leaves it no slack: it goes.
		// b's deadline (5100) leaves room for more than 3 attempts a
		// Retry-After apart: the storm hold keeps it back while the scope
		// recovers (until 2010, one more Retry-After).
		{At: 1010, Ev: tick(), Want: []string{"d/1 granted queued_then_admitted"}},
		{At: 2009, Ev: tick()},
		{At: 2010, Ev: tick(), Want: []string{"b/1 granted queued_then_admitted"}},
	})
}

func TestStormQueuedPastDeadlineRefusedAtOnce(t *testing.T) {
	// Waiters queued for capacity when the 429 arrives: the one whose
	// deadline falls inside the cooldown gets its answer at once (with
	// fallback where it asked for it), not at its deadline.
	cfg := testConfig(rpm("scope", "*", 120, 1000))
	cfg.Classes[1].Overload = OverloadFallback // agent
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("x"), Want: []string{"x/1 granted admitted"}},
		{At: 0, Ev: reserve("b", class("agent"), deadline(800), fallback()), Want: []string{"b/1 queued capacity queued"}},
		{At: 0, Ev: reserve("c", class("agent"), deadline(9000)), Want: []string{"c/1 queued capacity queued"}},
		{At: 50, Ev: rejected("a", 1, schemas.KindRateLimited, 1000), Want: []string{"b/1 expired deadline_exceeded queued_then_expired"},
			Check: func(t *testing.T, _ *Ledger, out []Output) {
				t.Helper()
				if d := out[0].Decision; !d.FallbackAllowed || d.RetryClass != schemas.RetryDeadline {
					t.Fatalf("decision %+v: want fallback allowed, retry class deadline", d)
				}
			}},
		// c waits out the cooldown and, its deadline being far, the
		// recovery after it (until 2050).
		{At: 1050, Ev: tick()},
		{At: 2050, Ev: tick(), Want: []string{"c/1 granted queued_then_admitted"}},
	})
}

func TestStormHoldLeastSlackFirst(t *testing.T) {
	// During the recovery, a waiter goes when its slack is down to 3
	// Retry-Afters (here 3 × 500 ms): the one with the earlier deadline
	// first, the other when its own slack runs down or the recovery ends.
	cfg := testConfig(rpm("scope", "*", 600, 1000))
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: rejected("a", 1, schemas.KindRateLimited, 500)},
		{At: 0, Ev: reserve("far", class("agent"), deadline(9000)), Want: []string{"far/1 queued cooldown_rate_limited queued"}},
		{At: 0, Ev: reserve("near", class("agent"), deadline(2200)), Want: []string{"near/1 queued cooldown_rate_limited queued"}},
		// Cooldown ends at 500; near's slack is 1700 > 1500 until 700.
		{At: 500, Ev: tick()},
		{At: 700, Ev: tick(), Want: []string{"near/1 granted queued_then_admitted"}},
		// A second 429 at 800 extends the recovery to 800 + 500 + 500.
		{At: 800, Ev: rejected("near", 1, schemas.KindRateLimited, 500)},
		{At: 1799, Ev: tick()},
		{At: 1800, Ev: tick(), Want: []string{"far/1 granted queued_then_admitted"}},
	})
}

// roomObserved is the ProviderObserved of attempt att's response: the
// provider's counters had room for it (requests and tokens remaining).
func roomObserved(id string, att int32, requests, tokens int64) *schemas.Event {
	// OpenAI's 429 carries its limits with the remaining counts; limits
	// above any configured capacity here learn nothing, so these tables
	// see only the room (remaining without a limit would bound the
	// capacity, learnRemaining).
	ev := envelope(schemas.TypeProviderObserved, id, att)
	ev.ProviderObserved = &schemas.ProviderObserved{Observations: []schemas.Observation{
		{Dimension: schemas.DimRequests, Limit: 1_000_000, Remaining: requests},
		{Dimension: schemas.DimTotalTokens, Limit: 1_000_000_000, Remaining: tokens}}}
	return ev
}

func TestStormUnexplained429KeepsTheScopeOpen(t *testing.T) {
	// The 429's own response said the provider had room for the request
	// (its headers): a storm, not an empty bucket. Nothing is drained and
	// the scope stays open for work that must go now (b, 2 s of slack,
	// within the storm hold's 3 × 1 s); work with more slack (c) is held
	// for the recovery; the refused attempt's retry waits its Retry-After
	// and a jitter of at most half of it on top (j).
	cfg := testConfig(rpm("scope", "*", 600, 1000))
	j := jitter("a", 2, 250)
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", deadline(5000)), Want: []string{"a/1 granted admitted"}},
		{At: 20, Ev: roomObserved("a", 1, 9, 900_000)},
		{At: 20, Ev: rejected("a", 1, schemas.KindRateLimited, 1000)},
		{At: 20, Ev: retryEv("a", 1, schemas.RetryCapacity, 1000), Want: []string{"a/2 queued retry_backoff queued"}},
		{At: 30, Ev: reserve("b", deadline(2000)), Want: []string{"b/1 granted admitted"}},
		{At: 30, Ev: reserve("c", deadline(5000)), Want: []string{"c/1 queued cooldown_rate_limited queued"}},
		// The recovery ends one Retry-After after the 429.
		{At: 1019, Ev: tick()},
		{At: 1020, Ev: tick(), Want: []string{"c/1 granted queued_then_admitted"}},
		{At: 1019 + j, Ev: tick()},
		{At: 1020 + j, Ev: tick(), Want: []string{"a/2 granted queued_then_admitted"}},
	})
}

func TestStormExplained429ClosesTheScope(t *testing.T) {
	// The same 429 with headers that say the requests counter is empty
	// (or with no headers at all) is the provider's bucket running out:
	// the scope closes for the Retry-After and its buckets are drained.
	cfg := testConfig(rpm("scope", "*", 600, 1000))
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", deadline(5000)), Want: []string{"a/1 granted admitted"}},
		{At: 20, Ev: roomObserved("a", 1, 0, 900_000)},
		{At: 20, Ev: rejected("a", 1, schemas.KindRateLimited, 1000)},
		{At: 30, Ev: reserve("b", deadline(2000)), Want: []string{"b/1 queued cooldown_rate_limited queued"}},
		{At: 1019, Ev: tick()},
		{At: 1020, Ev: tick(), Want: []string{"b/1 granted queued_then_admitted"}},
	})
}

func TestStormBacklogDoesNotSpendMaxWait(t *testing.T) {
	// 2 requests per second, burst 2. The cooldown builds a backlog (a, b
	// wait it out with their deadlines as the bound); c arrives after the
	// cooldown (its slack within the storm hold's 3 × 500 ms) and queues
	// behind it for capacity: it waits for the same provider, so its
	// 300 ms max wait does not end it before the backlog has flowed out at
	// the refill rate. (The bare 429 would also lower the learned
	// capacity, slowing the refill; that is TestLearnAIMD's, so learning
	// is off here.)
	cfg := testConfig(rpm("scope", "*", 120, 1000))
	cfg.Learn.Off = true
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("x"), Want: []string{"x/1 granted admitted"}},
		{At: 0, Ev: rejected("x", 1, schemas.KindRateLimited, 500)},
		{At: 10, Ev: reserve("a", deadline(1500)), Want: []string{"a/1 queued cooldown_rate_limited queued"}},
		{At: 10, Ev: reserve("b", deadline(1500)), Want: []string{"b/1 queued cooldown_rate_limited queued"}},
		// The bucket was drained at 0: one request at 500, one at 1000.
		{At: 500, Ev: tick(), Want: []string{"a/1 granted queued_then_admitted"}},
		{At: 510, Ev: reserve("c", deadline(1400)), Want: []string{"c/1 queued capacity queued"}},
		{At: 900, Ev: tick()},
		{At: 1000, Ev: tick(), Want: []string{"b/1 granted queued_then_admitted"}},
		{At: 1500, Ev: tick(), Want: []string{"c/1 granted queued_then_admitted"}},
	})
}

func TestRefundUnsentRequest(t *testing.T) {
	// A requests bucket whose provider does not count refused requests
	// gets the request back on a provider rejection: 1 per second, burst 1.
	b := rpm("scope", "*", 60, 1000)
	b.RefundUnsent = true
	runSteps(t, testConfig(b), []step{
		{At: 0, Ev: reserve("a", deadline(5000)), Want: []string{"a/1 granted admitted"}},
		{At: 10, Ev: roomObserved("a", 1, 9, 900_000)},
		{At: 10, Ev: rejected("a", 1, schemas.KindRateLimited, 100)},
		{At: 20, Ev: reserve("b", deadline(300)), Want: []string{"b/1 granted admitted"}},
	})
	// Without it the refused request still counts (OpenAI's rule).
	runSteps(t, testConfig(rpm("scope", "*", 60, 1000)), []step{
		{At: 0, Ev: reserve("a", deadline(5000)), Want: []string{"a/1 granted admitted"}},
		{At: 10, Ev: roomObserved("a", 1, 9, 900_000)},
		{At: 10, Ev: rejected("a", 1, schemas.KindRateLimited, 100)},
		{At: 20, Ev: reserve("b", deadline(300)), Want: []string{"b/1 denied deadline_exceeded rejected_locally"}},
	})
}
