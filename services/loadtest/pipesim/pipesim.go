// Package pipesim is the seeded simulation of the whole pipeline, modelled
// on TigerBeetle's VOPR: the gateways' own request shell
// (services/gateway/shell, driving admission/lifecycle) and ledger
// partitions (ledger/) run in one process over a simulated bus that
// injects faults, against a provider model, while an auditor checks
// the pipeline's promises after every step and at the end. One seed
// reproduces a run exactly: time is virtual, every random choice comes from
// the seed, and nothing iterates a map where order matters.
//
// The bus keeps order per partition and per producer, and injects delay,
// reordering across partitions, duplicated, late and lost decisions,
// failed produces, partition stalls (a broker or ledger pause: the backlog
// is decided at once), ledger crashes and rebalances (the new owner
// restores the last snapshot and re-applies the tail, re-producing those
// decisions: aborted rounds). The ledger commits every commitIntervalMs, as
// the service does, and gateways act on a decision as soon as it is
// produced, before that commit (each gateway reads its one decisions
// partition in order and drops copies with admission/reserve's Dedup). So a
// crash between produce and commit makes the next owner, restarted from the
// committed snapshot and offset, produce again decisions gateways already
// acted on; a zombie ledger goes on deciding (never committing) while the
// next owner takes over; and a new owner of another version re-derives the
// aborted round differently. The auditor checks that what each gateway
// acted on is what the committed log holds, except for a re-derivation by
// another version, whose usage on grants the committed log does not have
// must be charged as debt (ledger.Stats.UngrantedUsage). The provider model holds wall-clock token
// buckets and answers 429 when they are empty, injects 429s and 503s with
// Retry-After, streams, and cuts streams. Clients cancel, disconnect
// mid-stream and time out.
package pipesim

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"sort"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/lifecycle"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/ledger/budget"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/gateway/shell"
)

// Options sizes a run. The zero value takes the defaults.
type Options struct {
	Requests int // client requests (default 300)
	Gateways int // gateway nodes (default 3)
	// ForgeEvery > 0 forges every ForgeEvery-th request of tenant t2: it
	// asks for priority 100, above t2's entitlement, as an event no
	// gateway checked would; the ledger must refuse it (Stats.Forged).
	ForgeEvery int
	// Budget > 0 gives tenant t1 one budget of Budget requests over both
	// scopes (ledger/budget): partition 0 is its budget partition, the
	// lease messages travel the simulated bus in the partitions'
	// transactions (delayed, aborted with a crash and re-derived by the
	// new owner, stalled with their partition), and the auditor checks
	// conservation after every pump (Stats.Budget*).
	Budget int64
}

// Result is what a run saw; Problems is empty when the auditor found
// nothing.
type Result struct {
	Seed     uint64
	Problems []string
	Stats    Stats
}

// Stats counts what happened, to show a run exercised what it claims.
type Stats struct {
	Requests, Answers, Streams, Dispatches          int
	ProviderInjected, ProviderOrganic429            int
	Crashes, Stalls, LostDecisions, DupDecisions    int
	LateDecisions, FailedProduces, Retries, Records int
	Cancels, Success                                int
	// Expired counts the requests whose context reached its deadline
	// before they ended (a Wait told so, or the upstream call cut).
	Expired int
	// DeadlineChecked counts the grants of attempts with a deadline that
	// the auditor checked against their expected service time
	// (checkDeadline).
	DeadlineChecked int
	// Zombies and VersionChanges count crashes whose old owner went on
	// deciding until fenced, and whose new owner was of another version;
	// Aborted counts decisions produced but never committed (acted on by
	// gateways all the same); Copies the copies gateways dropped;
	// Ungranted the usage charged on grants the committed log lacks;
	// Shadowed the grants a gateway's Dedup dropped behind another
	// version's decision at the same position.
	Zombies, VersionChanges, Aborted, Copies, Ungranted, Shadowed int
	// Forged counts requests of tenant t2 that asked for a priority
	// beyond its entitlement (Options.ForgeEvery); ForgedRefused those the
	// ledger refused priority_not_entitled.
	Forged, ForgedRefused int
	// BudgetLeaseMsgs counts the lease messages committed; BudgetGranted
	// the requests of t1 charged to its budget at the end of the run
	// (Options.Budget), BudgetDenied those denied budget_exhausted.
	BudgetLeaseMsgs, BudgetGranted, BudgetDenied int
	// Rides counts the reconciles sent ahead of the next event of their
	// node and scope, Alone those sent when their linger ran out
	// (admission/reserve's coalescing).
	Rides, Alone int
	// LateGrants counts the grants the gateways' shells judged too late
	// to dispatch (given back, and reserved again or refused).
	LateGrants int
}

// Limits of the simulated world. Sluice's scope bucket is at or below the
// provider's: the same rate, and a provider burst that covers Sluice's
// burst plus what the late-grant bound and the network can bunch together
// (rate × (lateGrantBoundMs + netMaxMs) + 1). So every provider 429 that
// is not injected is a bug.
const (
	scopes           = 2
	ratePerSec       = 10   // requests per second, Sluice and provider
	sluiceWindowMs   = 1000 // Sluice's enforcement window: burst 10
	lateGrantBoundMs = 300
	netMaxMs         = 20
	providerBurst    = ratePerSec*sluiceWindowMs/1000 + ratePerSec*(lateGrantBoundMs+netMaxMs)/1000 + 1
	answerTimeoutMs  = 2000
	holdTTLMs        = 30_000
	snapshotEvery    = 25 // records between snapshots
	commitIntervalMs = 100
	clientTimeoutMs  = 60_000
)

// Run simulates one seed.
func Run(seed uint64, o Options) Result {
	if o.Requests == 0 {
		o.Requests = 300
	}
	if o.Gateways == 0 {
		o.Gateways = 3
	}
	s := &sim{rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), opts: o, reqs: map[string]*request{},
		lost: map[resKey]bool{}, delivered: map[resKey]bool{}, dedup: map[string]*reserve.Dedup{},
		nodeAt: map[string]int64{}, acted: map[actedKey][]byte{}, reconciled: map[resKey]bool{}, shadowed: map[resKey]bool{}, riding: map[string][]*schemas.Event{}}
	s.res.Seed = seed
	s.setup()
	s.loop()
	s.final()
	s.res.Stats.Requests = len(s.order)
	return s.res
}

