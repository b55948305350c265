package ledger

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// Reproduce a failing simulation with: go test ./ledger -run TestSim -seed=N
// (or SLUICE_SEED=N). Without either, each run draws fresh seeds and prints them.
var seedFlag = flag.Uint64("seed", 0, "simulation seed (0: random)")

func seeds(t *testing.T, n int) []uint64 {
	if *seedFlag != 0 {
		return []uint64{*seedFlag}
	}
	if s, err := strconv.ParseUint(os.Getenv("SLUICE_SEED"), 10, 64); err == nil && s != 0 {
		return []uint64{s}
	}
	base := uint64(time.Now().UnixNano())
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)*0x9e3779b97f4a7c15
	}
	return out
}

// simConfig is the simulated scope: every bucket kind on a 5-level path.
// variant changes the tenant and key limits (config-as-events) but never
// the scope's request bucket, whose window the auditor checks.
func simConfig(variant int) Config {
	scopeRPM := BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimRequests, Capacity: 1200, PeriodMs: 60_000, WindowMs: 1000}
	tenantCap := int64(60_000 + 30_000*int64(variant))
	c := Config{
		Scopes: []ScopeConfig{{
			Name: "s",
			Buckets: []BucketConfig{
				scopeRPM,
				{Level: "tenant", ID: "*", Dimension: schemas.DimTotalTokens, Capacity: tenantCap, WindowMs: 10_000, Guaranteed: 20_000},
				{Level: "tenant", ID: "t0", Dimension: schemas.DimTotalTokens, Capacity: 200_000, WindowMs: 5_000},
				{Level: "key", ID: "*", Dimension: schemas.DimConcurrency, Capacity: int64(3 + variant)},
				{Level: "key", ID: "*", Dimension: schemas.DimSpend, Capacity: 5_000_000, PeriodMs: 600_000, Slots: 10},
				{Level: "profile", ID: "*", Dimension: schemas.DimRequestsPerDay, Capacity: 400},
				{Level: "deployment", ID: "d1", Dimension: schemas.DimRamp, Capacity: 1200, WindowMs: 1000,
					Ramp: &RampConfig{StartPerPeriod: 120, StepPerPeriod: 120, PauseRejectPermille: 200, PauseQueueDepth: 50}},
			},
			Tenants: []TenantConfig{{ID: "t1", Weight: 3}},
		}},
		HoldTTLMs:       20_000,
		StreamHoldTTLMs: 40_000,
		DedupTTLMs:      60_000,
		// Few of the log's reconciles settle a grant: a low bar puts the
		// learned service time (service.go) into force within the log.
		ServiceSamplesMin: 3,
	}
	c.fillDefaults()
	if variant == 1 {
		c.Classes[2].MaxWaitMs = 120_000
	}
	return c
}

type simRecord struct {
	at int64
	ev *schemas.Event
}

var simNodes = []string{"gw1", "gw2", "gw3"}

