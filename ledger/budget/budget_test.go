package budget

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// TestConcurrentFirstRequests is LiteLLM #40095 (and #34732): 8
// concurrent first requests, 4 on each of two providers, against a budget
// that one request exhausts. Checking and charging are one step of one
// writer per lease, and the lease comes from the budget's single writer,
// so exactly one is admitted; the other 7 are denied budget_exhausted,
// none waits forever.
func TestConcurrentFirstRequests(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8} {
		w := newWorld(t, seed, Config{Budgets: []Budget{{ID: "acme-daily", Level: "tenant", Subject: "acme",
			Unit: UnitSpendMicros, Limit: 100, Window: WindowDay}}}, []string{"anthropic:acme", "openai:acme"}, faults{})
		w.nowMs = t0
		for i := range 8 {
			s := w.scopes[i%2]
			s.queue = append(s.queue, req{id: i, cost: 60, actual: 60, arrMs: t0, holdMs: 1_000_000})
		}
		for _, s := range w.scopes {
			w.pump(s)
		}
		w.run(3000, func(int, int64) float64 { return 0 }, nil)
		admitted, denied := 0, 0
		for _, s := range w.scopes {
			admitted += s.admit
			denied += s.denied
			if len(s.queue) != 0 || s.expire != 0 {
				t.Errorf("seed %d: %s still queues %d, expired %d", seed, s.name, len(s.queue), s.expire)
			}
		}
		if admitted != 1 || denied != 7 || w.spent != 60 {
			t.Errorf("seed %d: admitted %d, denied %d, spent %d; want 1, 7, 60", seed, admitted, denied, w.spent)
		}
	}
}

// TestDemandShift measures how fast the share follows demand: the first
// scope's traffic stops at 10 s and moves to the second. Reported: the
// time until the second scope is admitted again, and until the first
// holds nothing unused (its lease is back with the budget partition).
// The README's bound is one term plus a round trip for the idle lease to
// come back; the new scope is served after one round trip.
func TestDemandShift(t *testing.T) {
	w := newWorld(t, 7, simConfig(1_000_000, UnitRequests), []string{"anthropic:acme", "openai:acme"}, faults{})
	w.nowMs = t0
	rate := func(i int, now int64) float64 {
		if (i == 0) == (now-t0 < 10_000) {
			return 200
		}
		return 0
	}
	w.run(10_000, rate, func(*rand.Rand) (int64, int64) { return 1, 1 })
	shift := w.nowMs
	before := w.scopes[1].admit
	var served, idle int64
	for w.nowMs-shift < 10_000 && (served == 0 || idle == 0) {
		w.run(1, rate, func(*rand.Rand) (int64, int64) { return 1, 1 })
		if served == 0 && w.scopes[1].admit > before {
			served = w.nowMs - shift
		}
		l, _ := w.scopes[0].h.Lease("acme-daily")
		if idle == 0 && l.Granted-l.Returned-l.Used == 0 {
			idle = w.nowMs - shift
		}
	}
	cfg := w.cfg
	cfg.FillDefaults()
	t.Logf("demand shift: second scope served after %d ms, first scope's unused lease back after %d ms (term %d ms)", served, idle, cfg.TermMs)
	if served == 0 || idle == 0 || idle > 2*cfg.TermMs+cfg.RetryMs {
		t.Errorf("shift not followed within bounds: served %d ms, idle lease back %d ms", served, idle)
	}
}

