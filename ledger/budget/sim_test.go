package budget

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

var (
	simSeed  = flag.Uint64("budget.seed", 0, "run the budget simulation with this seed only")
	simSeeds = flag.Int("budget.seeds", 40, "how many seeds TestSimulation runs")
)

// faults are the lease faults the simulation injects, per message or per
// step, in permille.
type faults struct {
	drop, dup, delayMs int // lost, duplicated, extra delivery delay up to delayMs
	crash              int // per step: the budget partition or a holder restarts from a snapshot and replays
}

// req is one request of the workload, waiting in its scope's queue.
type req struct {
	id     int
	cost   int64
	arrMs  int64
	holdMs int64 // how long it is held once granted
	actual int64 // what it reconciles to (≤ cost)
}

type held struct {
	r        req
	windowMs int64
	doneMs   int64
}

// pending is a message on its way to a log.
type pending struct {
	atMs int64
	to   string // "" budget partition, else the holder
	ev   *schemas.Event
	n    int // tie-break, for a stable order
}

// scope is one scope partition of the simulation: its holder, its queue
// and its input log (for replay after a crash).
type scope struct {
	name   string
	h      *Holder
	queue  []req
	holds  []held
	snap   []byte
	log    []func(*Holder) []Msg // inputs since snap, to replay
	admit  int
	denied int
	expire int
}

// do applies one input to s's holder and logs it for replay.
func (s *scope) do(op func(*Holder) []Msg) []Msg {
	s.log = append(s.log, op)
	return op(s.h)
}

// world is the simulation: one budget partition, its scopes, the network
// between them and the auditor's counters.
type world struct {
	t      *testing.T
	seed   uint64
	rng    *rand.Rand
	cfg    Config
	f      faults
	nowMs  int64
	p      *Partition
	pSnap  []byte
	pLog   []*schemas.Event // inputs since pSnap (nil: tick)
	pLogAt []int64
	scopes []*scope
	net    []pending
	n      int
	// spent is what is truly charged and not given back, by the scopes
	// themselves: the figure the budget bounds.
	spent    int64
	spentMax int64
	// byWindow is spent per window (or rolling slot) it was charged in.
	byWindow map[int64]int64
}

func newWorld(t *testing.T, seed uint64, cfg Config, names []string, f faults) *world {
	t.Helper()
	w := &world{byWindow: map[int64]int64{}, t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), cfg: cfg, f: f}
	var err error
	if w.p, err = NewPartition(cfg); err != nil {
		t.Fatal(err)
	}
	w.pSnap, _ = w.p.MarshalSnapshot()
	for _, n := range names {
		h, err := NewHolder(n, cfg)
		if err != nil {
			t.Fatal(err)
		}
		snap, _ := h.MarshalSnapshot()
		w.scopes = append(w.scopes, &scope{name: n, h: h, snap: snap})
	}
	return w
}

func (w *world) fail(format string, a ...any) {
	w.t.Helper()
	w.t.Fatalf("seed %d at %d ms: %s (reproduce: go test ./ledger/budget -run %s -budget.seed=%d)",
		w.seed, w.nowMs, fmt.Sprintf(format, a...), w.t.Name(), w.seed)
}

// post puts a message on the network, subject to the faults.
func (w *world) post(to string, ev *schemas.Event) {
	if w.rng.IntN(1000) < w.f.drop {
		return
	}
	copies := 1
	if w.rng.IntN(1000) < w.f.dup {
		copies = 2
	}
	for range copies {
		d := int64(1 + w.rng.IntN(3))
		if w.f.delayMs > 0 {
			d += int64(w.rng.IntN(w.f.delayMs))
		}
		w.n++
		w.net = append(w.net, pending{atMs: w.nowMs + d, to: to, ev: ev, n: w.n})
	}
}

func (w *world) postMsgs(msgs []Msg) {
	for _, m := range msgs {
		ev := &schemas.Event{V: 1, ID: "x"}
		if m.Requested != nil {
			ev.Type, ev.LeaseRequested = schemas.TypeLeaseRequested, m.Requested
		} else {
			ev.Type, ev.LeaseReturned = schemas.TypeLeaseReturned, m.Returned
		}
		w.post("", ev)
	}
}

func (w *world) postGrants(outs []Output) {
	for i := range outs {
		g := outs[i].Grant
		w.post(g.Holder, &schemas.Event{V: 1, ID: "x", Type: schemas.TypeLeaseGranted, LeaseGranted: &g})
	}
}

func (w *world) scope(name string) *scope {
	for _, s := range w.scopes {
		if s.name == name {
			return s
		}
	}
	return nil
}