// genLog produces a random but valid-ish input log, with duplicates,
// garbage, clock regressions, provider feedback, retries and config changes.
func genLog(t testing.TB, seed uint64, n int) []simRecord {
	rng := rand.New(rand.NewPCG(seed, seed^0xdeadbeef))
	var log []simRecord
	var ids []string
	now := int64(1_000_000)
	cfgs := []*schemas.Event{configEv(t, simConfig(0)), configEv(t, simConfig(1))}
	log = append(log, simRecord{now, cfgs[0]})
	classes := []string{"interactive", "agent", "batch", ""}
	for i := 0; len(log) < n; i++ {
		switch rng.IntN(10) {
		case 0:
			now -= int64(rng.IntN(50)) // clock regression: must be ignored
		default:
			now += int64(rng.IntN(120))
		}
		pick := func() string {
			if len(ids) == 0 {
				return "none"
			}
			return ids[rng.IntN(len(ids))]
		}
		var ev *schemas.Event
		switch r := rng.IntN(100); {
		case r < 40:
			id := fmt.Sprintf("r%d", i)
			ids = append(ids, id)
			tn := fmt.Sprintf("t%d", rng.IntN(4))
			ev = reserve(id, tenant(tn), class(classes[rng.IntN(len(classes))]),
				tokens(int64(rng.IntN(3000)), int64(rng.IntN(2000))), spend(int64(rng.IntN(200_000))))
			p := ev.ReserveRequested.Path
			p = append(p, schemas.PathLevel{Level: "profile", ID: fmt.Sprintf("p%d", rng.IntN(3))})
			if rng.IntN(10) != 0 { // the rest is denied: path_missing_level
				p = append(p, schemas.PathLevel{Level: "deployment", ID: "d1"})
			}
			ev.ReserveRequested.Path = p
			rr := ev.ReserveRequested
			rr.Streaming = rng.IntN(5) == 0
			rr.Priority = int32(rng.IntN(5)) - 2
			if rng.IntN(4) == 0 {
				rr.MaxWaitMs = int64(rng.IntN(5000))
			}
			if rng.IntN(4) == 0 {
				rr.DeadlineMs = int64(rng.IntN(30_000))
			}
			rr.FallbackAllowed = rng.IntN(2) == 0
			rr.EmergencyAdmitted = rng.IntN(100) == 0
			if rng.IntN(50) == 0 {
				ev.Attempt = 2
			}
			// gw1 and gw2 heartbeat (irregularly: some get lost), gw3
			// never does (a gateway that predates heartbeats).
			ev.Node = simNodes[rng.IntN(len(simNodes))]
		case r < 55:
			ev = reconcile(pick(), int64(rng.IntN(4000)), int64(rng.IntN(3000)))
			ev.Attempt = int32(1 + rng.IntN(2))
			ev.Reconciled.TotalMs = int64(rng.IntN(60_000))
		case r < 60:
			ev = releaseEv(pick())
			ev.Released.OutputTokens = int64(rng.IntN(100))
		case r < 65:
			kinds := []schemas.RejectionKind{schemas.KindRateLimited, schemas.KindOverloaded, schemas.KindRequestError, schemas.KindQuotaExhausted}
			k := kinds[rng.IntN(len(kinds))]
			if k == schemas.KindQuotaExhausted && rng.IntN(5) != 0 {
				k = schemas.KindRateLimited
			}
			ev = rejected(pick(), int32(1+rng.IntN(2)), k, int64(rng.IntN(3000)))
			if rng.IntN(2) == 0 {
				ev.ProviderRejected.Limiter = schemas.Dimensions[rng.IntN(len(schemas.Dimensions))]
			}
		case r < 70:
			reasons := []schemas.RetryClass{schemas.RetryCapacity, schemas.RetryOverload, schemas.RetryPolicy, "", schemas.RetryCapacity}
			ev = retryEv(pick(), int32(1+rng.IntN(2)), reasons[rng.IntN(len(reasons))], int64(rng.IntN(2000)))
		case r < 83:
			ev = tick()
		case r < 85:
			ev = heartbeat(simNodes[rng.IntN(2)])
		case r < 87:
			ev = observed(schemas.Dimensions[rng.IntN(len(schemas.Dimensions))], int64(rng.IntN(30)))
		case r < 88:
			ev = cfgs[rng.IntN(len(cfgs))]
		case r < 90:
			ev = garbage(rng)
		default:
			if len(log) > 0 {
				// Redelivery of a recent record (within the dedup TTL).
				ev = log[max(0, len(log)-1-rng.IntN(200))].ev
			} else {
				ev = tick()
			}
		}
		log = append(log, simRecord{now, ev})
	}
	return log
}

func garbage(rng *rand.Rand) *schemas.Event {
	ev := &schemas.Event{V: 1, ID: "g", RequestID: fmt.Sprintf("g%d", rng.IntN(5))}
	switch rng.IntN(7) {
	case 0:
		ev.Type = schemas.TypeReserveRequested // no payload
	case 1:
		ev.Type = "Nonsense"
	case 2:
		ev = reserve("g-neg", tokens(-5, 1<<62))
	case 3:
		ev.Type = schemas.TypeConfigChanged
		ev.ConfigChanged = &schemas.ConfigChanged{Ledger: []byte(`{"scopes":[{"name":"s","buckets":[{"level":"x"}]}]}`)}
	case 4:
		ev = reserve("g-scope")
		ev.Scope = "other"
	case 5:
		ev.Type = schemas.TypeDecision
		ev.Decision = &schemas.Decision{Status: schemas.StatusGranted}
	default:
		ev = retryEv("g-retry", 0, schemas.RetryCapacity, -5)
	}
	return ev
}

