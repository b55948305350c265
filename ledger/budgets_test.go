package ledger

import (
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/sluice-dev/sluice/ledger/budget"
	"github.com/sluice-dev/sluice/schemas"
)

// budgetStack is two partitions of the request log, one provider scope
// each; the first is also the budget partition of the tenant's budget
// (its id keys records there). They are joined by an in-order loopback
// that delivers every lease output to the partition its key names, as
// the ledger service produces them (budgets.go).
type budgetStack struct {
	t       *testing.T
	nowMs   int64
	parts   map[string]*Ledger // by scope
	offsets map[string]int64
	logs    map[string][]stackRec // every input of each scope partition, for replay
	out     map[string][]Output   // decisions by scope
	// dropEvery loses every n-th lease message (0: none); dropped counts them.
	dropEvery, sent, dropped int
	// home names the partition (by scope) of budget ids other than
	// acme-daily's.
	home map[string]string
	// down names a partition whose owner is gone: it applies nothing
	// (not even ticks) and every lease message to it is lost.
	down string
}

// route is the partition (named by its scope) that a record key lands in.
func (s *budgetStack) route(key string) string {
	if p, ok := s.home[key]; ok {
		return p
	}
	if key == "acme-daily" {
		return "openai:acme"
	}
	return key
}

func (s *budgetStack) outstanding() (int64, int64) {
	out, lim, _ := s.parts["openai:acme"].bud.bp.Outstanding("acme-daily")
	return out, lim
}

type stackRec struct {
	atMs, offset int64
	ev           *schemas.Event
}

const budgetT0 = int64(1764583200000) // 2025-12-01 10:00 UTC

func budgetLedgerConfig(limit int64, unit budget.Unit) Config {
	cfg := Config{
		Scopes: []ScopeConfig{
			{Name: "anthropic:acme", Buckets: []BucketConfig{{Level: "tenant", ID: "*", Dimension: schemas.DimRequests, Capacity: 10000, PeriodMs: 60000}}},
			{Name: "openai:acme", Buckets: []BucketConfig{{Level: "tenant", ID: "*", Dimension: schemas.DimRequests, Capacity: 10000, PeriodMs: 60000}}},
		},
		Budget: &budget.Config{Budgets: []budget.Budget{{ID: "acme-daily", Level: "tenant", Subject: "acme", Unit: unit, Limit: limit, Window: budget.WindowDay}}},
	}
	cfg.fillDefaults()
	return cfg
}

func newBudgetStack(t *testing.T, cfg Config) *budgetStack {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := &budgetStack{t: t, nowMs: budgetT0, parts: map[string]*Ledger{}, offsets: map[string]int64{}, logs: map[string][]stackRec{}, out: map[string][]Output{}}
	for i, sc := range cfg.Scopes {
		s.parts[sc.Name] = New(int32(i), cfg)
	}
	return s
}

// apply applies ev to scope's partition and runs the lease messages it
// causes through the budget partition and back, until quiet.
func (s *budgetStack) apply(scope string, ev *schemas.Event) {
	type item struct {
		scope string
		ev    *schemas.Event
	}
	queue := []item{{scope, ev}}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		if it.scope == s.down {
			continue
		}
		l := s.parts[it.scope]
		off := s.offsets[it.scope]
		s.offsets[it.scope]++
		s.logs[it.scope] = append(s.logs[it.scope], stackRec{s.nowMs, off, it.ev})
		s.out[it.scope] = l.Apply(s.nowMs, off, it.ev, s.out[it.scope])
		for _, lo := range l.LeaseOutputs() {
			s.sent++
			if s.dropEvery > 0 && s.sent%s.dropEvery == 0 {
				s.dropped++
				continue
			}
			queue = append(queue, item{s.route(lo.Key()), lo.Event(l.st.Partition, off, s.nowMs)})
		}
	}
}