// TestGrantsNeverExceedPool is the property the invariant rests on: with
// holders sending arbitrary (even lying) counters, in any order and
// repeated, the budget partition never grants past its pool.
func TestGrantsNeverExceedPool(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		cfg := Config{Budgets: []Budget{
			{ID: "d", Level: "tenant", Subject: "a", Unit: UnitTokens, Limit: int64(1 + rng.IntN(1000)), Window: WindowDay},
			{ID: "r", Level: "key", Subject: "k", Unit: UnitRequests, Limit: int64(1 + rng.IntN(1000)), Window: WindowRolling, RollingMs: 60_000, Slots: 6},
		}}
		p, err := NewPartition(cfg)
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		seq := map[string]int64{}
		for step := range 400 {
			now += int64(rng.IntN(5000))
			id := []string{"d", "r"}[rng.IntN(2)]
			holder := []string{"a", "b", "c"}[rng.IntN(3)]
			b := p.st.Budgets[p.idx[id]]
			win, _ := windowOf(&b.B, now-int64(rng.IntN(2))*int64(rng.IntN(20_000)))
			seq[id+holder] += int64(rng.IntN(3)) - 0
			var ev *schemas.Event
			n := func() int64 { return int64(rng.IntN(1500)) - 100 }
			if rng.IntN(3) == 0 {
				ev = &schemas.Event{V: 1, ID: "x", Type: schemas.TypeLeaseReturned, LeaseReturned: &schemas.LeaseReturned{
					Budget: id, Holder: holder, WindowStartMs: win, Seq: seq[id+holder], Granted: n(), Returned: n(), Used: n()}}
			} else {
				ev = &schemas.Event{V: 1, ID: "x", Type: schemas.TypeLeaseRequested, LeaseRequested: &schemas.LeaseRequested{
					Budget: id, Holder: holder, WindowStartMs: win, Seq: seq[id+holder], Granted: n(), Returned: n(), Used: n(), Demand: n(), Need: n()}}
			}
			granted := map[string]bool{}
			for _, o := range p.Apply(now, ev, nil) {
				if o.Grant.Amount < 0 || o.Grant.Granted < o.Grant.Amount {
					t.Fatalf("seed %d step %d: grant %+v", seed, step, o.Grant)
				}
				if o.Grant.Amount > 0 {
					granted[o.Grant.Budget] = true
				}
			}
			for _, b := range p.st.Budgets {
				for _, h := range b.Cur.Holders {
					if h.Returned > h.Granted {
						t.Fatalf("seed %d step %d: %s/%s returned %d > granted %d", seed, step, b.B.ID, h.Name, h.Returned, h.Granted)
					}
				}
				// Reports of use (true or not) may push the committed sum
				// past the pool; a grant never does.
				if c := b.Cur.committed(); granted[b.B.ID] && c > b.pool() {
					t.Fatalf("seed %d step %d: %s granted up to %d of a pool of %d", seed, step, b.B.ID, c, b.pool())
				}
			}
		}
	}
}

// TestFairShares is the allocation rule as a table: max-min fairness of
// the unused budget over the demands, smallest first, at least the need.
func TestFairShares(t *testing.T) {
	cases := []struct {
		name    string
		avail   int64
		demands []int64
		needs   []int64
		want    []int64
	}{
		{"enough for all", 100, []int64{10, 20}, nil, []int64{10, 20}},
		{"equal split", 100, []int64{80, 80}, nil, []int64{50, 50}},
		{"small demand first", 100, []int64{10, 200, 200}, nil, []int64{10, 45, 45}},
		{"no demand, no share", 100, []int64{0, 500}, nil, []int64{0, 100}},
		// Needs first (smallest first), then max-min over what is unmet.
		{"need before the equal parts", 10, []int64{100, 100, 100}, []int64{0, 0, 8}, []int64{1, 1, 8}},
		{"needs, then equal parts", 30, []int64{100, 100, 100}, []int64{2, 2, 8}, []int64{8, 8, 14}},
		{"needs while they fit", 10, []int64{100, 100}, []int64{6, 6}, []int64{6, 4}},
		{"nothing left", 0, []int64{5, 5}, []int64{1, 1}, []int64{0, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, _ := NewPartition(Config{Budgets: []Budget{{ID: "b", Level: "tenant", Subject: "a", Unit: UnitTokens, Limit: c.avail, Window: WindowDay}}})
			p.st.NowMs = t0
			b := p.st.Budgets[0]
			p.roll(b, t0)
			for i, d := range c.demands {
				h := p.holder(&b.Cur, string(rune('a'+i)), true)
				h.Demand, h.HeardMs = d, t0
				if c.needs != nil {
					h.Need = c.needs[i]
				}
			}
			p.shares(b)
			for i, h := range b.Cur.Holders {
				if h.Target != c.want[i] {
					t.Errorf("holder %s: share %d, want %d", h.Name, h.Target, c.want[i])
				}
			}
		})
	}
}