// runLog applies log records from offset `from` on l and returns the
// encoded decisions.
func runLog(t testing.TB, l *Ledger, log []simRecord, from int, audit func(i int, out []Output)) [][]byte {
	var enc [][]byte
	var out []Output
	for i := from; i < len(log); i++ {
		out = l.Apply(log[i].at, int64(i), log[i].ev, out[:0])
		for j := range out {
			b, err := schemas.Encode(out[j].Event())
			if err != nil {
				t.Fatalf("event %d: encode decision: %v", i, err)
			}
			enc = append(enc, b)
		}
		if audit != nil {
			audit(i, out)
		}
	}
	return enc
}

// auditor checks decisions as they come out.
type auditor struct {
	t        testing.TB
	seed     uint64
	terminal map[resKey]schemas.Status
	queued   map[resKey]bool
	// enforcement window of the scope request bucket
	capacity, period, window int64
	grants                   int64
	minF                     int64
	nodeLost                 int // node_lost decisions seen
	// robbed[u] names a lower-class grant that took capacity waiter u was
	// short of while the deadline rule said u goes first (see deadlineRule).
	robbed   map[resKey]string
	rescueOK int // waiters the rule protected that were granted after all
	// belowService counts deadline_below_service_time decisions.
	belowService int
}

func newAuditor(t testing.TB, seed uint64) *auditor {
	return &auditor{t: t, seed: seed, terminal: map[resKey]schemas.Status{}, queued: map[resKey]bool{}, robbed: map[resKey]string{},
		capacity: 1200, period: 60_000, window: 1000, minF: 1 << 62}
}

func (a *auditor) failf(format string, args ...any) {
	a.t.Helper()
	a.t.Fatalf("seed %d: %s", a.seed, fmt.Sprintf(format, args...))
}

func (a *auditor) see(l *Ledger, i int, out []Output) {
	a.t.Helper()
	for k := range out {
		o := &out[k]
		key := resKey{o.RequestID, o.Attempt}
		st := o.Decision.Status
		if o.Decision.GatewayDecision == "" {
			a.failf("event %d: decision without gateway_decision: %+v", i, o)
		}
		if o.Decision.Reason == schemas.ReasonNodeLost {
			a.nodeLost++
		}
		if o.Decision.Reason == schemas.ReasonDeadlineBelowService {
			a.belowService++
		}
		if st == schemas.StatusHoldExpired {
			if a.terminal[key] != schemas.StatusGranted {
				a.failf("event %d: %v hold expired but was %q", i, key, a.terminal[key])
			}
			continue
		}
		if st == schemas.StatusConflict {
			continue // answers the conflicting copy, not the reservation
		}
		switch o.Decision.Reason {
		case schemas.ReasonInvalidInputTokens, schemas.ReasonMalformedEvent, schemas.ReasonUnknownScope, schemas.ReasonUnknownClass,
			schemas.ReasonBadAttempt, schemas.ReasonUnknownPrevious, schemas.ReasonPathMissingLevel:
			continue // refusals of an event that created no reservation
		}
		if os.Getenv("DEBUG_ID") == o.RequestID {
			a.t.Logf("event %d: %s %+v", i, render(o), o.Decision)
		}
		if prev, done := a.terminal[key]; done {
			a.failf("event %d: %v got %s after terminal %s", i, key, st, prev)
		}
		if st == schemas.StatusQueued {
			if a.queued[key] {
				a.failf("event %d: %v queued twice", i, key)
			}
			a.queued[key] = true
			continue
		}
		a.terminal[key] = st
		if st == schemas.StatusExpired && o.Decision.GatewayDecision == schemas.GDQueuedThenExpired {
			if w, ok := a.robbed[key]; ok {
				a.failf("event %d: %v expired in the queue after %s, a later-deadline lower-class request, was granted capacity it needed", i, key, w)
			}
		}
		if st == schemas.StatusGranted {
			if _, ok := a.robbed[key]; ok {
				a.rescueOK++
				delete(a.robbed, key)
			}
		}
		if st == schemas.StatusGranted && o.Decision.GatewayDecision != schemas.GDEmergencyAdmitted {
			a.deadlineRule(l, key)
			// Never granted with less of its deadline left than the
			// route's expected service time (service.go).
			if ri, ok := l.resFind(key.id, key.attempt); ok {
				if r := &l.st.Res[ri]; r.Deadline > 0 && l.st.Now+r.SvcMs > r.Deadline {
					a.failf("event %d: %v granted at %d with deadline %d and expected service %d ms", i, key, l.st.Now, r.Deadline, r.SvcMs)
				}
			}
		}
		if st == schemas.StatusGranted && o.Decision.GatewayDecision != schemas.GDEmergencyAdmitted {
			// Token bucket bound over every interval [t_i, t_j]:
			// grants × period ≤ capacity × (window + t_j − t_i).
			tm := o.Decision.LogTimeMs
			f := a.grants*a.period - a.capacity*tm
			a.minF = min(a.minF, f)
			a.grants++
			if got := a.grants*a.period - a.capacity*tm - a.minF; got > a.capacity*a.window {
				a.failf("event %d: enforcement window exceeded: %d > %d", i, got, a.capacity*a.window)
			}
		}
	}
	if err := l.checkInvariants(); err != nil {
		a.failf("event %d: %v", i, err)
	}
}