type sim struct {
	rng  *rand.Rand
	opts Options
	now  int64
	seq  int64
	q    queue
	res  Result

	parts  []*partition
	prov   []*bucket
	nodes  []string
	reqs   map[string]*request
	order  []*request // in arrival order
	nextID int64

	// lost and delivered: grants whose decision the bus dropped, and
	// grants delivered at least once. shadowed: grants the gateway's
	// Dedup dropped as copies though it never acted on them, because a
	// ledger of another version (an old-version zombie, or the round's
	// first derivation) had put a different decision at that position.
	lost, delivered, shadowed map[resKey]bool

	// lastAppend keeps each producer's order per partition.
	lastAppend map[string]int64

	// Each gateway reads its decisions partition in order (nodeAt is the
	// time of its last delivery) through its own Dedup; acted holds what
	// it acted on, by node and decision; reconciled the attempts whose
	// usage a gateway reported.
	dedup      map[string]*reserve.Dedup
	nodeAt     map[string]int64
	acted      map[actedKey][]byte
	actedOrder []actedKey
	reconciled map[resKey]bool
	// riding holds each node's reconciles waiting for a ride, by node and
	// scope (hold).
	riding map[string][]*schemas.Event
}

type actedKey struct {
	node string
	part int32
	key  [2]int64
}

func (s *sim) problem(format string, args ...any) {
	if len(s.res.Problems) < 20 {
		s.res.Problems = append(s.res.Problems, fmt.Sprintf("t=%d: ", s.now)+fmt.Sprintf(format, args...))
	}
}

// ---- the event queue (virtual time) ----

type item struct {
	at, seq int64
	fn      func()
}
type queue []item

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(item)) }
func (q *queue) Pop() any     { o := *q; it := o[len(o)-1]; *q = o[:len(o)-1]; return it }
func (s *sim) at(t int64, fn func()) {
	s.seq++
	heap.Push(&s.q, item{at: max(t, s.now), seq: s.seq, fn: fn})
}

func (s *sim) loop() {
	for s.q.Len() > 0 {
		it := heap.Pop(&s.q).(item)
		s.now = it.at
		it.fn()
		if s.now > 3_600_000 {
			s.problem("the run did not settle within an hour of virtual time")
			return
		}
	}
}

// ---- setup ----

func (s *sim) setup() {
	cfg := ledger.Config{HoldTTLMs: holdTTLMs, StreamHoldTTLMs: holdTTLMs, DedupTTLMs: 2 * holdTTLMs}
	for i := range scopes {
		cfg.Scopes = append(cfg.Scopes, ledger.ScopeConfig{Name: scopeName(i), Buckets: []ledger.BucketConfig{
			{Level: ledger.LevelScope, ID: "*", Dimension: schemas.DimRequests, Capacity: ratePerSec * 60, PeriodMs: 60_000, WindowMs: sluiceWindowMs},
			{Level: ledger.LevelKey, ID: "*", Dimension: schemas.DimConcurrency, Capacity: 4},
			{Level: ledger.LevelTenant, ID: "*", Dimension: schemas.DimTotalTokens, Capacity: 600_000, PeriodMs: 60_000, WindowMs: 10_000},
		}})
	}
	// Tenant t2 may use every class at priority ≤ 0 (ledger entitle.go):
	// its requests keep to that, as a gateway's would, so every one of
	// them, and every retry, is checked and must pass; only the forged
	// ones (Options.ForgeEvery) must be refused.
	zero := int32(0)
	cfg.Entitlements = []ledger.EntitlementConfig{{Tenant: "t2", AllowedClasses: []string{"interactive", "agent", "batch"}, MaxPriority: &zero},
		{Tenant: "t2", Key: "k1", AllowedProfiles: []string{"p"}}} // every target's profile, fallbacks too
	if s.opts.Budget > 0 {
		cfg.Budget = &budget.Config{Budgets: []budget.Budget{{ID: budgetID, Level: "tenant", Subject: "t1",
			Unit: budget.UnitRequests, Limit: s.opts.Budget, Window: budget.WindowDay}}}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		panic(err)
	}
	if cfg, err = ledger.ParseConfig(b); err != nil {
		panic(fmt.Sprintf("pipesim: ledger config: %v", err))
	}
	if b, err = json.Marshal(cfg); err != nil {
		panic(err)
	}
	s.lastAppend = map[string]int64{}
	s.now = 1_000_000
	for i := range scopes {
		p := &partition{s: s, id: int32(i), scope: scopeName(i), led: ledger.New(int32(i), ledger.Config{}), first: map[[2]int64][]byte{},
			committed: map[[2]int64][]byte{}, v2: map[int64]bool{}, mixed: map[int64]bool{}}
		s.parts = append(s.parts, p)
		s.prov = append(s.prov, &bucket{tokens: providerBurst, atMs: s.now})
		p.append("setup", &schemas.Event{V: schemas.Version, Type: schemas.TypeConfigChanged, ID: s.id(),
			ConfigChanged: &schemas.ConfigChanged{ConfigVersion: "sim", Ledger: b}}, s.now)
	}
	for i := range s.opts.Gateways {
		s.nodes = append(s.nodes, fmt.Sprintf("gw%d", i))
	}
	// Arrivals: bursts and lulls, faster than the limit at times.
	t := s.now + 10
	for i := range s.opts.Requests {
		if s.rng.IntN(10) == 0 {
			t += int64(s.rng.IntN(3000))
		} else {
			t += int64(s.rng.IntN(120))
		}
		at := t
		id := fmt.Sprintf("r%d", i)
		s.at(at, func() { s.arrive(id) })
	}
	// Faults at random times over the run.
	end := t + 5000
	for range s.rng.IntN(4) {
		p, when := s.rng.IntN(scopes), s.now+int64(s.rng.Int64N(end-s.now))
		zombie, upgrade := s.chance(400), s.chance(300)
		s.at(when, func() { s.parts[p].crash(zombie, upgrade) })
	}
	for range s.rng.IntN(3) {
		p, when, d := s.rng.IntN(scopes), s.now+int64(s.rng.Int64N(end-s.now)), int64(500+s.rng.IntN(4000))
		s.at(when, func() { s.parts[p].stall(d) })
	}
}

func scopeName(i int) string { return fmt.Sprintf("s%d", i) }

// budgetID is tenant t1's budget (Options.Budget); its records are keyed
// into partition 0, its budget partition.
const budgetID = "t1-budget"

// leasePart is the partition a lease message keyed key lands in.
func (s *sim) leasePart(key string) *partition {
	if key == budgetID {
		return s.parts[0]
	}
	return s.partOf(key)
}

func (s *sim) id() string {
	s.nextID++
	return fmt.Sprintf("e%d", s.nextID)
}

// chance reports true with probability permille/1000.
func (s *sim) chance(permille int) bool { return s.rng.IntN(1000) < permille }

// ---- the bus: gateway → partition ----