// TestWindows checks the calendar arithmetic (no time package in the
// machine) against the time package, and the rolling slots.
func TestWindows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		ms := int64(rng.IntN(200*365)) * dayMs / 2 // 1970..2070
		ms += int64(rng.IntN(dayMs))
		tm := time.UnixMilli(ms).UTC()
		day := Budget{Window: WindowDay}
		if s, e := windowOf(&day, ms); s != time.Date(tm.Year(), tm.Month(), tm.Day(), 0, 0, 0, 0, time.UTC).UnixMilli() || e != s+dayMs {
			t.Fatalf("day of %v: [%d, %d)", tm, s, e)
		}
		month := Budget{Window: WindowMonth}
		ws := time.Date(tm.Year(), tm.Month(), 1, 0, 0, 0, 0, time.UTC)
		if s, e := windowOf(&month, ms); s != ws.UnixMilli() || e != ws.AddDate(0, 1, 0).UnixMilli() {
			t.Fatalf("month of %v: [%v, %v)", tm, time.UnixMilli(s).UTC(), time.UnixMilli(e).UTC())
		}
		roll := Budget{Window: WindowRolling, RollingMs: 3_600_000, Slots: 12}
		if s, e := windowOf(&roll, ms); s > ms || e <= ms || e-s != 300_000 || s%300_000 != 0 {
			t.Fatalf("rolling slot of %d: [%d, %d)", ms, s, e)
		}
	}
}

// TestRollingWindowCountsEarlierSlots: a rolling budget's pool is the
// limit less what the earlier slots within the window used.
func TestRollingWindowCountsEarlierSlots(t *testing.T) {
	cfg := Config{Budgets: []Budget{{ID: "acme-daily", Level: "tenant", Subject: "acme", Unit: UnitRequests, Limit: 100,
		Window: WindowRolling, RollingMs: 60_000, Slots: 6}}}
	w := newWorld(t, 9, cfg, []string{"openai:acme"}, faults{})
	w.nowMs = t0
	w.run(5_000, func(int, int64) float64 { return 200 }, func(*rand.Rand) (int64, int64) { return 1, 1 })
	if w.spent != 100 {
		t.Fatalf("first slot: spent %d, want the whole 100", w.spent)
	}
	// Later slots inside the minute get nothing; after the minute, the
	// first slot's use has rolled out.
	w.run(50_000, func(int, int64) float64 { return 200 }, func(*rand.Rand) (int64, int64) { return 1, 1 })
	if got := w.scopes[0].admit; got != 100 {
		t.Fatalf("within the rolling minute: admitted %d, want 100", got)
	}
	w.run(20_000, func(int, int64) float64 { return 200 }, func(*rand.Rand) (int64, int64) { return 1, 1 })
	if got := w.scopes[0].admit; got <= 100 || got > 200 {
		t.Fatalf("after the rolling minute: admitted %d, want 101..200", got)
	}
}

// TestDayRollCarriesUnreturnedLease: at midnight a holder whose clock
// lags may still spend yesterday's lease, so what it has not returned
// counts against today until it does.
func TestDayRollCarriesUnreturnedLease(t *testing.T) {
	cfg := simConfig(1000, UnitRequests)
	w := newWorld(t, 5, cfg, []string{"openai:acme", "anthropic:acme"}, faults{})
	midnight := (t0/dayMs + 1) * dayMs
	w.nowMs = midnight - 3_000
	w.run(6_000, func(int, int64) float64 { return 100 }, func(*rand.Rand) (int64, int64) { return 1, 1 })
	if w.nowMs < midnight {
		t.Fatal("did not cross midnight")
	}
	b := w.p.st.Budgets[0]
	if b.Cur.StartMs != midnight || b.Prev == nil {
		t.Fatalf("window %d prev %v, want %d and yesterday's", b.Cur.StartMs, b.Prev, midnight)
	}
	out, limit, _ := w.p.Outstanding("acme-daily")
	if out > limit {
		t.Fatalf("outstanding %d > limit %d after midnight", out, limit)
	}
}