// deadlineRule records, for the grant of w, every waiter u still queued in
// w's scope that the deadline rule puts first — u of a higher class (smaller
// age offset), behind w in key order, eligible now, with u's expiry + class
// offset earlier than w's — that w's debit left short of capacity it could
// have been granted. If u then expires in the queue, the auditor fails: aging
// let a request that could still wait take capacity u needed before its
// deadline. Grants made by the starvation guard (fGuard) are exempt: the
// guard exists to override the rule after RescueMax rescues.
func (a *auditor) deadlineRule(l *Ledger, wk resKey) {
	wi, ok := l.resFind(wk.id, wk.attempt)
	if !ok {
		return
	}
	w := &l.st.Res[wi]
	if w.Flags&fGuard != 0 || w.State != stGranted {
		return
	}
	classes := l.st.Config.Classes
	now := l.st.Now
	wOff := classes[w.ClassIdx].AgeOffsetMs
	sc := &l.st.Scopes[w.Scope]
	for _, ui := range sc.Queue {
		u := &l.st.Res[ui]
		uOff := classes[u.ClassIdx].AgeOffsetMs
		if uOff >= wOff || u.Key < w.Key || u.ExpireMs <= now || u.NotBefore > now ||
			u.ExpireMs+uOff >= w.ExpireMs+wOff {
			continue
		}
		if l.stormHold(u, sc) > now {
			continue // held back by the storm hold: w has less slack (least slack first)
		}
		if wouldBorrow(l, u) {
			continue // reclaim: a waiter within its baseline goes before a borrower
		}
		if b, short := sharedShortBucket(l, w, u); short {
			a.robbed[resKey{u.RequestID, u.Attempt}] = fmt.Sprintf("%s/%d (bucket %d)", w.RequestID, w.Attempt, b)
		}
	}
}

// wouldBorrow reports whether granting u now would borrow beyond a
// guaranteed baseline on its path.
func wouldBorrow(l *Ledger, u *res) bool {
	for _, ni := range u.Path[:u.NPath] {
		n := &l.st.Nodes[ni]
		for bi := n.First; bi < n.First+n.N; bi++ {
			b := &l.st.Buckets[bi]
			sp := &l.cc.specs[b.Spec]
			if a := sp.amount(u); a > 0 && sp.guaranteed > 0 && b.Base < a*sp.period {
				return true
			}
		}
	}
	return false
}