// deliver applies every message due by now, in time order.
func (w *world) deliver() {
	sort.SliceStable(w.net, func(i, j int) bool {
		if w.net[i].atMs != w.net[j].atMs {
			return w.net[i].atMs < w.net[j].atMs
		}
		return w.net[i].n < w.net[j].n
	})
	k := 0
	for k < len(w.net) && w.net[k].atMs <= w.nowMs {
		m := w.net[k]
		k++
		if m.to == "" {
			w.pLog, w.pLogAt = append(w.pLog, m.ev), append(w.pLogAt, w.nowMs)
			w.postGrants(w.p.Apply(w.nowMs, m.ev, nil))
			continue
		}
		s := w.scope(m.to)
		now, g := w.nowMs, m.ev.LeaseGranted
		w.postMsgs(s.do(func(h *Holder) []Msg { return h.Apply(now, g, nil) }))
		w.pump(s)
	}
	w.net = w.net[k:]
}

// pump admits what the lease covers from the head of s's queue, denies
// what the budget cannot cover, expires what waited too long, and states
// the rest as demand.
func (w *world) pump(s *scope) {
	const id = "acme-daily"
	var msgs []Msg
	now := w.nowMs
	for len(s.queue) > 0 {
		r := s.queue[0]
		if w.nowMs-r.arrMs > 5000 {
			s.expire++
			s.queue = s.queue[1:]
			continue
		}
		var v Verdict
		msgs = append(msgs, s.do(func(h *Holder) []Msg {
			var out []Msg
			v, out = h.Check(now, id, r.cost, nil)
			return out
		})...)
		if v == Wait {
			break
		}
		s.queue = s.queue[1:]
		if v == Exhausted {
			s.denied++
			continue
		}
		var win int64
		s.do(func(h *Holder) []Msg { win = h.Charge(id, r.cost); return nil })
		s.admit++
		w.byWindow[win] += r.cost
		w.spent += r.cost
		w.spentMax = max(w.spentMax, w.spent)
		s.holds = append(s.holds, held{r: r, windowMs: win, doneMs: w.nowMs + r.holdMs})
	}
	var sum, need int64
	for _, r := range s.queue {
		sum += r.cost
		if need == 0 || r.cost < need {
			need = r.cost
		}
	}
	msgs = append(msgs, s.do(func(h *Holder) []Msg { return h.Want(now, id, sum, need, nil) })...)
	w.postMsgs(msgs)
}

// settle reconciles the holds that are done (actual ≤ reservation).
func (w *world) settle(s *scope) {
	keep := s.holds[:0]
	for _, hd := range s.holds {
		if hd.doneMs > w.nowMs {
			keep = append(keep, hd)
			continue
		}
		win, d := hd.windowMs, hd.r.actual-hd.r.cost
		s.do(func(h *Holder) []Msg { h.Adjust("acme-daily", win, d); return nil })
		w.spent += hd.r.actual - hd.r.cost
		w.byWindow[win] += d
	}
	s.holds = keep
}

// crash restarts the budget partition or one scope's holder from its last
// snapshot and replays its log since then: outputs are produced again
// (duplicates the others must absorb), and the state must come out the
// same as before the crash.
func (w *world) crash() {
	i := w.rng.IntN(len(w.scopes) + 1)
	if i == len(w.scopes) {
		before, _ := w.p.MarshalSnapshot()
		p, err := RestorePartition(w.cfg, w.pSnap)
		if err != nil {
			w.fail("restore partition: %v", err)
		}
		for j, ev := range w.pLog {
			out := p.Apply(w.pLogAt[j], ev, nil)
			if w.rng.IntN(4) == 0 {
				w.postGrants(out) // some of the replayed outputs go out again
			}
		}
		after, _ := p.MarshalSnapshot()
		if string(before) != string(after) {
			w.fail("budget partition replay diverged:\n before %s\n after  %s", before, after)
		}
		w.p = p
		w.pSnap, w.pLog, w.pLogAt = after, nil, nil
		return
	}
	s := w.scopes[i]
	before, _ := s.h.MarshalSnapshot()
	h, err := RestoreHolder(w.cfg, s.snap)
	if err != nil {
		w.fail("restore holder: %v", err)
	}
	var msgs []Msg
	for _, op := range s.log {
		msgs = append(msgs, op(h)...)
	}
	after, _ := h.MarshalSnapshot()
	if string(before) != string(after) {
		w.fail("holder %s replay diverged:\n before %s\n after  %s", s.name, before, after)
	}
	if w.rng.IntN(4) == 0 {
		w.postMsgs(msgs) // the new owner sends its lease messages again
	}
	s.h, s.snap, s.log = h, after, nil
}