// send appends ev to its scope's partition after a network delay, keeping
// the order of this producer's events per partition. It returns false for
// a produce that fails (produce only). As admission/reserve does
// (coalesce.go), the node's reconciles waiting in ev's scope are sent
// first, in the same produce: ahead of ev, whatever becomes of ev.
func (s *sim) send(node string, ev *schemas.Event, mayFail bool) bool {
	s.flushRides(node, ev.Scope, true)
	if mayFail && s.chance(10) {
		s.res.Stats.FailedProduces++
		return false
	}
	s.transmit(node, ev)
	return true
}

// reconcileLingerMs is admission/reserve's default ReconcileLinger.
const reconcileLingerMs = 5

// hold keeps a Reconciled (or ProviderObserved) until the node's next event of its scope carries
// it, or reconcileLingerMs, whichever comes first (coalesce.go).
func (s *sim) hold(node string, ev *schemas.Event) {
	key := node + "\x00" + ev.Scope
	if len(s.riding[key]) == 0 {
		scope := ev.Scope
		s.at(s.now+reconcileLingerMs, func() { s.flushRides(node, scope, false) })
	}
	s.riding[key] = append(s.riding[key], ev)
}

// flushRides sends the node's waiting reconciles of scope, in order:
// ahead of another event (ride) or when the linger ran out.
func (s *sim) flushRides(node, scope string, ride bool) {
	key := node + "\x00" + scope
	rs := s.riding[key]
	if len(rs) == 0 {
		return
	}
	delete(s.riding, key)
	if ride {
		s.res.Stats.Rides += len(rs)
	} else {
		s.res.Stats.Alone += len(rs)
	}
	for _, ev := range rs {
		s.transmit(node, ev)
	}
}

// transmit puts ev on the bus (send without the fault).
func (s *sim) transmit(node string, ev *schemas.Event) {
	ev.ID = s.id()
	b, err := schemas.Encode(ev)
	var back schemas.Event
	if err == nil {
		err = schemas.Decode(b, &back)
	}
	if err != nil {
		// The real producer cannot send it either: the ledger never sees it.
		s.problem("%s produced an invalid %s for %s/%d: %v", node, ev.Type, ev.RequestID, ev.Attempt, err)
		return
	}
	p := s.partOf(ev.Scope)
	key := node + "\x00" + ev.Scope
	at := max(s.now+1+int64(s.rng.IntN(netMaxMs/2)), s.lastAppend[key])
	s.lastAppend[key] = at
	s.at(at, func() { p.append(node, &back, s.now) })
}

func (s *sim) partOf(scope string) *partition {
	for _, p := range s.parts {
		if p.scope == scope {
			return p
		}
	}
	panic("pipesim: unknown scope " + scope)
}

// ---- ledger partitions ----

type record struct {
	at int64
	ev *schemas.Event
}

type partition struct {
	s     *sim
	id    int32
	scope string
	log   []record
	led   *ledger.Ledger
	out   []ledger.Output

	snap         []byte
	stalledUntil int64
	pumpAt       int64 // a pump is scheduled at this time (0: none)
	tickAt       int64 // a Tick is scheduled at this time (0: none)
	// first holds the first encoding of every decision, by (input
	// offset, index): a re-derived one must be byte-identical.
	first map[[2]int64][]byte

	// The transaction: decisions produced since the last commit
	// (pending), the committed ones, and the committed offset and
	// snapshot a new owner starts from. epoch invalidates a commit
	// scheduled before a crash.
	pending       []decRec
	pendingLease  []*schemas.Event // lease messages of the open transaction
	committed     map[[2]int64][]byte
	committedOff  int64
	committedSnap []byte
	commitAt      int64
	epoch         int
	// zombie is the previous owner still deciding (never committing)
	// until zombieUntil, when it is fenced.
	zombie      *ledger.Ledger
	zombieUntil int64
	// v2 marks inputs re-derived by a ledger of another version: the
	// aborted round of a crash whose new owner was upgraded.
	v2 map[int64]bool
	// zombieOld: the zombie is of the old version while the new owner
	// is upgraded, so from the aborted round on their states differ and
	// the zombie's later decisions may differ from the owner's too;
	// mixed marks the inputs such a zombie decided.
	zombieOld bool
	mixed     map[int64]bool
}

type decRec struct {
	key [2]int64
	b   []byte
}

func (p *partition) append(_ string, ev *schemas.Event, at int64) {
	p.log = append(p.log, record{at: at, ev: ev})
	p.s.res.Stats.Records++
	p.schedulePump(at + 1 + int64(p.s.rng.IntN(4)))
	if p.zombie != nil {
		p.s.at(at+1+int64(p.s.rng.IntN(4)), p.pumpZombie)
	}
}

// pumpZombie lets a fenced-to-be previous owner decide what it fetched:
// gateways see its decisions (read_uncommitted) though they never commit.
func (p *partition) pumpZombie() {
	z := p.zombie
	if z == nil {
		return
	}
	if p.s.now >= p.zombieUntil {
		p.zombie = nil // fenced
		return
	}
	var out []ledger.Output
	for off := z.Offset(); off < int64(len(p.log)); off = z.Offset() {
		// The zombie reads the log as its own version does: an
		// old-version zombie the raw records, one that was itself an
		// upgraded owner the upgraded reading of the rounds it
		// re-derives (a later crash displaced it, perhaps before it decided).
		r, in := p.log[off], p.input(off)
		if p.zombieOld {
			in = r.ev
		}
		out = z.Apply(r.at, off, in, out[:0])
		if p.zombieOld {
			p.mixed[off] = true
		}
		for i := range out {
			p.decided(&out[i], false)
		}
	}
}

// input is the record at off as the owner's version sees it. A ledger of
// another version (v2) decides the aborted round differently; modelled
// here as reading every reservation of that round as far larger than any
// bucket, so it denies what the old version granted.
func (p *partition) input(off int64) *schemas.Event {
	ev := p.log[off].ev
	if !p.v2[off] || ev.ReserveRequested == nil {
		return ev
	}
	cp := *ev
	rr := *ev.ReserveRequested
	rr.InputTokens *= 1000
	cp.ReserveRequested = &rr
	return &cp
}

// scheduleCommit ends the owner's transaction commitIntervalMs after its
// first produced decision, as the service does.
func (p *partition) scheduleCommit() {
	if p.commitAt != 0 || len(p.pending) == 0 && len(p.pendingLease) == 0 {
		return
	}
	p.commitAt = p.s.now + commitIntervalMs
	epoch := p.epoch
	p.s.at(p.commitAt, func() {
		if p.epoch != epoch {
			return // the owner crashed: the transaction aborted
		}
		p.commitAt = 0
		if p.s.now < p.stalledUntil {
			p.stalledUntil = max(p.stalledUntil, p.s.now)
			p.scheduleCommit()
			return
		}
		for _, d := range p.pending {
			p.committed[d.key] = d.b
		}
		p.pending = p.pending[:0]
		// Lease messages become visible to the partitions that read them
		// (read_committed) when their transaction commits, in order.
		for _, ev := range p.pendingLease {
			p.s.res.Stats.BudgetLeaseMsgs++
			to := p.s.leasePart(leaseKey(ev))
			key := "ledger" + fmt.Sprint(p.id) + "\x00" + to.scope
			at := max(p.s.now+1+int64(p.s.rng.IntN(netMaxMs/2)), p.s.lastAppend[key])
			p.s.lastAppend[key] = at
			p.s.at(at, func() { to.append("ledger", ev, p.s.now) })
		}
		p.pendingLease = p.pendingLease[:0]
		p.committedOff, p.committedSnap = p.led.Offset(), p.snap
	})
}