// sharedShortBucket returns a bucket on both paths that w was debited and
// that cannot cover u's amount now, when every bucket on u's path could
// cover it before w's debit: w took capacity u could have been granted.
// (A waiter short of some other bucket was not waiting on w's: capacity
// goes to whoever can use it, as in key order.)
func sharedShortBucket(l *Ledger, w, u *res) (int32, bool) {
	short, found := int32(0), false
	for _, ni := range u.Path[:u.NPath] {
		shared := slices.Contains(w.Path[:w.NPath], ni)
		n := &l.st.Nodes[ni]
		for bi := n.First; bi < n.First+n.N; bi++ {
			b := &l.st.Buckets[bi]
			sp := &l.cc.specs[b.Spec]
			au := sp.amount(u)
			if au <= 0 {
				continue
			}
			avail := l.available(b, sp)
			before := avail
			if shared {
				before += max(0, sp.amount(w))
			}
			if au > before || (b.mark == l.epoch && (!shared || sp.amount(w) <= 0)) {
				// Short of a bucket, or held back on one w does not use by
				// an earlier waiter short of it (mark of this pump).
				return 0, false
			}
			if shared && au > avail && !found {
				short, found = bi, true
			}
		}
	}
	return short, found
}

func TestSimInvariants(t *testing.T) {
	for _, seed := range seeds(t, 8) {
		t.Logf("seed %d", seed)
		log := genLog(t, seed, 4000)
		a := newAuditor(t, seed)
		l := New(7, simConfig(0))
		first := runLog(t, l, log, 0, func(i int, out []Output) { a.see(l, i, out) })

		// Drain: only ticks until nothing is pending. Every queued
		// reservation must reach a terminal decision.
		now := l.NowMs()
		var out []Output
		for n := 0; n < 100_000; n++ {
			w, ok := l.NextWakeMs()
			if !ok {
				break
			}
			if w <= now {
				w = now + 1
			}
			now = w
			out = l.Apply(now, int64(len(log)+n), tick(), out[:0])
			a.see(l, len(log)+n, out)
		}
		if _, ok := l.NextWakeMs(); ok {
			t.Fatalf("seed %d: still pending after drain", seed)
		}
		t.Logf("seed %d: %d node_lost decisions (%d nodes lost), %d deadline_below_service_time", seed, a.nodeLost, l.Stats().NodesLost, a.belowService)
		for k := range a.queued {
			if _, ok := a.terminal[k]; !ok {
				t.Fatalf("seed %d: %v queued and never decided", seed, k)
			}
		}

		// Same log twice: byte-identical decisions.
		again := runLog(t, New(7, simConfig(0)), log, 0, nil)
		if len(again) != len(first) {
			t.Fatalf("seed %d: replay gave %d decisions, first run %d", seed, len(again), len(first))
		}
		for i := range first {
			if !bytes.Equal(first[i], again[i]) {
				t.Fatalf("seed %d: replay decision %d differs:\n%s\n%s", seed, i, first[i], again[i])
			}
		}

		// Snapshot + restore at a random point: identical continuation.
		rng := rand.New(rand.NewPCG(seed, 1))
		cut := rng.IntN(len(log))
		l1 := New(7, simConfig(0))
		head := runLog(t, l1, log[:cut], 0, nil)
		snap, err := l1.MarshalSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		l2, err := Restore(snap)
		if err != nil {
			t.Fatalf("seed %d: restore: %v", seed, err)
		}
		if snap2, _ := l2.MarshalSnapshot(); !bytes.Equal(snap, snap2) {
			t.Fatalf("seed %d: snapshot of restored ledger differs", seed)
		}
		if l2.Offset() != int64(cut) {
			t.Fatalf("seed %d: restored offset %d, want %d", seed, l2.Offset(), cut)
		}
		tail := runLog(t, l2, log, cut, nil)
		if got := append(head, tail...); len(got) != len(first) {
			t.Fatalf("seed %d: restored run gave %d decisions, want %d", seed, len(got), len(first))
		} else {
			for i := range first {
				if !bytes.Equal(first[i], got[i]) {
					t.Fatalf("seed %d: cut at %d: decision %d differs:\n%s\n%s", seed, cut, i, got[i], first[i])
				}
			}
		}
	}
}