// outScopes is the scopes that have decisions, sorted: a loop that draws
// random numbers per decision ranges over these, not over the map, so
// that a seed reproduces.
func (s *budgetStack) outScopes() []string {
	names := make([]string, 0, len(s.out))
	for n := range s.out {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// tick advances time by ms and ticks every partition.
func (s *budgetStack) tick(ms int64) {
	s.nowMs += ms
	names := make([]string, 0, len(s.parts))
	for n := range s.parts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s.apply(n, &schemas.Event{V: 1, Type: schemas.TypeTick, ID: "t", Tick: &schemas.Tick{Reason: "test"}})
	}
}

func budgetReserve(id, scope string, spendMicros int64) *schemas.Event {
	return reserve(id, func(ev *schemas.Event) {
		ev.Scope, ev.Tenant = scope, "acme"
		ev.ReserveRequested.Path = []schemas.PathLevel{{Level: "tenant", ID: "acme"}, {Level: "key", ID: "k1"}}
		ev.ReserveRequested.SpendMicros = spendMicros
	})
}

// last returns the last decision of request id.
func (s *budgetStack) last(id string) (schemas.Decision, bool) {
	var d schemas.Decision
	found := false
	for _, outs := range s.out {
		for _, o := range outs {
			if o.RequestID == id {
				d, found = o.Decision, true
			}
		}
	}
	return d, found
}

// TestBudgetConcurrentFirstRequests is LiteLLM #40095 through the scope
// partitions: 8 concurrent first requests, 4 on OpenAI and 4 on
// Anthropic, against one tenant budget that one request exhausts. Exactly
// one is granted; the other 7 are denied budget_exhausted, and their
// decisions name the budget and the lease that refused them.
func TestBudgetConcurrentFirstRequests(t *testing.T) {
	s := newBudgetStack(t, budgetLedgerConfig(100, budget.UnitSpendMicros))
	scopes := []string{"openai:acme", "anthropic:acme"}
	for i := range 8 {
		s.apply(scopes[i%2], budgetReserve(fmt.Sprintf("r%d", i), scopes[i%2], 60))
	}
	for range 5 {
		s.tick(100)
	}
	granted, denied := 0, 0
	for i := range 8 {
		id := fmt.Sprintf("r%d", i)
		d, ok := s.last(id)
		switch {
		case !ok:
			t.Errorf("%s: no decision", id)
		case d.Status == schemas.StatusGranted:
			granted++
		case d.Status == schemas.StatusDenied && d.Reason == schemas.ReasonBudgetExhausted:
			denied++
			if want := "budget:acme-daily/lease:" + scopes[i%2]; d.LimitPath != want || d.GatewayDecision != schemas.GDRejectedPolicy ||
				d.LimitDimension != schemas.DimSpend || d.Needed != 60 || d.Available >= 60 {
				t.Errorf("%s: limit_path %q %s needed %d available %d, gateway_decision %s; want %q spend, 60 needed, < 60 available, rejected_policy",
					id, d.LimitPath, d.LimitDimension, d.Needed, d.Available, d.GatewayDecision, want)
			}
		default:
			t.Errorf("%s: %s %s", id, d.Status, d.Reason)
		}
	}
	if granted != 1 || denied != 7 {
		t.Fatalf("granted %d, denied %d; want exactly 1 and 7", granted, denied)
	}
}

// TestBudgetSpansProviders: traffic on two providers at 3× the budget
// spends it exactly, never more; a release gives its charge back to the
// budget; and a request waiting for its lease says so (budget_lease).
func TestBudgetSpansProviders(t *testing.T) {
	const limit = 50
	s := newBudgetStack(t, budgetLedgerConfig(limit, budget.UnitRequests))
	scopes := []string{"openai:acme", "anthropic:acme"}
	n := 0
	sawLease := false
	for step := range 150 {
		sc := scopes[step%2]
		id := fmt.Sprintf("q%d", n)
		n++
		s.apply(sc, budgetReserve(id, sc, 0))
		if d, _ := s.last(id); d.Status == schemas.StatusQueued && d.Reason == schemas.ReasonBudgetLease {
			sawLease = true
		}
		s.tick(10)
	}
	for range 20 {
		s.tick(200)
	}
	granted := 0
	for i := range n {
		if d, _ := s.last(fmt.Sprintf("q%d", i)); d.Status == schemas.StatusGranted {
			granted++
		}
	}
	if granted != limit {
		t.Errorf("granted %d of 150 requests against a budget of %d requests", granted, limit)
	}
	if !sawLease {
		t.Error("no request waited for its lease (budget_lease)")
	}
	out, lim := s.outstanding()
	if out > lim {
		t.Errorf("budget partition: outstanding %d > limit %d", out, lim)
	}
}

// TestBudgetReplayExact: a scope partition restored from a snapshot and
// replaying its log after it produces the same decisions and the same
// lease messages, byte for byte, and the same state.
func TestBudgetReplayExact(t *testing.T) {
	s := newBudgetStack(t, budgetLedgerConfig(40, budget.UnitRequests))
	scopes := []string{"openai:acme", "anthropic:acme"}
	var snap []byte
	var snapAt int
	for step := range 100 {
		sc := scopes[step%2]
		s.apply(sc, budgetReserve(fmt.Sprintf("x%d", step), sc, 0))
		if step == 30 {
			var err error
			if snap, err = s.parts["openai:acme"].MarshalSnapshot(); err != nil {
				t.Fatal(err)
			}
			snapAt = len(s.logs["openai:acme"])
		}
		if step%7 == 0 {
			s.apply(sc, envelopeFor(schemas.TypeReleased, fmt.Sprintf("x%d", step-3), sc))
		}
		s.tick(15)
	}
	live := s.parts["openai:acme"]
	r, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []Output
	var gotLease, wantLease []LeaseOutput
	replay := func(l *Ledger, recs []stackRec) ([]Output, []LeaseOutput) {
		var outs []Output
		var leases []LeaseOutput
		for _, rec := range recs {
			outs = l.Apply(rec.atMs, rec.offset, rec.ev, outs)
			leases = append(leases, l.LeaseOutputs()...)
		}
		return outs, leases
	}
	got, gotLease = replay(r, s.logs["openai:acme"][snapAt:])
	fresh := New(1, budgetLedgerConfig(40, budget.UnitRequests))
	_, _ = replay(fresh, s.logs["openai:acme"][:snapAt])
	want, wantLease = replay(fresh, s.logs["openai:acme"][snapAt:])
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotLease, wantLease) {
		t.Fatalf("replay from the snapshot differs: %d/%d decisions, %d/%d lease messages", len(got), len(want), len(gotLease), len(wantLease))
	}
	if len(gotLease) == 0 {
		t.Fatal("no lease messages after the snapshot: the test does not test leases")
	}
	a, _ := r.MarshalSnapshot()
	b, _ := live.MarshalSnapshot()
	if string(a) != string(b) {
		t.Fatal("restored+replayed state differs from the live one")
	}
}