func TestConfigListsEveryProblem(t *testing.T) {
	c := Config{TermMs: -1, RetryMs: 5, HoldersMax: -2, Budgets: []Budget{
		{ID: "", Level: "provider", Unit: "dollars", Limit: -1, Window: "week"},
		{ID: "x", Level: "tenant", Subject: "a", Unit: UnitTokens, Limit: 1, Window: WindowRolling, RollingMs: 7, Slots: 3},
		{ID: "x", Level: "tenant", Subject: "a", Unit: UnitTokens, Limit: 1, Window: WindowDay, RollingMs: 5},
	}}
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"term_ms", "retry_ms", "holders_max", "budgets[0].id", "budgets[0].level", "budgets[0].subject",
		"budgets[0].unit", "budgets[0].limit", "budgets[0].window", "budgets[1].rolling_ms", "budgets[2].id", "budgets[2]: rolling_ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
	if n := len(strings.Split(err.Error(), "\n")); n < 12 {
		t.Errorf("%d problems listed, want ≥ 12", n)
	}
}

// TestHolderAsksAhead: a holder that has spent more of its lease than is
// left asks for the next term before anything waits (Want with nothing
// queued), with its term's charge scaled to a whole term as demand, once
// while the ask is in flight, and is granted enough to hold a term of
// traffic again; a holder that has spent less does not ask.
func TestHolderAsksAhead(t *testing.T) {
	cfg := Config{Budgets: []Budget{{ID: "dep", Level: "deployment", Subject: "d", Unit: UnitRequests, Limit: 1_000_000, Window: WindowDay}}}
	h, err := NewHolder("hot#0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPartition(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// deliver applies the holder's messages at the budget partition and
	// its answers at the holder.
	deliver := func(now int64, msgs []Msg) {
		t.Helper()
		for _, m := range msgs {
			if m.Requested == nil {
				t.Fatalf("unexpected message %+v", m)
			}
			for _, o := range p.Apply(now, &schemas.Event{Type: schemas.TypeLeaseRequested, LeaseRequested: m.Requested}, nil) {
				g := o.Grant
				if out := h.Apply(now, &g, nil); len(out) != 0 {
					t.Fatalf("the grant caused %+v", out)
				}
			}
		}
	}
	first := h.Want(t0, "dep", 100, 1, nil) // a first lease of 100
	deliver(t0, first)
	h.Want(t0, "dep", 0, 0, nil)
	steps := []struct {
		atMs, charge int64
		wantDemand   int64 // 0: no ask
	}{
		{500, 40, 0},    // 60 left ≥ 40 charged: no ask
		{1000, 20, 120}, // 40 left < 60 charged in 1 s: a term (2 s) at that rate
		{1100, 10, 0},   // in flight: no second ask
	}
	var inFlight []Msg
	for i, st := range steps {
		now := t0 + st.atMs
		if v, _ := h.Check(now, "dep", st.charge, nil); v != Fits {
			t.Fatalf("step %d: check %v, want fits", i, v)
		}
		h.Charge("dep", st.charge)
		out := h.Want(now, "dep", 0, 0, nil)
		switch {
		case st.wantDemand == 0 && len(out) != 0:
			t.Errorf("step %d: asked %+v, want no ask", i, out)
		case st.wantDemand != 0 && (len(out) != 1 || out[0].Requested == nil || out[0].Requested.Demand != st.wantDemand):
			t.Errorf("step %d: sent %+v, want one LeaseRequested with demand %d", i, out, st.wantDemand)
		}
		inFlight = append(inFlight, out...)
	}
	deliver(t0+1200, inFlight)
	l, _ := h.Lease("dep")
	if free := l.Granted - l.Returned - l.Used; l.Used != 70 || free != 110 {
		t.Errorf("after the answer: used %d, free %d; want 70 and 110 (120 demanded on 60 used, then 10 more spent)", l.Used, free)
	}
}