// audit checks the conservation rules after a step.
func (w *world) audit() {
	out, limit, _ := w.p.Outstanding("acme-daily")
	if out > limit {
		w.fail("budget partition outstanding %d > limit %d", out, limit)
	}
	b := w.p.st.Budgets[0]
	for start, spent := range w.byWindow {
		// Every window (or, rolling, every RollingMs of slots) within its limit.
		sum := spent
		if b.B.Window == WindowRolling {
			for s2, sp2 := range w.byWindow {
				if s2 < start && s2 > start-b.B.RollingMs {
					sum += sp2
				}
			}
		}
		if sum > limit {
			w.fail("spent %d in the window of %d > limit %d (overspend)", sum, start, limit)
		}
	}
	var total int64
	for _, s := range w.scopes {
		l, _ := s.h.Lease("acme-daily")
		if l.Used > l.Granted-l.Returned {
			w.fail("%s used %d beyond its lease %d−%d", s.name, l.Used, l.Granted, l.Returned)
		}
		var pg int64
		if l.WindowStartMs == b.Cur.StartMs {
			if ph := w.p.holder(&b.Cur, s.name, false); ph != nil {
				pg = ph.Granted
				if ph.Returned > l.Returned {
					w.fail("%s: partition counts %d returned, holder only %d", s.name, ph.Returned, l.Returned)
				}
			}
			if l.Granted > pg {
				w.fail("%s holds a grant of %d, the partition granted %d (granted twice?)", s.name, l.Granted, pg)
			}
			total += max(pg-l.Returned, l.Used)
		}
	}
	if total+(limit-b.pool()) > limit {
		w.fail("true outstanding %d + earlier %d > limit %d", total, limit-b.pool(), limit)
	}
}

// run drives the world for durMs: every scope gets arrivals at its rate
// (requests a second, a function of time: the workload's demand shift),
// then messages, settlements, ticks, crashes and the audit.
func (w *world) run(durMs int64, rate func(scope int, nowMs int64) float64, cost func(r *rand.Rand) (int64, int64)) {
	id := 0
	for end := w.nowMs + durMs; w.nowMs < end; {
		w.nowMs += int64(1 + w.rng.IntN(20))
		for i, s := range w.scopes {
			lam := rate(i, w.nowMs) * 20 / 1000 / 2 // expected arrivals in this step (mean step 10 ms)
			for n := 0; n < 4 && w.rng.Float64() < lam-float64(n); n++ {
				id++
				c, a := cost(w.rng)
				s.queue = append(s.queue, req{id: id, cost: c, actual: a, arrMs: w.nowMs, holdMs: int64(50 + w.rng.IntN(500))})
			}
		}
		w.deliver()
		for _, s := range w.scopes {
			w.settle(s)
			now := w.nowMs
			w.postMsgs(s.do(func(h *Holder) []Msg { return h.Tick(now, nil) }))
			w.pump(s)
		}
		w.pLog, w.pLogAt = append(w.pLog, nil), append(w.pLogAt, w.nowMs)
		w.postGrants(w.p.Apply(w.nowMs, nil, nil))
		if w.rng.IntN(1000) < w.f.crash {
			w.crash()
		}
		w.audit()
	}
}

func simConfig(limit int64, unit Unit) Config {
	return Config{Budgets: []Budget{{ID: "acme-daily", Level: "tenant", Subject: "acme", Unit: unit, Limit: limit, Window: WindowDay}}}
}

// t0 is 2025-12-01 10:00 UTC: the simulations stay inside one day.
const t0 = int64(1764583200000)

// TestSimulation runs seeded workloads with lease faults (lost,
// duplicated and late messages, restarts from snapshots with replay)
// against the auditor: nothing is ever spent beyond the budget, and no
// lease is granted twice. A failure names the seed that reproduces it.
func TestSimulation(t *testing.T) {
	seeds := make([]uint64, 0, *simSeeds)
	if *simSeed != 0 {
		seeds = append(seeds, *simSeed)
	} else {
		for i := range *simSeeds {
			seeds = append(seeds, uint64(1000+i))
		}
	}
	for _, seed := range seeds {
		f := faults{drop: int(seed % 7 * 20), dup: int(seed % 5 * 30), delayMs: int(seed % 3 * 40), crash: int(seed % 4 * 3)}
		unit := []Unit{UnitRequests, UnitSpendMicros, UnitTokens}[seed%3]
		w := newWorld(t, seed, simConfig(3000, unit), []string{"anthropic:acme", "azure:acme", "openai:acme"}, f)
		w.nowMs = t0
		// 3× the budget's rate: the budget would last 20 s; 60 s of
		// traffic, shifting from the first scope to the second halfway.
		rate := func(i int, now int64) float64 {
			shifted := now-t0 > 30_000
			switch {
			case i == 0 && !shifted, i == 1 && shifted:
				return 100
			case i == 2:
				return 50
			}
			return 0
		}
		cost := func(r *rand.Rand) (int64, int64) {
			if unit == UnitRequests {
				return 1, 1
			}
			c := int64(1 + r.IntN(6))
			return c, max(0, c-int64(r.IntN(3)))
		}
		w.run(60_000, rate, cost)
		w.run(10_000, func(int, int64) float64 { return 0 }, cost) // drain
		if w.spent > 3000 {
			w.fail("spent %d > 3000", w.spent)
		}
		t.Logf("seed %d %s faults %+v: spent %d of 3000 (max %d), %+v", seed, unit, f, w.spent, w.spentMax, w.p.Stats())
	}
}