func envelopeFor(typ schemas.Type, id, scope string) *schemas.Event {
	ev := envelope(typ, id, 1)
	ev.Scope = scope
	if typ == schemas.TypeReleased {
		ev.Released = &schemas.Released{Reason: "cancel"}
	}
	return ev
}

// TestBudgetLostLeaseMessages: with every 3rd, 4th or 5th lease message
// lost (requests, grants and returns alike), the budget is never
// overspent, and the lost messages are healed by the next ones (the
// counters are cumulative) so that the budget is still used.
func TestBudgetLostLeaseMessages(t *testing.T) {
	for _, every := range []int{3, 4, 5} {
		const limit = 60
		s := newBudgetStack(t, budgetLedgerConfig(limit, budget.UnitRequests))
		s.dropEvery = every
		scopes := []string{"openai:acme", "anthropic:acme"}
		n := 0
		for step := range 300 {
			sc := scopes[step%2]
			s.apply(sc, budgetReserve(fmt.Sprintf("q%d", n), sc, 0))
			n++
			s.tick(25)
			granted := 0
			for i := range n {
				if d, _ := s.last(fmt.Sprintf("q%d", i)); d.Status == schemas.StatusGranted {
					granted++
				}
			}
			if granted > limit {
				t.Fatalf("drop every %d: step %d: %d granted against a budget of %d", every, step, granted, limit)
			}
			if out, lim := s.outstanding(); out > lim {
				t.Fatalf("drop every %d: step %d: outstanding %d > %d", every, step, out, lim)
			}
		}
		granted := 0
		for i := range n {
			if d, _ := s.last(fmt.Sprintf("q%d", i)); d.Status == schemas.StatusGranted {
				granted++
			}
		}
		t.Logf("drop every %d: %d of %d lease messages lost, %d granted of a budget of %d", every, s.dropped, s.sent, granted, limit)
		if granted < limit*9/10 {
			t.Errorf("drop every %d: only %d granted of %d", every, granted, limit)
		}
	}
}