// TestSimAppliedTwice checks that applying any event a second time (at the
// same log time, next offset) changes no state.
func TestSimAppliedTwice(t *testing.T) {
	// Regression seeds: a storm hold that moved a waiter's expiry on at
	// every pump, and a request_error refusal of an unknown reservation
	// that pumped the queue again.
	for _, seed := range append(seeds(t, 3), 13196868308286219960, 1796154173610014824) {
		t.Logf("seed %d", seed)
		log := genLog(t, seed, 600)
		l := New(1, simConfig(0))
		var out []Output
		for i, rec := range log {
			before, err := l.MarshalSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			once, _ := Restore(before)
			twice, _ := Restore(before)
			once.Apply(rec.at, int64(2*i), rec.ev, nil)
			twice.Apply(rec.at, int64(2*i), rec.ev, nil)
			twice.Apply(rec.at, int64(2*i+1), rec.ev, nil)
			twice.st.Next = once.st.Next
			a, _ := once.MarshalSnapshot()
			b, _ := twice.MarshalSnapshot()
			if !bytes.Equal(a, b) {
				t.Fatalf("seed %d: event %d (%s %s) applied twice changed state", seed, i, rec.ev.Type, rec.ev.RequestID)
			}
			out = l.Apply(rec.at, int64(2*i), rec.ev, out[:0])
		}
	}
}

// TestSimNoStarvation saturates a scope with interactive traffic and checks
// that batch requests, aged past the interactive ones, are still granted.
func TestSimNoStarvation(t *testing.T) {
	for _, seed := range seeds(t, 4) {
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 2))
		cfg := testConfig(rpm("scope", "*", 600, 1000)) // 10 per second
		cfg.Classes[0].MaxWaitMs = 2_000
		cfg.Classes[0].MaxDepth = 100_000
		l := New(0, cfg)
		var out []Output
		batch := map[string]string{}
		off := int64(0)
		for now := int64(0); now < 600_000; now += 10 {
			// Interactive demand ~ 2× capacity.
			if rng.IntN(5) == 0 {
				out = l.Apply(now, off, reserve(fmt.Sprintf("i%d", off), tenant(fmt.Sprintf("t%d", rng.IntN(3)))), out[:0])
			} else if rng.IntN(100) == 0 && now < 500_000 {
				id := fmt.Sprintf("b%d", off)
				batch[id] = ""
				out = l.Apply(now, off, reserve(id, class("batch"), tenant("tb"), maxWait(100_000)), out[:0])
			} else {
				out = l.Apply(now, off, tick(), out[:0])
			}
			off++
			for _, o := range out {
				if os.Getenv("DEBUG_ID") == o.RequestID {
					t.Logf("%d %s %+v", now, render(&o), o.Decision)
				}
				if _, ok := batch[o.RequestID]; ok && o.Decision.Status != schemas.StatusQueued && o.Decision.Status != schemas.StatusHoldExpired {
					batch[o.RequestID] = string(o.Decision.Status)
				}
			}
		}
		for id, st := range batch {
			if st != string(schemas.StatusGranted) {
				t.Fatalf("seed %d: batch request %s starved: %q", seed, id, st)
			}
		}
		if len(batch) == 0 {
			t.Fatalf("seed %d: no batch requests generated", seed)
		}
	}
}

// overtakes reports whether granted reservation ri went ahead of a waiter
// of a lower class with an earlier key (aged work) in its scope.
func overtakes(l *Ledger, ri int32) bool {
	r := &l.st.Res[ri]
	off := l.st.Config.Classes[r.ClassIdx].AgeOffsetMs
	for _, qi := range l.st.Scopes[r.Scope].Queue {
		q := &l.st.Res[qi]
		if q.Key < r.Key && l.st.Config.Classes[q.ClassIdx].AgeOffsetMs > off {
			return true
		}
	}
	return false
}

