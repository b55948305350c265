package ledger

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// served is a Reconciled of a complete 2xx answer with its latencies.
func served(id string, out, firstByteMs, totalMs int64) *schemas.Event {
	ev := reconcile(id, 100, out)
	ev.Reconciled.FirstByteMs, ev.Reconciled.TotalMs = firstByteMs, totalMs
	return ev
}

// samples are n answers that teach the ledger a route's service time: s<i>
// reserved at from + every×i and answered `after` ms later, served(out,
// firstByteMs, totalMs).
type samples struct{ n, from, every, after, out, firstByteMs, totalMs int64 }

func (sm samples) steps() []step {
	var steps []step
	for i := range sm.n {
		id := fmt.Sprintf("s%d", i)
		at := sm.from + sm.every*i
		steps = append(steps,
			step{At: at, Ev: reserve(id), Want: []string{id + "/1 granted admitted"}},
			step{At: at + sm.after, Ev: served(id, sm.out, sm.firstByteMs, sm.totalMs)})
	}
	return steps
}

func TestServiceTimeDeadline(t *testing.T) {
	// One attempt at a time per key, so that a held grant queues the next.
	cfg := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	// The route answers its first byte at 400 ms and then 2 ms per output
	// token. The p95 bin of 400 ms is [384, 448), so 50 output tokens are
	// expected to take its upper bound 448 + 100 = 548 ms.
	steps := samples{n: 19, every: 10, after: 5, out: 50, firstByteMs: 400, totalMs: 500}.steps()
	svc := func(needed, avail int64) func(*testing.T, *Ledger, []Output) {
		return func(t *testing.T, _ *Ledger, out []Output) {
			t.Helper()
			d := out[0].Decision
			if d.Needed != needed || d.Available != avail || d.RetryClass != schemas.RetryDeadline {
				t.Errorf("needed %d available %d retry_class %s, want %d %d %s", d.Needed, d.Available, d.RetryClass, needed, avail, schemas.RetryDeadline)
			}
		}
	}
	steps = append(steps,
		// 19 samples are too few to refuse anything: granted.
		step{At: 200, Ev: reserve("early", deadline(100)), Want: []string{"early/1 granted admitted"}},
		step{At: 205, Ev: served("early", 50, 400, 500)},
		// 20: a deadline of 400 ms is refused at once, naming both times.
		step{At: 300, Ev: reserve("short", deadline(400)), Want: []string{"short/1 denied deadline_below_service_time rejected_locally"}, Check: svc(548, 400)},
		// No output expected: 448 ms of first byte fit in 450.
		step{At: 300, Ev: reserve("noout", deadline(450), tokens(100, 0)), Want: []string{"noout/1 granted admitted"}},
		step{At: 305, Ev: served("noout", 0, 400, 400)},
		step{At: 310, Ev: reserve("ok", deadline(548)), Want: []string{"ok/1 granted admitted"}},
		// While ok holds the key, q waits; it may be granted until its
		// deadline less 548 ms (1,000 + 1,500 − 548 = 1,952), and then
		// expires with the same reason.
		step{At: 1000, Ev: reserve("q", class("agent"), deadline(1500)), Want: []string{"q/1 queued capacity queued"}},
		step{At: 1951, Ev: tick()},
		step{At: 1952, Ev: tick(), Want: []string{"q/1 expired deadline_below_service_time queued_then_expired"}},
		step{At: 2100, Ev: reserve("q2", class("agent"), deadline(5000)), Want: []string{"q2/1 queued capacity queued"}},
		step{At: 2200, Ev: served("ok", 50, 400, 500), Want: []string{"q2/1 granted queued_then_admitted"}},
		step{At: 2300, Ev: served("q2", 50, 400, 500)},
		// Streamed answers are learned apart from buffered ones: none yet.
		step{At: 2400, Ev: reserve("st", streaming(), deadline(100)), Want: []string{"st/1 granted admitted"}},
		step{At: 2405, Ev: served("st", 50, 40, 140)},
		// Two minutes later the samples are forgotten: nothing is refused.
		step{At: 120_000, Ev: reserve("later", deadline(100)), Want: []string{"later/1 granted admitted"}},
	)
	runSteps(t, cfg, steps)
}

// TestServiceTimeCountsDelivery: the log time from the grant to the
// Reconciled beyond the call itself (the grant's delivery to the gateway,
// the answer's record reaching the log) is part of the first byte's time:
// calls of 500 ms reconciled 700 ms after their grant are expected to take
// 700 ms, whose p95 bin [640, 768) gives 768.
func TestServiceTimeCountsDelivery(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	steps := samples{n: 20, every: 1000, after: 700, firstByteMs: 500, totalMs: 500}.steps()
	steps = append(steps,
		step{At: 30_000, Ev: reserve("short", deadline(767), tokens(100, 0)), Want: []string{"short/1 denied deadline_below_service_time rejected_locally"}},
		step{At: 30_000, Ev: reserve("fits", deadline(768), tokens(100, 0)), Want: []string{"fits/1 granted admitted"}},
	)
	runSteps(t, cfg, steps)
}

// TestServiceTimeLearnedWhileQueued: a waiter that arrived while its route
// had too few samples takes the service time once it is known. q arrives
// with 19 samples (no time known: grantable to its deadline, 1,000); the
// 20th sample, hold's, frees the key at 500 and makes the time about
// 540 ms, so q could only have been granted until about 460: it expires instead of being
// sent 500 ms before its client hangs up.
func TestServiceTimeLearnedWhileQueued(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	steps := samples{n: 19, every: 10, after: 5, out: 50, firstByteMs: 400, totalMs: 500}.steps()
	steps = append(steps,
		step{At: 300, Ev: reserve("hold"), Want: []string{"hold/1 granted admitted"}},
		step{At: 400, Ev: reserve("q", class("agent"), deadline(600)), Want: []string{"q/1 queued capacity queued"}},
		step{At: 500, Ev: served("hold", 50, 200, 200), Want: []string{"q/1 expired deadline_below_service_time queued_then_expired"}},
	)
	runSteps(t, cfg, steps)
}