// TestBudgetUnreachablePartition is issue 23's failure rule for an
// unreachable budget partition (its owner dead, not yet taken over): each
// scope keeps spending what its lease still holds, exactly that, and then
// grants nothing more of the budget (its requests wait budget_lease and
// expire), however long the outage; when the partition is back, its
// holders' resent counters are answered and the budget is spent again,
// never above its limit.
func TestBudgetUnreachablePartition(t *testing.T) {
	const limit = 1000
	cfg := budgetLedgerConfig(limit, budget.UnitRequests)
	s := newBudgetStack(t, cfg)
	s.parts["budget"] = New(2, cfg)
	s.home = map[string]string{"acme-daily": "budget"} // neither scope's partition
	scopes := []string{"openai:acme", "anthropic:acme"}
	n := 0
	send := func(steps int) {
		for range steps {
			for _, sc := range scopes {
				s.apply(sc, budgetReserve(fmt.Sprintf("u%d", n), sc, 0))
				n++
			}
			s.tick(10)
		}
	}
	granted := func(from, to int) map[string]int {
		g := map[string]int{}
		for i := from; i < to; i++ {
			if d, _ := s.last(fmt.Sprintf("u%d", i)); d.Status == schemas.StatusGranted {
				g[scopes[i%2]]++
			}
		}
		return g
	}
	lease := func(sc string) budget.Lease {
		l, ok := s.parts[sc].BudgetLease(sc, "acme-daily")
		if !ok {
			t.Fatalf("%s holds no lease of acme-daily", sc)
		}
		return l
	}
	send(50)
	held := map[string]int64{}
	for _, sc := range scopes {
		l := lease(sc)
		if held[sc] = l.Granted - l.Returned - l.Used; held[sc] <= 0 {
			t.Fatalf("%s holds %d before the outage (%+v): the test needs a lease to spend", sc, held[sc], l)
		}
	}
	t.Logf("before the outage: %d requests, granted %v; leases held %v", n, granted(0, n), held)

	s.down = "budget"
	cut := n
	send(50) // 500 ms of log time, 100 requests: more than the leases hold
	afterCut := granted(cut, n)
	for _, sc := range scopes {
		if int64(afterCut[sc]) != held[sc] {
			t.Errorf("%s granted %d while its budget partition was unreachable, its lease held %d: want exactly that", sc, afterCut[sc], held[sc])
		}
	}
	spent := n
	send(1000) // 10 s more of outage: many terms and retries
	for sc, g := range granted(spent, n) {
		t.Errorf("%s granted %d requests of the budget with its lease spent and its budget partition unreachable", sc, g)
	}
	waited := 0
	for i := spent; i < n; i++ {
		if d, _ := s.last(fmt.Sprintf("u%d", i)); d.Status == schemas.StatusGranted {
			t.Fatalf("u%d granted during the outage", i)
		}
		for _, o := range s.out[scopes[i%2]] {
			if o.RequestID == fmt.Sprintf("u%d", i) && o.Decision.Reason == schemas.ReasonBudgetLease {
				waited++
				break
			}
		}
	}
	if waited == 0 {
		t.Error("no request waited budget_lease during the outage")
	}

	s.down = ""
	back := n
	send(100)
	afterBack := granted(back, n)
	total := 0
	for _, g := range granted(0, n) {
		total += g
	}
	t.Logf("outage: granted %v (leases held %v), then none of %d; back: granted %v; total %d of %d", afterCut, held, back-spent, afterBack, total, limit)
	if afterBack[scopes[0]] == 0 || afterBack[scopes[1]] == 0 {
		t.Errorf("after the budget partition came back, granted %v: a scope was not served again", afterBack)
	}
	if total > limit {
		t.Errorf("granted %d against a budget of %d", total, limit)
	}
	if out, lim, _ := s.parts["budget"].bud.bp.Outstanding("acme-daily"); out > lim {
		t.Errorf("budget partition: outstanding %d > limit %d", out, lim)
	}
}