// TestSimDeadlineRule runs a seeded noisy-neighbor workload — a batch flood
// at several times a 600 RPM scope, steady interactive traffic and agent
// bursts — long enough for batch and agent work to age past fresh
// interactive requests, with the auditor's deadline check on every grant.
// It also requires that interactive traffic was served while aged work
// waited (grants ahead of aged work happened).
func TestSimDeadlineRule(t *testing.T) {
	for _, seed := range seeds(t, 4) {
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 3))
		cfg := testConfig(rpm("scope", "*", 600, 1000))
		cfg.Classes[2].MaxWaitMs = 50_000
		cfg.Classes[2].MaxDepth = 300 // keeps the auditor's per-step checks cheap
		l := New(0, cfg)
		a := newAuditor(t, seed)
		a.capacity, a.period, a.window = 600, 60_000, 1000
		var out []Output
		off := int64(0)
		rescued := 0
		apply := func(at int64, ev *schemas.Event) {
			out = l.Apply(at, off, ev, out[:0])
			off++
			a.see(l, int(off), out)
			for i := range out {
				if o := &out[i]; o.Decision.Status == schemas.StatusGranted {
					if ri, ok := l.resFind(o.RequestID, o.Attempt); ok && overtakes(l, ri) {
						rescued++
					}
					// Reconcile at once: the request bucket refills by time only.
					rc := reconcile(o.RequestID, 10, 10)
					rc.Attempt = o.Attempt
					out2 := l.Apply(at, off, rc, nil)
					off++
					a.see(l, int(off), out2)
				}
			}
		}
		interactive, expired, guarded := 0, 0, int64(0)
		n := 0
		for now := int64(0); now < 75_000; now += 10 {
			// Per 10 ms: batch 40/s, interactive 4/s, agent 1/s plus bursts.
			agentP := 10
			if now%30_000 >= 10_000 && now%30_000 < 14_000 {
				agentP = 300
			}
			for _, c := range []struct {
				class, tenant string
				perMille      int
			}{{"batch", "bulk", 400}, {"interactive", fmt.Sprintf("web%d", rng.IntN(3)), 40}, {"agent", "agent", agentP}} {
				if rng.IntN(1000) < c.perMille {
					n++
					if c.class == "interactive" {
						interactive++
					}
					apply(now, reserve(fmt.Sprintf("%s%d", c.class[:1], n), tenant(c.tenant), class(c.class)))
				}
			}
			apply(now, tick())
		}
		for k, st := range a.terminal {
			if k.id[0] == 'i' && st == schemas.StatusExpired {
				expired++
			}
		}
		for i := range l.st.Res {
			if l.st.Res[i].Flags&fGuard != 0 {
				guarded++
			}
		}
		t.Logf("seed %d: %d interactive, %d expired; %d grants ahead of aged work; %d guard grants live", seed, interactive, expired, rescued, guarded)
		if rescued == 0 {
			t.Fatalf("seed %d: the workload did not exercise the rule", seed)
		}
	}
}

// TestSimFreezeIsACopy: a Frozen state encodes, however much the ledger
// applied after the Freeze, to the bytes MarshalSnapshot gave at that
// moment (services/ledgerd encodes snapshots off its loop while the ledger
// goes on deciding, so any slice the two shared would corrupt a snapshot).
func TestSimFreezeIsACopy(t *testing.T) {
	for _, seed := range seeds(t, 3) {
		t.Logf("seed %d", seed)
		log := genLog(t, seed, 2000)
		l := New(1, simConfig(0))
		type frozenAt struct {
			i    int
			f    *Frozen
			want []byte
		}
		var frozen []frozenAt
		var out []Output
		for i, rec := range log {
			out = l.Apply(rec.at, int64(i), rec.ev, out[:0])
			if i%37 == 0 {
				want, err := l.MarshalSnapshot()
				if err != nil {
					t.Fatal(err)
				}
				frozen = append(frozen, frozenAt{i, l.Freeze(), want})
			}
		}
		for _, fz := range frozen {
			got, err := fz.f.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, fz.want) {
				t.Fatalf("seed %d: the state frozen after event %d changed as the ledger applied events %d–%d", seed, fz.i, fz.i+1, len(log)-1)
			}
			if fz.f.NextOffset() != int64(fz.i+1) {
				t.Fatalf("seed %d: frozen after event %d: next offset %d", seed, fz.i, fz.f.NextOffset())
			}
		}
	}
}