func (p *partition) schedulePump(t int64) {
	t = max(t, p.stalledUntil)
	if p.pumpAt != 0 && p.pumpAt <= t {
		return
	}
	p.pumpAt = t
	p.s.at(t, func() {
		if p.pumpAt != t {
			return // superseded
		}
		p.pumpAt = 0
		p.pump()
	})
}

// pump applies every record not applied yet, as the ledger's partition
// goroutine does, and delivers the decisions.
func (p *partition) pump() {
	if p.s.now < p.stalledUntil {
		p.schedulePump(p.stalledUntil)
		return
	}
	for off := p.led.Offset(); off < int64(len(p.log)); off = p.led.Offset() {
		r := p.log[off]
		p.out = p.led.Apply(r.at, off, p.input(off), p.out[:0])
		for i := range p.out {
			p.checkDeadline(&p.out[i])
			p.decided(&p.out[i], true)
		}
		for _, lo := range p.led.LeaseOutputs() {
			p.pendingLease = append(p.pendingLease, lo.Event(p.id, off, r.at))
		}
		if (off+1)%snapshotEvery == 0 {
			b, err := p.led.MarshalSnapshot()
			if err != nil {
				p.s.problem("partition %d: snapshot: %v", p.id, err)
			}
			p.snap = b
		}
	}
	p.checkConservation()
	p.s.checkBudget()
	p.scheduleCommit()
	if ms, ok := p.led.NextWakeMs(); ok && (p.tickAt == 0 || ms < p.tickAt) {
		p.tickAt = max(ms, p.s.now+1)
		at := p.tickAt
		p.s.at(at, func() {
			if p.tickAt != at {
				return
			}
			p.tickAt = 0
			p.append("ledger", &schemas.Event{V: schemas.Version, Type: schemas.TypeTick, ID: p.s.id(), Tick: &schemas.Tick{Reason: "wake"}}, p.s.now)
		})
	}
}

// checkDeadline: no attempt is granted, and so sent upstream, with less of
// its deadline left than the route's expected service time (issue 20):
// the grant's log time + the service time the ledger held for it must
// not pass its deadline. An emergency admission (the ledger degraded) is
// exempt, as it is from every limit. The ledger checks the same rule in
// its own seeded simulation (ledger/sim_test.go); here it is checked
// through the real loop, with crashes, takeovers and the learned service
// times of this pipeline's provider.
func (p *partition) checkDeadline(o *ledger.Output) {
	d := &o.Decision
	if d.Status != schemas.StatusGranted || d.GatewayDecision == schemas.GDEmergencyAdmitted {
		return
	}
	dl, svc, ok := p.led.Deadline(o.RequestID, o.Attempt)
	if !ok || dl == 0 {
		return
	}
	p.s.res.Stats.DeadlineChecked++
	if d.LogTimeMs+svc > dl {
		p.s.problem("%s/%d: granted at %d with deadline %d and expected service %d ms: sent upstream after its deadline minus the service time",
			o.RequestID, o.Attempt, d.LogTimeMs, dl, svc)
	}
}

// decided takes one produced decision: the owner's (it joins the open
// transaction) or a zombie's (it never commits). Gateways see both.
func (p *partition) decided(o *ledger.Output, owner bool) {
	ev := o.Event()
	b, err := schemas.Encode(ev)
	if err != nil {
		p.s.problem("partition %d: decision does not encode: %v", p.id, err)
		return
	}
	key := [2]int64{ev.Decision.InputOffset, int64(o.Index)}
	if prev, ok := p.first[key]; ok {
		// An upgraded ledger re-deriving the aborted round may differ,
		// whether it is the owner or, displaced by a later crash, a
		// zombie.
		if !bytes.Equal(prev, b) && !p.v2[key[0]] && !p.mixed[key[0]] {
			p.s.problem("partition %d: re-derived decision %v differs:\n %s\n %s", p.id, key, prev, b)
		}
	} else {
		p.first[key] = b
		p.s.audit(ev)
	}
	if owner {
		p.pending = append(p.pending, decRec{key, b})
	}
	// Deliver to the gateway that waits (read_committed consumer).
	var d schemas.Event
	if err := schemas.Decode(b, &d); err != nil {
		p.s.problem("partition %d: decision does not decode: %v", p.id, err)
		return
	}
	// The gateway's decisions partition keeps order: a late decision
	// delays every later one of that gateway (its consumer stalled).
	s := p.s
	node := d.Node
	after := func(ms int64) int64 {
		t := max(s.now+ms, s.nodeAt[node])
		s.nodeAt[node] = t
		return t
	}
	switch {
	case s.chance(10):
		s.res.Stats.LostDecisions++
		if d.Decision.Status == schemas.StatusGranted {
			s.lost[resKey{d.RequestID, d.Attempt}] = true
		}
		return
	case s.chance(20):
		s.res.Stats.LateDecisions++
		s.at(after(int64(400+s.rng.IntN(3000))), func() { s.deliver(p.id, key, b, &d) })
		return
	case s.chance(20):
		s.res.Stats.DupDecisions++
		s.at(after(int64(1+s.rng.IntN(netMaxMs/2))), func() { s.deliver(p.id, key, b, &d) })
	}
	s.at(after(int64(1+s.rng.IntN(netMaxMs/2))), func() { s.deliver(p.id, key, b, &d) })
}