// TestServiceTimeOff: service_samples_min -1 learns nothing and refuses
// nothing.
func TestServiceTimeOff(t *testing.T) {
	cfg := testConfig(rpm("key", "*", 6000, 60_000))
	cfg.ServiceSamplesMin = -1
	steps := samples{n: 30, every: 1, out: 50, firstByteMs: 400, totalMs: 500}.steps()
	steps = append(steps, step{At: 100, Ev: reserve("short", deadline(10)), Want: []string{"short/1 granted admitted"},
		Check: func(t *testing.T, l *Ledger, _ []Output) {
			if len(l.st.Services) != 0 {
				t.Errorf("%d routes learned with the rule off", len(l.st.Services))
			}
		}})
	runSteps(t, cfg, steps)
}

func TestServiceBins(t *testing.T) {
	for _, ms := range []int64{0, 1, 3, 4, 7, 8, 9, 15, 16, 400, 1000, 65_535, 1 << 20, 1 << 40} {
		b := serviceBin(ms)
		lo := serviceBinLow(b)
		if lo > ms || (b < serviceBins-1 && serviceBinLow(b+1) <= ms) {
			t.Errorf("%d ms in bin %d [%d, %d)", ms, b, lo, serviceBinLow(b+1))
		}
		if ms >= 4 && b < serviceBins-1 && (ms-lo)*100 > lo*25 {
			t.Errorf("%d ms: bin %d low %d is more than 25 %% below", ms, b, lo)
		}
	}
}

// TestServiceTimePrior: a route with too few samples in its own scope (a
// fallback's provider) takes the same route's learned time in the
// partition's other scopes, the longest, until it has its own. The
// route's p95 in scope s is 548 ms for 50 output tokens (as in
// TestServiceTimeDeadline); scope f has never answered it.
func TestServiceTimePrior(t *testing.T) {
	conc := BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1}
	cfg := Config{Scopes: []ScopeConfig{{Name: "s", Buckets: []BucketConfig{conc}}, {Name: "f", Buckets: []BucketConfig{conc}}}}
	inF := func(ev *schemas.Event) { ev.Scope = "f" }
	steps := samples{n: 20, every: 10, after: 5, out: 50, firstByteMs: 400, totalMs: 500}.steps()
	steps = append(steps,
		// The fallback's scope has no sample: s's 548 ms stands in.
		step{At: 300, Ev: reserve("short", inF, attempt(2), deadline(547)), Want: []string{"short/2 denied deadline_below_service_time rejected_locally"}},
		step{At: 300, Ev: reserve("fits", inF, attempt(2), deadline(548)), Want: []string{"fits/2 granted admitted"}},
		// Another route learned nowhere: nothing to refuse by.
		step{At: 310, Ev: reserve("other", path("tenant", "t1", "key", "k2"), deadline(100), func(ev *schemas.Event) { ev.Route, ev.KeyID = "emb", "k2" }), Want: []string{"other/1 granted admitted"}},
		// Streamed answers have no prior either (learned apart).
		step{At: 320, Ev: reserve("st", streaming(), deadline(100)), Want: []string{"st/1 granted admitted"}},
	)
	runSteps(t, cfg, steps)
}

// TestServiceTimeFromTheGateway: a reservation whose route has no learned
// time anywhere in the partition takes the one an earlier attempt's ledger
// named (ReserveRequested.ServicePriorMs, carried by the gateway to the
// fallback); a learned time of its own wins over it. An expiry for the
// deadline names both times, as a denial does.
func TestServiceTimeFromTheGateway(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	prior := func(ms int64) reqOpt { return func(ev *schemas.Event) { ev.ReserveRequested.ServicePriorMs = ms } }
	needed := func(n, avail int64) func(*testing.T, *Ledger, []Output) {
		return func(t *testing.T, _ *Ledger, out []Output) {
			t.Helper()
			if d := out[0].Decision; d.Needed != n || d.Available != avail {
				t.Errorf("needed %d available %d, want %d %d", d.Needed, d.Available, n, avail)
			}
		}
	}
	steps := []step{
		{At: 0, Ev: reserve("short", attempt(2), deadline(999), prior(1000)), Want: []string{"short/2 denied deadline_below_service_time rejected_locally"}, Check: needed(1000, 999)},
		{At: 0, Ev: reserve("fits", attempt(2), deadline(1000), prior(1000)), Want: []string{"fits/2 granted admitted"}},
		// q waits behind fits; granted until 3,000 − 1,000, then expired.
		{At: 1, Ev: reserve("q", attempt(2), class("agent"), deadline(2999), prior(1000)), Want: []string{"q/2 queued capacity queued"}},
		{At: 2000, Ev: tick(), Want: []string{"q/2 expired deadline_below_service_time queued_then_expired"}, Check: needed(1000, 1000)},
	}
	steps = append(steps, step{At: 2999, Ev: reconcileAtt("fits", 2, 100, 50)})
	steps = append(steps, samples{n: 20, from: 3000, every: 10, after: 5, out: 50, firstByteMs: 400, totalMs: 500}.steps()...)
	// Learned here (548 ms): the prior is not used.
	steps = append(steps, step{At: 4000, Ev: reserve("own", attempt(2), deadline(600), prior(5000)), Want: []string{"own/2 granted admitted"}})
	runSteps(t, cfg, steps)
}