// TestBudgetFallbackAfterRefusal: a request whose first attempt the
// provider refused (a 503 or a 429: nothing spent, its charge given back)
// falls back to the other provider's scope, which must then be able to
// spend what the refused attempt gave back, even when that is the last of
// the budget. The fallback is charged through its own scope's lease, the
// budget is spent exactly once, and the next request is denied
// budget_exhausted. The budget partition is each scope's partition in
// turn, and a third one.
func TestBudgetFallbackAfterRefusal(t *testing.T) {
	for _, tc := range []struct {
		name, home string
		unit       budget.Unit
		limit      int64
		cost       int64
		kind       schemas.RejectionKind
		status     int32
	}{
		{"requests, 503, budget on the primary's partition", "openai:acme", budget.UnitRequests, 1, 0, schemas.KindOverloaded, 503},
		{"requests, 429, budget on the fallback's partition", "anthropic:acme", budget.UnitRequests, 1, 0, schemas.KindRateLimited, 429},
		{"spend, 503, budget on a third partition", "budget", budget.UnitSpendMicros, 100, 60, schemas.KindOverloaded, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := budgetLedgerConfig(tc.limit, tc.unit)
			s := newBudgetStack(t, cfg)
			s.parts["budget"] = New(2, cfg)
			s.home = map[string]string{"acme-daily": tc.home}
			s.apply("openai:acme", budgetReserve("r", "openai:acme", tc.cost))
			s.tick(20)
			if d, _ := s.last("r"); d.Status != schemas.StatusGranted {
				t.Fatalf("first attempt %s %s, want granted", d.Status, d.Reason)
			}
			rj := rejected("r", 1, tc.kind, 0)
			rj.Scope, rj.ProviderRejected.HTTPStatus = "openai:acme", tc.status
			s.apply("openai:acme", rj)
			fb := budgetReserve("r", "anthropic:acme", tc.cost)
			fb.Attempt, fb.ID = 2, "e-r-2"
			s.apply("anthropic:acme", fb)
			for range 10 {
				s.tick(20)
			}
			var fallback []string
			for _, o := range s.out["anthropic:acme"] {
				if o.RequestID == "r" && o.Attempt == 2 {
					fallback = append(fallback, fmt.Sprintf("%s %s", o.Decision.Status, o.Decision.Reason))
				}
			}
			if d, _ := s.last("r"); d.Status != schemas.StatusGranted {
				t.Fatalf("the fallback after a refused attempt: %v; want granted, the refused attempt spent nothing of the budget", fallback)
			}
			oa, _ := s.parts["openai:acme"].BudgetLease("openai:acme", "acme-daily")
			an, _ := s.parts["anthropic:acme"].BudgetLease("anthropic:acme", "acme-daily")
			if want := max(tc.cost, 1); oa.Used != 0 || an.Used != want {
				t.Errorf("used: openai %d, anthropic %d; want 0 and %d (the fallback charged through its own lease)", oa.Used, an.Used, want)
			}
			// The fallback is answered (spending all it reserved), so that
			// the next request is held by nothing but the budget (OpenAI's
			// scope cools down after its refusal, Anthropic's slow start
			// counts the fallback in flight).
			rc := reconcileAtt("r", 2, 100, 50)
			rc.Scope, rc.Reconciled.SpendMicros = "anthropic:acme", tc.cost
			s.apply("anthropic:acme", rc)
			s.apply("anthropic:acme", budgetReserve("next", "anthropic:acme", tc.cost))
			for range 10 {
				s.tick(20)
			}
			if d, _ := s.last("next"); d.Status != schemas.StatusDenied || d.Reason != schemas.ReasonBudgetExhausted {
				t.Errorf("the request after the budget was spent: %s %s %s %d/%d, want denied budget_exhausted", d.Status, d.Reason, d.LimitPath, d.Needed, d.Available)
			}
			if out, lim, _ := s.parts[tc.home].bud.bp.Outstanding("acme-daily"); out > lim {
				t.Errorf("budget partition: outstanding %d > limit %d", out, lim)
			}
		})
	}
}