// crash kills the partition's ledger between produce and commit: its open
// transaction aborts (gateways acted on its decisions all the same), and
// the new owner (a restart or a rebalance), after a takeover pause,
// restores the committed snapshot, re-applies the committed tail without
// producing, and decides again from the committed offset. zombie keeps the
// old owner deciding, never committing, until it is fenced; upgrade makes
// the new owner of another version for the aborted round.
func (p *partition) crash(zombie, upgrade bool) {
	s := p.s
	s.res.Stats.Crashes++
	s.res.Stats.Aborted += len(p.pending)
	if zombie {
		s.res.Stats.Zombies++
		p.zombie, p.zombieUntil = p.led, s.now+int64(100+s.rng.IntN(1500))
	}
	p.zombieOld = false
	if upgrade && p.led.Offset() > p.committedOff {
		p.zombieOld = zombie
		s.res.Stats.VersionChanges++
		for off := p.committedOff; off < p.led.Offset(); off++ {
			p.v2[off] = true
		}
	}
	p.epoch++
	p.pending, p.pendingLease, p.commitAt = nil, nil, 0
	p.snap = p.committedSnap
	if p.snap == nil {
		p.led = ledger.New(p.id, ledger.Config{})
	} else {
		l, err := ledger.Restore(p.snap)
		if err != nil {
			s.problem("partition %d: restore: %v", p.id, err)
			return
		}
		p.led = l
	}
	var out []ledger.Output
	for off := p.led.Offset(); off < p.committedOff; off++ {
		out = p.led.Apply(p.log[off].at, off, p.input(off), out[:0])
		for i := range out {
			b, err := schemas.Encode(out[i].Event())
			if k := [2]int64{off, int64(out[i].Index)}; err != nil || !bytes.Equal(b, p.committed[k]) {
				s.problem("partition %d: catch-up of %v differs from the committed decision", p.id, k)
			}
		}
	}
	p.tickAt = 0
	p.stall(int64(200 + s.rng.IntN(2000)))
}

// stall pauses the partition's consumption for ms (a broker restart, a GC
// pause, a takeover): records pile up and are decided at once afterwards.
func (p *partition) stall(ms int64) {
	p.s.res.Stats.Stalls++
	p.stalledUntil = max(p.stalledUntil, p.s.now+ms)
	p.pumpAt = 0
	p.schedulePump(p.stalledUntil)
}

// checkConservation: every grant the ledger made is held, or ended
// reconciled, released or hold-expired, and nothing else.
func (p *partition) checkConservation() {
	st := p.led.Stats()
	if st.Granted < st.Reconciled+st.Released+st.Abandoned+st.NodeLost {
		p.s.problem("partition %d: more grants settled than granted: %+v", p.id, st)
	}
}

// leaseKey is the record key of a lease message (ledger.LeaseOutput.Key).
func leaseKey(ev *schemas.Event) string {
	switch {
	case ev.LeaseRequested != nil:
		return ev.LeaseRequested.Budget
	case ev.LeaseReturned != nil:
		return ev.LeaseReturned.Budget
	}
	return ev.LeaseGranted.Holder
}

// checkBudget is the budget's conservation auditor, after every pump: at
// the budget partition, what its holders used or may still spend stays
// within the limit; at every scope partition, the lease is never used
// beyond what it holds (but for usage the log never granted, charged as
// an overdraft), and never holds more than the budget partition granted
// it (no lease granted twice).
func (s *sim) checkBudget() {
	if s.opts.Budget <= 0 {
		return
	}
	bp := s.parts[0].led
	if out, lim, ok := bp.BudgetOutstanding(budgetID); ok && out > lim && bp.Stats().UngrantedUsage == 0 {
		s.problem("budget %s: outstanding %d > limit %d", budgetID, out, lim)
	}
	for _, p := range s.parts {
		l, ok := p.led.BudgetLease(p.scope, budgetID)
		if !ok || l.WindowStartMs == 0 {
			continue
		}
		if l.Used > l.Granted-l.Returned && p.led.Stats().UngrantedUsage == 0 {
			s.problem("partition %d: %s used %d beyond its lease %d−%d", p.id, p.scope, l.Used, l.Granted, l.Returned)
		}
		if g, win, ok := bp.BudgetGranted(budgetID, p.scope); ok && win == l.WindowStartMs && l.Granted > g {
			s.problem("partition %d: %s holds a grant of %d, its budget partition granted %d (granted twice?)", p.id, p.scope, l.Granted, g)
		}
	}
}

// ---- the provider model ----

// bucket is the provider's wall-clock token bucket of one scope.
type bucket struct {
	tokens float64
	atMs   int64
}

func (b *bucket) take(nowMs int64) bool {
	b.tokens = min(float64(providerBurst), b.tokens+float64(nowMs-b.atMs)*ratePerSec/1000)
	b.atMs = nowMs
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// ---- gateways and clients ----

type resKey struct {
	id      string
	attempt int32
}

type request struct {
	s       *sim
	id      string
	node    string
	lc      *lifecycle.Lifecycle
	req     lifecycle.Request
	answers int
	relayed bool // a stream reached the client
	// inFlight is the dispatch generation still expected back; a client
	// gone during a dispatch cancels it.
	gen      int
	inFlight bool
	attempt  int32
	gone     bool
	cutAtMs  int64 // the client disconnects mid-stream then (0: never)
	actual   lifecycle.Usage
	// forged: a request of t2 for class interactive at priority 100, past
	// its entitlement; the ledger must refuse it, so it is never
	// dispatched.
	forged bool

	// The gateway's own shell (services/gateway/shell) runs the request,
	// as a coroutine of the simulation: it runs until it blocks in one of
	// its Env's waits (blocked says which), then the simulation goes on
	// in virtual time until something answers that wait (wake or in) and
	// resumes it (next). Only one of them runs at a time, so a seed still
	// reproduces the run.
	next    func() (struct{}, bool)
	yield   func(struct{}) bool
	blocked blockKind
	wake    shell.Wake      // what ended a Wait
	in      lifecycle.Input // what ended a Dispatch or Relay
	inbox   []shell.Wake    // decisions that came while the shell was not waiting
	// ctxEnd says how the request's context ended (0: it has not), and
	// ctxWhy the failure an upstream call cut by it has; ctxSaid, that
	// the shell was told.
	ctxEnd  shell.WakeKind
	ctxWhy  schemas.Reason
	ctxSaid bool
	waitGen int // the Wait a timer event belongs to
}

// blockKind is what a request's shell is blocked in.
type blockKind uint8

const (
	running  blockKind = iota // running, finished, or not started
	waiting                   // Inbox.Wait
	upstream                  // Upstream.Dispatch or Upstream.Relay
)

func (s *sim) arrive(id string) {
	node := s.nodes[s.rng.IntN(len(s.nodes))]
	tenant := fmt.Sprintf("t%d", s.rng.IntN(3))
	key := fmt.Sprintf("k%d", s.rng.IntN(5))
	req := lifecycle.Request{ID: id, Node: node, Tenant: tenant, KeyID: key, StartMs: s.now,
		Class:    []string{"interactive", "agent", "batch"}[s.rng.IntN(3)],
		Estimate: lifecycle.Usage{InputTokens: int64(100 + s.rng.IntN(2000)), OutputTokens: int64(50 + s.rng.IntN(1000))}}
	forged := false
	if tenant == "t2" && s.opts.ForgeEvery > 0 {
		// No extra draw of the seed's random stream: the request's place
		// in order decides.
		if forged = len(s.order)%s.opts.ForgeEvery == 0; forged {
			req.Priority = 100
		}
	}
	req.Streaming = s.chance(300)
	if s.chance(300) {
		req.DeadlineMs = int64(2000 + s.rng.IntN(20_000))
	}
	primary := s.rng.IntN(scopes)
	for i := range scopes {
		sc := scopeName((primary + i) % scopes)
		req.Targets = append(req.Targets, lifecycle.Target{Scope: sc, Profile: "p", Provider: "d-" + sc, Kind: schemas.ProviderOpenAI, Model: "m",
			Path: []schemas.PathLevel{{Level: "tenant", ID: tenant}, {Level: "key", ID: key}, {Level: "deployment", ID: "d-" + sc}}})
		if !s.chance(400) {
			break
		}
	}
	req.FallbackAllowed = len(req.Targets) > 1
	r := &request{s: s, id: id, node: node, req: req, forged: forged,
		lc: lifecycle.New(lifecycle.Config{AnswerTimeoutMs: answerTimeoutMs, LateGrantBoundMs: lateGrantBoundMs}, req)}
	r.actual = lifecycle.Usage{InputTokens: req.Estimate.InputTokens, OutputTokens: int64(s.rng.IntN(int(req.Estimate.OutputTokens) + 1))}
	if forged {
		s.res.Stats.Forged++
	}
	s.reqs[id] = r
	s.order = append(s.order, r)
	switch {
	case s.chance(100): // the client cancels at some point
		s.at(s.now+int64(s.rng.IntN(5000)), func() { s.clientGone(r) })
	case req.Streaming && s.chance(150):
		r.cutAtMs = -1 // disconnects mid-stream, once it started
	}
	if req.DeadlineMs == 0 {
		s.at(s.now+clientTimeoutMs, func() { s.clientGone(r) }) // the SDK's own timeout
	} else {
		s.at(s.now+req.DeadlineMs, func() { s.expire(r) }) // the gateway's context's deadline
	}
	r.start()
}

// deliver hands a decision to its gateway's consumer, which drops copies
// (admission/reserve.Dedup) and acts on the rest.
func (s *sim) deliver(part int32, key [2]int64, b []byte, ev *schemas.Event) {
	dd := s.dedup[ev.Node]
	if dd == nil {
		dd = reserve.NewDedup()
		s.dedup[ev.Node] = dd
	}
	if !dd.First(ev) {
		s.res.Stats.Copies++
		if p := s.parts[part]; ev.Decision.Status == schemas.StatusGranted && (p.v2[key[0]] || p.mixed[key[0]]) {
			if k := (resKey{ev.RequestID, ev.Attempt}); !s.shadowed[k] {
				s.shadowed[k] = true
				s.res.Stats.Shadowed++
			}
		}
		return
	}
	ak := actedKey{ev.Node, part, key}
	if _, ok := s.acted[ak]; ok {
		s.problem("%s acted twice on decision %d/%v", ev.Node, part, key)
	} else {
		s.acted[ak] = b
		s.actedOrder = append(s.actedOrder, ak)
	}
	if ev.Decision.Status == schemas.StatusGranted {
		s.delivered[resKey{ev.RequestID, ev.Attempt}] = true
	}
	r := s.reqs[ev.RequestID]
	if r == nil || ev.Node != r.node || r.lc.Done() {
		return // a gateway no longer watches a request that ended
	}
	w := shell.Wake{Kind: shell.WakeDecision, Attempt: ev.Attempt, Decision: *ev.Decision}
	if r.blocked != waiting {
		r.inbox = append(r.inbox, w) // the gateway's watch channel buffers it
		return
	}
	r.wake = w
	r.resume()
}

// clientGone ends r's client, and with it the request's context.
func (s *sim) clientGone(r *request) {
	if r.lc.Done() || r.gone {
		return
	}
	r.gone = true
	s.res.Stats.Cancels++
	s.endContext(r, schemas.ReasonClientDisconnect, shell.WakeClientGone)
}

// expire ends r's context at its deadline, as the gateway's context
// with the request's deadline does.
func (s *sim) expire(r *request) {
	if r.lc.Done() || r.gone {
		return
	}
	s.res.Stats.Expired++
	s.endContext(r, schemas.ReasonDeadline, shell.WakeDeadline)
}

// endContext ends r's context (once): it cancels the upstream call in
// flight (the context is its parent), which answers with why and the
// usage so far, and the shell hears of it once (Wait says wake).
func (s *sim) endContext(r *request, why schemas.Reason, wake shell.WakeKind) {
	if r.ctxEnd != 0 {
		return
	}
	r.ctxEnd, r.ctxWhy = wake, why
	switch r.blocked {
	case upstream:
		r.gen++
		r.inFlight = false
		kind := lifecycle.UpstreamDone
		if r.relayed {
			kind = lifecycle.StreamEnded
		}
		r.answer(lifecycle.Input{Kind: kind, Attempt: r.attempt, Upstream: lifecycle.Upstream{Status: 200 * b2i(r.relayed),
			Failure: why, Usage: lifecycle.Usage{OutputTokens: r.actual.OutputTokens / 2}}})
	case waiting:
		r.ctxSaid = true
		r.wake = shell.Wake{Kind: wake}
		r.resume()
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ---- the gateway shell's world (shell.Env) ----

// start runs r's shell until it first blocks.
func (r *request) start() {
	r.next, _ = iter.Pull(func(yield func(struct{}) bool) {
		r.yield = yield
		shell.Run(r.lc, r)
	})
	r.resume()
}

// resume runs r's shell from where it blocked until it blocks again or
// ends. A shell that never ends leaves its coroutine behind; the auditor
// reports the request unanswered.
func (r *request) resume() {
	r.blocked = running
	r.next()
}

// block suspends r's shell in kind until the simulation resumes it.
func (r *request) block(kind blockKind) {
	r.blocked = kind
	r.yield(struct{}{})
}

// answer ends the upstream call r's shell is blocked in with in.
func (r *request) answer(in lifecycle.Input) {
	if r.blocked != upstream {
		r.s.problem("%s/%d: an upstream answer (%v) with no call waiting for it", r.id, in.Attempt, in.Kind)
		return
	}
	r.in = in
	r.resume()
}

// NowMs is virtual time.
func (r *request) NowMs() int64 { return r.s.now }

// errProduceFailed is an injected produce failure.
var errProduceFailed = errors.New("pipesim: produce failed (injected)")

// Produce puts the reservation on the bus, which may fail it; the
// simulated producer's ack takes no time.
func (r *request) Produce(attempt int32, ev *schemas.Event) error {
	s := r.s
	if r.relayed {
		s.problem("%s: a new attempt (%d) after a partly streamed response", r.id, attempt)
	}
	ok := s.send(r.node, ev, true)
	if ev.Type == schemas.TypeRetryRequested {
		s.res.Stats.Retries++
	}
	if !ok {
		return errProduceFailed
	}
	return nil
}

// Report sends an event the ledger must see; reconciles and provider
// observations wait for a ride, as in admission/reserve.
func (r *request) Report(ev *schemas.Event) {
	s := r.s
	if ev.Type == schemas.TypeReconciled {
		s.reconciled[resKey{ev.RequestID, ev.Attempt}] = true
	}
	if t := ev.Type; t == schemas.TypeReconciled || t == schemas.TypeProviderObserved {
		s.hold(r.node, ev)
		return
	}
	s.send(r.node, ev, false)
}

// Telemetry counts the successes; nothing downstream reads it here.
func (r *request) Telemetry(ev *schemas.Event) {
	if o := ev.Outcome; o != nil && o.Status == schemas.OutcomeSuccess {
		r.s.res.Stats.Success++
	}
}

// Wait takes a decision that came while the shell was busy, says the
// client went (once), or blocks until a decision, the client or the timer.
func (r *request) Wait(atMs int64, timer bool) shell.Wake {
	switch {
	case len(r.inbox) > 0:
		w := r.inbox[0]
		r.inbox = r.inbox[1:]
		return w
	case r.ctxEnd != 0 && !r.ctxSaid:
		r.ctxSaid = true
		return shell.Wake{Kind: r.ctxEnd}
	case timer && atMs <= r.s.now:
		return shell.Wake{Kind: shell.WakeTimer}
	}
	r.waitGen++
	if timer {
		gen := r.waitGen
		r.s.at(atMs, func() {
			if r.blocked == waiting && r.waitGen == gen {
				r.wake = shell.Wake{Kind: shell.WakeTimer}
				r.resume()
			}
		})
	}
	r.block(waiting)
	return r.wake
}

// Dispatch calls the provider model and blocks until it answers or the
// client goes.
func (r *request) Dispatch(target int, attempt int32) lifecycle.Input {
	s := r.s
	if r.relayed {
		s.problem("%s: a new attempt (%d) after a partly streamed response", r.id, attempt)
	}
	if r.forged {
		s.problem("%s: forged past tenant t2's entitlement (priority 100), yet dispatched", r.id)
	}
	if r.ctxEnd != 0 {
		// The call's context is done: it fails before it is sent.
		return lifecycle.Input{Kind: lifecycle.UpstreamDone, Attempt: attempt, Upstream: lifecycle.Upstream{Failure: r.ctxWhy}}
	}
	s.dispatch(r, target, attempt)
	r.block(upstream)
	return r.in
}

// Relay relays the stream and blocks until it ends.
func (r *request) Relay(attempt int32) lifecycle.Input {
	r.answers++
	r.relayed = true
	r.s.res.Stats.Streams++
	r.checkAnswers()
	r.s.relay(r, attempt)
	r.block(upstream)
	return r.in
}

// Respond audits the client's answer.
func (r *request) Respond(e *apierr.Error) {
	r.answers++
	code := ""
	if e != nil {
		code = e.Code
	}
	switch {
	case r.forged && code == string(schemas.ReasonPriorityNotEntitled):
		r.s.res.Stats.ForgedRefused++
	case !r.forged && (code == string(schemas.ReasonClassNotEntitled) || code == string(schemas.ReasonPriorityNotEntitled)):
		r.s.problem("%s: refused %s, though within its entitlement", r.id, code)
	}
	r.checkAnswers()
}

func (r *request) checkAnswers() {
	if r.answers > 1 {
		r.s.problem("%s: %d answers to its client", r.id, r.answers)
	}
}

// LocalAdmission admits nothing locally: the simulated gateways run with
// neither degraded mode nor an emergency cap.
func (r *request) LocalAdmission(int32) (degradedOK, emergencyOK bool) { return false, false }

// Settled: the simulated gateways send no heartbeats.
func (r *request) Settled(string, schemas.Decision) {}

// Count counts the late grants; the simulation's other counters are its
// Stats.
func (r *request) Count(m lifecycle.Metric, _ string) {
	if m == lifecycle.MetricLateGrant {
		r.s.res.Stats.LateGrants++
	}
}

// dispatch models the provider call of attempt on target ti.
func (s *sim) dispatch(r *request, ti int, attempt int32) {
	s.res.Stats.Dispatches++
	r.gen++
	r.inFlight, r.attempt = true, attempt
	gen := r.gen
	b := s.prov[int(r.req.Targets[ti].Scope[1]-'0')]
	arrive := s.now + int64(s.rng.IntN(netMaxMs/2))
	s.at(arrive, func() {
		if r.gen != gen {
			return // cancelled before it reached the provider
		}
		u := lifecycle.Upstream{Status: 200, Usage: r.actual}
		switch {
		case s.chance(30):
			s.res.Stats.ProviderInjected++
			u = lifecycle.Upstream{Status: 429, Rejection: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRateLimited, RetryAfterMs: int64(s.rng.IntN(2000))}}
		case s.chance(20):
			s.res.Stats.ProviderInjected++
			u = lifecycle.Upstream{Status: 503, Rejection: schemas.ProviderRejected{HTTPStatus: 503, Kind: schemas.KindOverloaded}}
		case !b.take(s.now):
			s.res.Stats.ProviderOrganic429++
			s.problem("%s/%d: provider 429 while Sluice's limit is at or below the provider's (its bucket is empty: a burst)", r.id, attempt)
			u = lifecycle.Upstream{Status: 429, Rejection: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRateLimited, RetryAfterMs: 1000}}
		}
		latency := int64(50 + s.rng.IntN(700))
		s.at(s.now+latency, func() {
			if r.gen != gen {
				return
			}
			if u.Status == 200 && r.req.Streaming {
				r.answer(lifecycle.Input{Kind: lifecycle.StreamStarted, Attempt: attempt, Upstream: lifecycle.Upstream{Status: 200}})
				return
			}
			r.inFlight = false
			u.TotalMs = latency
			r.answer(lifecycle.Input{Kind: lifecycle.UpstreamDone, Attempt: attempt, Upstream: u})
		})
	})
}

// relay models the stream: it ends, is cut by the provider, or the client
// disconnects mid-way.
func (s *sim) relay(r *request, attempt int32) {
	gen := r.gen
	dur := int64(100 + s.rng.IntN(3000))
	if r.cutAtMs == -1 {
		s.at(s.now+int64(s.rng.Int64N(dur)), func() {
			if r.gen == gen {
				s.clientGone(r)
			}
		})
	}
	cut := s.chance(50)
	s.at(s.now+dur, func() {
		if r.gen != gen {
			return
		}
		r.inFlight = false
		u := lifecycle.Upstream{Status: 200, Usage: r.actual, TotalMs: dur}
		if cut {
			u.Failure, u.Usage.OutputTokens = schemas.ReasonError, r.actual.OutputTokens/3
		}
		r.answer(lifecycle.Input{Kind: lifecycle.StreamEnded, Attempt: attempt, Upstream: u})
	})
}

// ---- the auditor ----

// granted remembers every grant the ledger made, by request and attempt,
// so the end can check each was settled by its gateway.
func (s *sim) audit(ev *schemas.Event) {
	d := ev.Decision
	if d.GatewayDecision == "" {
		s.problem("decision without gateway_decision: %s/%d %s", ev.RequestID, ev.Attempt, d.Status)
	}
	if d.Reason == schemas.ReasonBudgetExhausted {
		s.res.Stats.BudgetDenied++
	}
	if k := (resKey{ev.RequestID, ev.Attempt}); d.Status == schemas.StatusHoldExpired && d.Reason == schemas.ReasonHoldAbandoned &&
		!((s.lost[k] || s.shadowed[k]) && !s.delivered[k]) {
		// Every gateway here lives and settles what it was granted, even
		// when the grant came late: an abandoned hold is a leak unless
		// its gateway never heard of the grant (every copy was lost, or
		// dropped by its Dedup behind another version's decision at the
		// same position: it acted on that one, e.g. a zombie's queued,
		// and the hold TTL is what bounds the grant it never saw).
		s.problem("%s/%d: grant abandoned (hold_ttl_abandoned): its gateway never reconciled or released it", ev.RequestID, ev.Attempt)
	}
}

// final drains the run and checks what must hold at the end.
func (s *sim) final() {
	for _, r := range s.order {
		if !r.lc.Done() {
			s.problem("%s: no answer at the end of the run (attempt %d)", r.id, r.lc.Attempts())
		}
		if r.answers != 1 {
			s.problem("%s: %d answers, want exactly one", r.id, r.answers)
		}
		s.res.Stats.Answers += r.answers
	}
	for _, p := range s.parts {
		st := p.led.Stats()
		if st.Granted != st.Reconciled+st.Released+st.Abandoned+st.NodeLost {
			s.problem("partition %d: grants not all settled at the end: %+v", p.id, st)
		}
		for _, q := range p.led.Queues(nil) {
			if q.Depth != 0 {
				s.problem("partition %d: %d requests still queued in %s", p.id, q.Depth, q.Class)
			}
		}
		p.replay()
		if l, ok := p.led.BudgetLease(p.scope, budgetID); ok {
			s.res.Stats.BudgetGranted += int(l.Used)
		}
	}
	if s.opts.Budget > 0 && int64(s.res.Stats.BudgetGranted) > s.opts.Budget && s.parts[0].led.Stats().UngrantedUsage == 0 {
		s.problem("budget %s: %d charged at the end, limit %d", budgetID, s.res.Stats.BudgetGranted, s.opts.Budget)
	}
	s.auditActed()
}

// auditActed: what each gateway acted on is what the committed log holds,
// decision by decision, except where a ledger of another version
// re-derived an aborted round (and where an old-version zombie went on
// deciding after it: its state differs from the new owner's from that
// round on); a grant acted on there that the committed
// log does not have, and whose usage the gateway reported, is charged as
// debt exactly once (Stats.UngrantedUsage).
func (s *sim) auditActed() {
	exposed := map[resKey]bool{}
	for _, ak := range s.actedOrder {
		p := s.parts[ak.part]
		b, cb := s.acted[ak], p.committed[ak.key]
		if cb == nil && (p.v2[ak.key[0]] || p.mixed[ak.key[0]]) {
			// A ledger of another version re-derived this round and
			// produced fewer decisions for its input: the acted-on one
			// has no committed counterpart at all. A grant among them is
			// exposed exactly like one the re-derivation denied.
			var a schemas.Event
			if schemas.Decode(b, &a) != nil {
				s.problem("decision %d/%v does not decode", ak.part, ak.key)
				continue
			}
			if a.Decision.Status == schemas.StatusGranted && !s.committedGrant(p, resKey{a.RequestID, a.Attempt}) {
				exposed[resKey{a.RequestID, a.Attempt}] = true
			}
			continue
		}
		if cb == nil {
			s.problem("%s acted on decision %d/%v, which never committed", ak.node, ak.part, ak.key)
			continue
		}
		if bytes.Equal(b, cb) {
			continue
		}
		if !p.v2[ak.key[0]] && !p.mixed[ak.key[0]] {
			s.problem("%s acted on decision %d/%v, which differs from the committed one:\n %s\n %s", ak.node, ak.part, ak.key, b, cb)
			continue
		}
		var a, c schemas.Event
		if schemas.Decode(b, &a) != nil || schemas.Decode(cb, &c) != nil {
			s.problem("decision %d/%v does not decode", ak.part, ak.key)
			continue
		}
		if a.Decision.Status == schemas.StatusGranted && !s.committedGrant(p, resKey{a.RequestID, a.Attempt}) {
			exposed[resKey{a.RequestID, a.Attempt}] = true
		}
	}
	want := 0
	for k := range exposed {
		if s.reconciled[k] {
			want++
		}
	}
	var got int64
	for _, p := range s.parts {
		got += p.led.Stats().UngrantedUsage
	}
	s.res.Stats.Ungranted = int(got)
	if got != int64(want) {
		s.problem("usage charged on grants the committed log lacks: %d, want %d (acted-on grants the log denied, then reconciled)", got, want)
	}
}

// committedGrant says whether the committed log of p grants k.
func (s *sim) committedGrant(p *partition, k resKey) bool {
	for _, b := range p.committed {
		var ev schemas.Event
		if schemas.Decode(b, &ev) == nil && ev.RequestID == k.id && ev.Attempt == k.attempt && ev.Decision.Status == schemas.StatusGranted {
			return true
		}
	}
	return false
}

// replay re-applies the partition's whole recorded log to a new ledger:
// it must re-derive exactly the decisions first produced, byte for byte.
func (p *partition) replay() {
	l := ledger.New(p.id, ledger.Config{})
	var out []ledger.Output
	n := 0
	keys := make([][2]int64, 0, len(p.committed))
	for k := range p.committed {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	for off, r := range p.log {
		out = l.Apply(r.at, int64(off), p.input(int64(off)), out[:0])
		for i := range out {
			b, err := schemas.Encode(out[i].Event())
			key := [2]int64{int64(off), int64(out[i].Index)}
			if err != nil || !bytes.Equal(b, p.committed[key]) {
				p.s.problem("partition %d: replay of %v differs from the recorded decision", p.id, key)
				return
			}
			n++
		}
	}
	if n != len(keys) {
		p.s.problem("partition %d: replay derived %d decisions, the run recorded %d", p.id, n, len(keys))
	}
}