// TestBudgetExplainNamesBudgetAndLease: explaining a request that its
// budget refused names the budget and the lease, replaying the scope
// partition's log (lease records included) from its start.
func TestBudgetExplainNamesBudgetAndLease(t *testing.T) {
	s := newBudgetStack(t, budgetLedgerConfig(100, budget.UnitSpendMicros))
	s.apply("anthropic:acme", budgetReserve("first", "anthropic:acme", 60))
	s.tick(50)
	s.apply("anthropic:acme", budgetReserve("second", "anthropic:acme", 60))
	s.tick(50)
	if d, _ := s.last("second"); d.Reason != schemas.ReasonBudgetExhausted {
		t.Fatalf("second: %s %s, want denied budget_exhausted", d.Status, d.Reason)
	}
	x := NewExplainer(New(1, budgetLedgerConfig(100, budget.UnitSpendMicros)), "second")
	var out []Output
	for _, rec := range s.logs["anthropic:acme"] {
		out = x.Apply(rec.atMs, rec.offset, rec.ev, out[:0])
	}
	e := x.Explanation()
	if e.LimitPath != "budget:acme-daily/lease:anthropic:acme" {
		t.Fatalf("explanation limit_path %q, outcome %q: want the budget and the lease", e.LimitPath, e.Outcome)
	}

	// A request that waited for its lease (budget_lease: the budget
	// partition unreachable) and expired: the explanation names the lease
	// it waited for, not only the expiry.
	cfg := budgetLedgerConfig(100, budget.UnitRequests)
	w := newBudgetStack(t, cfg)
	w.parts["budget"] = New(2, cfg)
	w.home, w.down = map[string]string{"acme-daily": "budget"}, "budget"
	w.apply("anthropic:acme", budgetReserve("waits", "anthropic:acme", 0))
	for range 100 {
		w.tick(100)
	}
	x = NewExplainer(New(1, cfg), "waits")
	for _, rec := range w.logs["anthropic:acme"] {
		out = x.Apply(rec.atMs, rec.offset, rec.ev, out[:0])
	}
	if e := x.Explanation(); e.LimitPath != "budget:acme-daily/lease:anthropic:acme" || e.Outcome != "expired (max_wait_exceeded)" {
		t.Fatalf("waited for its lease: explanation outcome %q, limit_path %q; want expired (max_wait_exceeded) by the budget's lease", e.Outcome, e.LimitPath)
	}
}

// BenchmarkReserveReconcile6x4Budget is BenchmarkReserveReconcile6x4 with
// one org budget (requests, far above the traffic) on every request: what
// the lease check, the charge and the per-Apply lease bookkeeping cost on
// the hot path. The partition is its own budget partition: lease messages
// are applied back to it at once, as the next records of its log.
func BenchmarkReserveReconcile6x4Budget(b *testing.B) {
	w := NewBenchWorkload()
	cfg := BenchConfig()
	cfg.Budget = &budget.Config{Budgets: []budget.Budget{{ID: "org-monthly", Level: "org", Subject: "org",
		Unit: budget.UnitRequests, Limit: 1 << 40, Window: budget.WindowMonth}}}
	w.out = w.l.Apply(w.nowMs, w.offset, configEv(b, cfg), w.out[:0])
	w.offset++
	if e := w.l.ConfigError(); e != "" {
		b.Fatal(e)
	}
	var leaseMsgs int64
	loop := func() {
		for los := w.l.LeaseOutputs(); len(los) > 0; los = w.l.LeaseOutputs() {
			evs := make([]*schemas.Event, len(los))
			for i := range los {
				evs[i] = los[i].Event(0, w.offset, w.nowMs)
			}
			leaseMsgs += int64(len(evs))
			for _, ev := range evs {
				w.out = w.l.Apply(w.nowMs, w.offset, ev, w.out[:0])
				w.offset++
			}
		}
	}
	step := func() (decisions, granted int) {
		i := w.next
		w.next = (w.next + 1) % benchPool
		w.nowMs++
		w.out = w.l.Apply(w.nowMs, w.offset, w.reserves[i], w.out[:0])
		w.offset++
		decisions = len(w.out)
		loop()
		if d, ok := w.l.resFind(w.reserves[i].RequestID, 1); ok && w.l.st.Res[d].State == stGranted {
			granted = 1
		}
		w.out = w.l.Apply(w.nowMs, w.offset, w.recons[i], w.out[:0])
		w.offset++
		loop()
		return decisions + len(w.out), granted
	}
	for range 2 * benchPool {
		step()
	}
	leaseMsgs = 0
	b.ReportAllocs()
	b.ResetTimer()
	var decisions, granted, n int64
	for b.Loop() {
		d, g := step()
		decisions += int64(d)
		granted += int64(g)
		n++
	}
	if granted < n*9/10 {
		b.Fatalf("%d of %d granted: the budget holds the workload back", granted, n)
	}
	b.ReportMetric(float64(decisions)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(leaseMsgs)/float64(n), "lease_msgs/op")
}
