package pipesim

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// RunLoop simulates one seed of the real ledger-service loop
// (services/ledgerd: Service.Round, its rounds, transactions, snapshots,
// rebuilds and commits, unchanged) over a simulated broker (simTxLog, the
// ledgerd.TxLog of one member) in virtual time (memberClock), while
// gateways send reserves and reconciles and act on every decision as soon
// as it is produced. The broker injects lost, duplicated and slow
// decisions, failed produces, revokes, a fenced producer, transactions of
// unknown outcome, member pauses with a backlog behind them, and crashes
// between produce and commit (a new member takes over from the committed
// snapshot and offsets). It keeps Kafka's own limits: a record batch over
// the topic's max.message.bytes is refused, and on a Kafka 4 broker a
// transaction whose first request is the offset commit, sent while the
// previous transaction's markers are being written, is aborted
// (CONCURRENT_TRANSACTIONS).
//
// The auditor checks, at the end, that every committed decision is the one
// a fresh ledger derives from the committed log (exactly once: none lost,
// none twice), that what gateways acted on is what was committed, that
// every reserve was decided and committed, and, while the run goes, that
// no transaction aborted without an injected fault to explain it and that
// no snapshot was encoded on the loop (it holds the round's decisions
// behind its encoding).
func RunLoop(seed uint64, o LoopOptions) LoopResult {
	o.defaults()
	w := &loopSim{rng: rand.New(rand.NewPCG(seed, seed^0x100b)), opts: o, names: bus.DefaultNames(),
		committed: map[decKey]*schemas.Event{}, acted: map[actKey]schemas.Status{},
		appendAt: map[string]int64{}}
	w.res.Seed = seed
	w.batchMax = ledgerd.BatchMaxBytes(w.names)
	w.setup()
	for w.q.Len() > 0 && len(w.res.Problems) < 20 && w.q[0].at <= w.endAt {
		it := heap.Pop(&w.q).(item)
		w.now = it.at
		it.fn()
	}
	w.final()
	return w.res
}

// LoopResult is what a RunLoop saw; Problems is empty when the auditor
// found nothing.
type LoopResult struct {
	Seed     uint64
	Problems []string
	Stats    LoopStats
}

// LoopStats counts what a RunLoop did, to show it exercised what it
// claims: the member's rounds and transactions, the records aborted with
// a transaction (gateways acted on them all the same), the faults
// injected, and the partitions rebuilt.
type LoopStats struct {
	Requests, Records, Rounds, Transactions, Aborts, Aborted int
	Crashes, Fences, Revokes, Pauses, Backlogs               int
	FailedProduces, TooLarge, UnknownOutcomes                int
	LostDecisions, LateDecisions, DupDecisions, Copies       int
	Dispatches, Rebuilds, Snapshots, Committed               int
}

// LoopOptions sizes a RunLoop. The zero value takes the defaults.
type LoopOptions struct {
	Requests   int // reserves over the run (default 400)
	Partitions int // partitions of sluice.requests, one scope each (default 2)
	Gateways   int // gateway nodes (default 3)
	// Backlog is how many reserves one gateway sends while the member is
	// paused, in the runs that have such an outage (a quarter of the
	// seeds): the member then decides them in rounds of a full fetch
	// (default 6000).
	Backlog int
}

func (o *LoopOptions) defaults() {
	if o.Requests == 0 {
		o.Requests = 400
	}
	if o.Partitions == 0 {
		o.Partitions = 2
	}
	if o.Gateways == 0 {
		o.Gateways = 3
	}
	if o.Backlog == 0 {
		o.Backlog = 6000
	}
}

// Limits of the simulated broker and client.
const (
	loopDecisionParts = 3
	// brokerMaxMessageBytes is Kafka's default max.message.bytes, kept by
	// every topic but sluice.snapshots (bus.SnapshotMaxBytes).
	brokerMaxMessageBytes = 1_000_012
	// fetchMaxPartitionBytes is franz-go's default per-partition fetch
	// bound: one poll returns at most this much of a partition.
	fetchMaxPartitionBytes = 1 << 20
	// recordOverhead and batchOverhead approximate Kafka's record and
	// batch headers in a v2 record batch.
	recordOverhead = 20
	batchOverhead  = 61
	// encodeBytesPerMs is the cost model of a snapshot's JSON encoding:
	// about 9 ms for a partition of thousands of reservations, measured
	// (ledger/freeze_bench_test.go).
	encodeBytesPerMs = 100_000
)

type decKey struct {
	part      int32
	off       int64
	requestID string
	attempt   int32
	n         int // the n-th decision of this attempt at this input
}

type actKey struct {
	requestID string
	attempt   int32
}

// loopSim is the world: the broker's topics, the group, the member and
// the gateways, in virtual time.
type loopSim struct {
	rng   *rand.Rand
	opts  LoopOptions
	names bus.Names
	now   int64 // virtual ms
	// endAt ends the run: the last arrival plus time for every hold to
	// expire and every transaction to commit.
	endAt int64
	seq   int64
	q     queue
	res   LoopResult

	batchMax func(topic string) int32

	// sluice.requests, by partition, and the group's committed offsets.
	reqs         [][]simRecord
	committedOff []int64
	// snaps are the committed snapshot records, in commit order.
	snaps []simSnapshot
	// committed holds every committed decision.
	committed map[decKey]*schemas.Event
	// acted is the final status each gateway acted on first.
	acted map[actKey]schemas.Status
	// epoch is the member's producer epoch: a session of an older one is
	// fenced. markersUntil is when the last End's markers are written.
	epoch        int
	markersUntil int64
	appendAt     map[string]int64

	member  *member
	members int
	nextReq int
	// faulted explains the aborts of the open transaction (an injected
	// fault during it); empty: none.
	faulted string
}

type simRecord struct {
	value []byte
	at    int64
}

type simSnapshot struct {
	part  int32
	input int64
	state []byte
	at    int64
}

func (w *loopSim) at(t int64, fn func()) {
	w.seq++
	heap.Push(&w.q, item{at: max(t, w.now), seq: w.seq, fn: fn})
}

func (w *loopSim) chance(permille int) bool { return w.rng.IntN(1000) < permille }

func (w *loopSim) problem(format string, args ...any) {
	if len(w.res.Problems) < 20 {
		w.res.Problems = append(w.res.Problems, fmt.Sprintf("t=%d: ", w.now)+fmt.Sprintf(format, args...))
	}
}

func (w *loopSim) setup() {
	w.now = 1_000_000
	w.reqs = make([][]simRecord, w.opts.Partitions)
	w.committedOff = make([]int64, w.opts.Partitions)
	cfg := ledger.Config{HoldTTLMs: holdTTLMs, StreamHoldTTLMs: holdTTLMs, DedupTTLMs: 2 * holdTTLMs}
	for i := range w.opts.Partitions {
		cfg.Scopes = append(cfg.Scopes, ledger.ScopeConfig{Name: scopeName(i), Buckets: []ledger.BucketConfig{
			{Level: ledger.LevelScope, ID: "*", Dimension: schemas.DimRequests, Capacity: ratePerSec * 60, PeriodMs: 60_000, WindowMs: sluiceWindowMs},
			{Level: ledger.LevelKey, ID: "*", Dimension: schemas.DimConcurrency, Capacity: 4},
		}})
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		panic(err)
	}
	for i := range w.opts.Partitions {
		w.appendReq(int32(i), &schemas.Event{V: schemas.Version, Type: schemas.TypeConfigChanged, ID: w.id(),
			ConfigChanged: &schemas.ConfigChanged{ConfigVersion: "sim", Ledger: b}})
	}
	w.startMember()
	// Arrivals: bursts and lulls, faster than the limit at times.
	t := w.now + 10
	for range w.opts.Requests {
		if w.rng.IntN(10) == 0 {
			t += int64(w.rng.IntN(3000))
		} else {
			t += int64(w.rng.IntN(60))
		}
		w.at(t, w.reserve)
	}
	end := t
	w.endAt = end + 2*holdTTLMs
	when := func() int64 { return w.now + w.rng.Int64N(end-w.now) }
	for range w.rng.IntN(3) {
		w.at(when(), w.crash)
	}
	for range w.rng.IntN(4) {
		w.at(when(), w.revoke)
	}
	if w.chance(300) {
		w.at(when(), w.fence)
	}
	for range w.rng.IntN(3) {
		d := int64(200 + w.rng.IntN(3000))
		w.at(when(), func() { w.pause(d, 0) })
	}
	if w.chance(250) {
		w.at(when(), func() { w.pause(3000, w.opts.Backlog) })
	}
}

func (w *loopSim) id() string {
	w.nextReq++
	return fmt.Sprintf("e%d", w.nextReq)
}

// appendReq appends ev to partition p of sluice.requests now.
func (w *loopSim) appendReq(p int32, ev *schemas.Event) {
	b, err := schemas.Encode(ev)
	if err != nil {
		w.problem("%s does not encode: %v", ev.Type, err)
		return
	}
	w.appendRaw(p, b)
}

func (w *loopSim) appendRaw(p int32, b []byte) {
	w.reqs[p] = append(w.reqs[p], simRecord{value: b, at: w.now})
	w.res.Stats.Records++
	if m := w.member; m != nil {
		m.wake(w.now + 1 + int64(w.rng.IntN(3)))
	}
}

// send appends ev from node after a network delay, in order per node and
// partition.
func (w *loopSim) send(node string, p int32, ev *schemas.Event) {
	key := fmt.Sprint(node, "/", p)
	at := max(w.now+1+int64(w.rng.IntN(netMaxMs/2)), w.appendAt[key])
	w.appendAt[key] = at
	w.at(at, func() { w.appendReq(p, ev) })
}

func (w *loopSim) reserve() {
	node := fmt.Sprintf("gw%d", w.rng.IntN(w.opts.Gateways))
	w.reserveFrom(node)
}

func (w *loopSim) reserveFrom(node string) {
	p := int32(w.rng.IntN(w.opts.Partitions))
	tenant, key := fmt.Sprintf("t%d", w.rng.IntN(3)), fmt.Sprintf("k%d", w.rng.IntN(5))
	w.res.Stats.Requests++
	ev := &schemas.Event{V: schemas.Version, Type: schemas.TypeReserveRequested, ID: w.id(), ProducedAtMs: w.now,
		RequestID: fmt.Sprintf("r%d", w.res.Stats.Requests), Attempt: 1, Node: node, Scope: scopeName(int(p)),
		Tenant: tenant, KeyID: key, Route: "p", Class: []string{"interactive", "agent", "batch"}[w.rng.IntN(3)],
		ReserveRequested: &schemas.ReserveRequested{
			Path:        []schemas.PathLevel{{Level: "tenant", ID: tenant}, {Level: "key", ID: key}},
			InputTokens: int64(100 + w.rng.IntN(2000)), OutputTokens: int64(50 + w.rng.IntN(1000)),
			MaxWaitMs: int64(500 + w.rng.IntN(5000)),
		}}
	w.send(node, p, ev)
}

// decided is a decision record the broker accepted into the open
// transaction: gateways see it now (read_uncommitted), lost, late or twice.
func (w *loopSim) decided(b []byte) {
	var ev schemas.Event
	if err := schemas.Decode(b, &ev); err != nil {
		w.problem("a produced decision does not decode: %v", err)
		return
	}
	if ev.Decision == nil {
		return
	}
	switch {
	case w.chance(10):
		w.res.Stats.LostDecisions++
		return
	case w.chance(20):
		w.res.Stats.LateDecisions++
		w.at(w.now+int64(400+w.rng.IntN(3000)), func() { w.act(&ev) })
		return
	case w.chance(20):
		w.res.Stats.DupDecisions++
		w.at(w.now+int64(1+w.rng.IntN(netMaxMs)), func() { w.act(&ev) })
	}
	w.at(w.now+int64(1+w.rng.IntN(netMaxMs/2)), func() { w.act(&ev) })
}

// act is the gateway acting on a decision: the first final status of an
// attempt is the one it acts on; a grant is reconciled after the call.
func (w *loopSim) act(ev *schemas.Event) {
	st := ev.Decision.Status
	if st == schemas.StatusQueued {
		return
	}
	k := actKey{ev.RequestID, ev.Attempt}
	if _, ok := w.acted[k]; ok {
		w.res.Stats.Copies++
		return
	}
	if st != schemas.StatusGranted && st != schemas.StatusDenied && st != schemas.StatusExpired {
		return
	}
	w.acted[k] = st
	if st != schemas.StatusGranted {
		return
	}
	w.res.Stats.Dispatches++
	rr := ev.Decision
	p := rr.InputPartition
	rec := &schemas.Event{V: schemas.Version, Type: schemas.TypeReconciled, ID: w.id(), ProducedAtMs: w.now,
		RequestID: ev.RequestID, Attempt: ev.Attempt, Node: ev.Node, Scope: ev.Scope, Tenant: ev.Tenant, KeyID: ev.KeyID,
		Route: ev.Route, Class: ev.Class,
		Reconciled: &schemas.Reconciled{InputTokens: 500, OutputTokens: 200, HTTPStatus: 200, FirstByteMs: 50, TotalMs: 300}}
	node := ev.Node
	w.at(w.now+int64(20+w.rng.IntN(800)), func() { w.send(node, p, rec) })
}

// ---- the member ----

// member is one ledger process: the real ledgerd.Service, run one Round at
// a time on its virtual clock.
type member struct {
	w      *loopSim
	svc    *ledgerd.Service
	ctx    context.Context
	cancel context.CancelFunc
	clock  *memberClock
	sess   *simTxLog
	alive  bool
	nextAt int64
	// pausedUntil: the process is stopped (a GC pause, a slow disk, a
	// broker it cannot reach) until then.
	pausedUntil int64
}

// memberClock is the member's ledgerd.Clock: the simulation's virtual
// time, plus what the round in progress spent (timer waits, work on the
// loop). Work off the loop runs as a later event.
type memberClock struct {
	m     *member
	extra time.Duration
}

func (c *memberClock) Now() time.Time {
	return time.UnixMilli(c.m.w.now).Add(c.extra)
}

func (c *memberClock) After(d time.Duration) <-chan time.Time {
	c.extra += d
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}

func (c *memberClock) Go(fn func()) {
	m := c.m
	m.w.at(m.w.now+int64(1+m.w.rng.IntN(30)), func() {
		fn()
		m.wake(m.w.now + 1)
	})
}

func (w *loopSim) startMember() {
	w.members++
	m := &member{w: w, alive: true}
	m.clock = &memberClock{m: m}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	cfg := ledgerd.Config{Node: fmt.Sprintf("ledger%d", w.members), Topics: w.names, SnapshotEvery: snapshotEvery,
		SnapshotInterval: 2 * time.Second, CommitInterval: commitIntervalMs * time.Millisecond, PeerDeadAfter: -1,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()}
	svc, err := ledgerd.NewOver(cfg, ledgerd.Medium{Dial: m.dial, Clock: m.clock,
		DecisionPartitions: loopDecisionParts, RequestPartitions: int32(w.opts.Partitions)})
	if err != nil {
		w.problem("member: %v", err)
		return
	}
	m.svc = svc
	w.member = m
	m.wake(w.now + 1)
}

// dial opens a session: a new producer epoch, which fences every older
// session of the member's transactional id, and the whole assignment.
func (m *member) dial(drop func([]int32)) (ledgerd.TxLog, error) {
	w := m.w
	w.epoch++
	s := &simTxLog{w: w, m: m, epoch: w.epoch, drop: drop, assigned: map[int32]bool{}, pos: map[int32]int64{},
		paused: map[int32]bool{}, maxSeen: map[int32]int64{}, maxSeenRound: map[int32]int{}}
	for p := range w.opts.Partitions {
		s.assigned[int32(p)] = true
		s.pos[int32(p)] = w.committedOff[p]
		s.maxSeen[int32(p)] = -1
	}
	m.sess = s
	return s, nil
}

func (m *member) wake(at int64) {
	if !m.alive {
		return
	}
	at = max(at, m.pausedUntil)
	if m.nextAt != 0 && m.nextAt <= at {
		return
	}
	m.nextAt = at
	m.w.at(at, func() {
		if m.nextAt != at || !m.alive {
			return
		}
		m.nextAt = 0
		m.round()
	})
}

func (m *member) round() {
	w := m.w
	if w.now < m.pausedUntil {
		m.wake(m.pausedUntil)
		return
	}
	w.res.Stats.Rounds++
	m.clock.extra = 0
	done, err := m.svc.Round(m.ctx)
	m.sess.sendAppends()
	if done {
		w.problem("the member stopped: %v", err)
		m.alive = false
		return
	}
	next := w.now + 1 + m.clock.extra.Milliseconds()
	if m.sess.idle {
		next += m.sess.wait.Milliseconds()
	}
	m.wake(next)
}

// ---- faults ----

// crash kills the member between produce and commit (whatever its open
// transaction holds is aborted by the next owner's InitProducerID, though
// gateways acted on it), and a new member takes over after a pause.
func (w *loopSim) crash() {
	m := w.member
	if m == nil || !m.alive {
		return
	}
	w.res.Stats.Crashes++
	m.alive = false
	m.cancel()
	w.member = nil
	if s := m.sess; s != nil && s.open {
		w.res.Stats.Aborted += len(s.accepted)
		s.endTxn()
	}
	w.at(w.now+int64(200+w.rng.IntN(2000)), w.startMember)
}

// fence bumps the member's producer epoch from outside (a peer's
// liveness fence, a zombie's successor): its session fails fenced from
// its next request, and it must recreate it and rebuild.
func (w *loopSim) fence() {
	if w.member == nil || !w.member.alive {
		return
	}
	w.res.Stats.Fences++
	w.epoch++
	if s := w.member.sess; s != nil && s.open {
		w.faulted = "fenced"
	}
}

// revoke takes a partition from the member and gives it back a little
// later (a cooperative rebalance): franz-go calls the revoke callback and
// aborts the transaction of the next End.
func (w *loopSim) revoke() {
	m := w.member
	if m == nil || !m.alive || m.sess == nil {
		return
	}
	s := m.sess
	p := int32(w.rng.IntN(w.opts.Partitions))
	if !s.assigned[p] {
		return
	}
	w.res.Stats.Revokes++
	delete(s.assigned, p)
	s.revoked = true
	if s.open {
		w.faulted = "revoke"
	}
	s.drop([]int32{p})
	w.at(w.now+int64(50+w.rng.IntN(300)), func() {
		if m.sess != s || !m.alive {
			return
		}
		s.assigned[p] = true
		s.pos[p] = w.committedOff[p]
		m.wake(w.now + 1)
	})
}

// pause stops the member for ms; with backlog, one gateway sends that many
// reserves meanwhile.
func (w *loopSim) pause(ms int64, backlog int) {
	m := w.member
	if m == nil || !m.alive {
		return
	}
	w.res.Stats.Pauses++
	if backlog > 0 {
		w.res.Stats.Backlogs++
	}
	m.pausedUntil = max(m.pausedUntil, w.now+ms)
	for i := range backlog {
		w.at(w.now+int64(i)*ms/int64(backlog+1), func() { w.reserveFrom("gw0") })
	}
}

// ---- the simulated session ----

// simTxLog is one member session's view of the simulated broker: a
// ledgerd.TxLog with franz-go's GroupTransactSession semantics.
type simTxLog struct {
	w     *loopSim
	m     *member
	epoch int
	drop  func([]int32)

	assigned map[int32]bool
	pos      map[int32]int64
	paused   map[int32]bool
	// revoked: a revoke or loss since the last End, which aborts the
	// transaction that End ends (franz-go).
	revoked bool

	open     bool
	queued   []pendingProduce // produced, not yet answered
	accepted [][2]any         // records the broker took into the open transaction: topic, value
	produced bool             // the open transaction has a record

	// The round's poll: idle when it returned nothing, with the wait it
	// was given; round numbers polls; maxSeen is the highest offset of a
	// partition this session's polls returned, first in round
	// maxSeenRound.
	idle         bool
	wait         time.Duration
	round        int
	maxSeen      map[int32]int64
	maxSeenRound map[int32]int
	closed       atomic.Bool
	appends      []*kgo.Record // the round's Ticks
	// lastCommitted says whether the last End committed.
	lastCommitted bool
}

type pendingProduce struct {
	r       *kgo.Record
	promise func(*kgo.Record, error)
}

func (s *simTxLog) fenced() bool { return s.epoch < s.w.epoch }

func (s *simTxLog) Poll(_ context.Context, wait time.Duration) kgo.Fetches {
	s.answer()
	s.round++
	s.wait = wait
	w := s.w
	var fetch kgo.Fetch
	ft := kgo.FetchTopic{Topic: w.names.Requests}
	n := 0
	for p := range int32(w.opts.Partitions) {
		if !s.assigned[p] || s.paused[p] {
			continue
		}
		log := w.reqs[p]
		var recs []*kgo.Record
		bytes := 0
		for off := s.pos[p]; off < int64(len(log)) && (bytes == 0 || bytes+len(log[off].value) <= fetchMaxPartitionBytes); off++ {
			r := log[off]
			bytes += len(r.value)
			recs = append(recs, &kgo.Record{Topic: w.names.Requests, Partition: p, Offset: off, Value: r.value, Timestamp: time.UnixMilli(r.at)})
		}
		if len(recs) == 0 {
			continue
		}
		last := recs[len(recs)-1].Offset
		s.pos[p] = last + 1
		if last > s.maxSeen[p] {
			s.maxSeen[p], s.maxSeenRound[p] = last, s.round
		}
		n += len(recs)
		ft.Partitions = append(ft.Partitions, kgo.FetchPartition{Partition: p, HighWatermark: int64(len(log)), Records: recs})
	}
	s.idle = n == 0
	if n > 0 {
		fetch.Topics = append(fetch.Topics, ft)
		return kgo.Fetches{fetch}
	}
	return nil
}

func (s *simTxLog) Begin() error {
	if s.open {
		return errors.New("simulated session: a transaction is already open")
	}
	s.open, s.produced, s.accepted = true, false, s.accepted[:0]
	s.w.faulted = ""
	return nil
}

func (s *simTxLog) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if !s.open {
		promise(r, errors.New("simulated session: produce outside a transaction"))
		return
	}
	s.produced = true
	if r.Topic == s.w.names.Snapshots {
		s.checkSnapshot(r)
	}
	s.queued = append(s.queued, pendingProduce{r, promise})
}

// checkSnapshot: a snapshot produced in the round whose poll first
// returned the last input it reflects was encoded on the loop, after that
// input was applied; the round's decisions waited behind its encoding.
func (s *simTxLog) checkSnapshot(r *kgo.Record) {
	var ev schemas.Event
	if err := schemas.Decode(r.Value, &ev); err != nil || ev.Snapshot == nil {
		s.w.problem("a snapshot record does not decode: %v", err)
		return
	}
	p, in := ev.Snapshot.Partition, ev.Snapshot.InputOffset
	if s.maxSeen[p] == in-1 && s.maxSeenRound[p] == s.round {
		ms := max(1, int64(len(r.Value))/encodeBytesPerMs)
		s.m.clock.extra += time.Duration(ms) * time.Millisecond
		s.w.problem("partition %d: snapshot at input %d (%d bytes) encoded on the loop: the round's decisions waited ~%d ms behind it", p, in, len(r.Value), ms)
	}
}

// answer has the broker answer every queued produce: records are batched
// per partition as the client does (bounded by ledgerd.BatchMaxBytes,
// before compression, none here), and a batch over the topic's
// max.message.bytes is refused whole. Injected: a failed produce.
func (s *simTxLog) answer() {
	w := s.w
	q := s.queued
	s.queued = nil
	canonical(q)
	type tp struct {
		topic string
		p     int32
	}
	var order []tp
	byTP := map[tp][]pendingProduce{}
	for _, pp := range q {
		k := tp{pp.r.Topic, pp.r.Partition}
		if _, ok := byTP[k]; !ok {
			order = append(order, k)
		}
		byTP[k] = append(byTP[k], pp)
	}
	for _, k := range order {
		bound := int(w.batchMax(k.topic))
		limit := brokerMaxMessageBytes
		if k.topic == w.names.Snapshots {
			limit = bus.SnapshotMaxBytes
		}
		var batch []pendingProduce
		size := batchOverhead
		flush := func() {
			if len(batch) == 0 {
				return
			}
			var err error
			switch {
			case s.fenced():
				err = kerr.InvalidProducerEpoch
			case size > limit:
				err = kerr.MessageTooLarge
				w.res.Stats.TooLarge++
			case w.chance(3):
				err = kerr.NotEnoughReplicas
				w.res.Stats.FailedProduces++
				w.faulted = "produce failed (injected)"
			}
			for _, pp := range batch {
				if err == nil {
					s.accepted = append(s.accepted, [2]any{pp.r.Topic, pp.r.Value})
					if pp.r.Topic == w.names.Decisions {
						w.decided(pp.r.Value)
					}
				}
				pp.promise(pp.r, err)
			}
			batch, size = batch[:0], batchOverhead
		}
		for _, pp := range byTP[k] {
			n := len(pp.r.Key) + len(pp.r.Value) + recordOverhead
			if n+batchOverhead > bound {
				flush()
				w.res.Stats.TooLarge++
				pp.promise(pp.r, kerr.MessageTooLarge)
				continue
			}
			if size+n > bound {
				flush()
			}
			batch = append(batch, pp)
			size += n
		}
		flush()
	}
}

func (s *simTxLog) Flush(context.Context) error {
	s.answer()
	return nil
}

func (s *simTxLog) End(_ context.Context, commit bool, offsets map[int32]int64) (bool, error) {
	s.answer()
	w := s.w
	revoked := s.revoked
	s.revoked = false
	defer s.rewindIfAborted()
	if !s.open {
		s.lastCommitted = false
		return false, nil
	}
	if s.fenced() {
		s.endTxn()
		return false, kerr.ProducerFenced
	}
	reason := ""
	switch {
	case !commit && s.produced && w.faulted == "":
		// A produce failed that no injected fault explains (a batch
		// the broker refused).
		reason = "asked to abort after a produce failed"
	case !commit:
		w.res.Stats.Aborts++
		s.endTxn()
		return false, nil
	case revoked:
		reason = "a revoke since the last End"
	case !s.produced && w.now < w.markersUntil:
		reason = "CONCURRENT_TRANSACTIONS: the transaction's first request was the offset commit, sent while the previous transaction's markers were written"
	}
	if reason != "" {
		w.res.Stats.Aborts++
		w.res.Stats.Aborted += len(s.accepted)
		if w.faulted == "" {
			w.problem("transaction aborted with no fault injected: %s", reason)
		}
		s.endTxn()
		return false, nil
	}
	for p, off := range offsets {
		if off < w.committedOff[p] {
			w.problem("partition %d: committed offset goes back from %d to %d", p, w.committedOff[p], off)
		}
	}
	if w.chance(5) {
		// The EndTxn's answer is lost: the outcome is unknown to the
		// member, whichever it was.
		w.faulted = "unknown outcome (injected)"
		w.res.Stats.UnknownOutcomes++
		ok := w.chance(500)
		if ok {
			s.commitTxn(offsets)
		} else {
			s.endTxn()
		}
		return false, kerr.RequestTimedOut
	}
	s.commitTxn(offsets)
	return true, nil
}

// lastCommitted says whether the last End committed; any other End rewinds
// the consumer to the committed offsets, as franz-go does.
func (s *simTxLog) rewindIfAborted() {
	if s.lastCommitted {
		return
	}
	for p := range s.assigned {
		s.pos[p] = s.w.committedOff[p]
	}
}

func (s *simTxLog) commitTxn(offsets map[int32]int64) {
	w := s.w
	w.res.Stats.Transactions++
	perKey := map[decKey]int{}
	for _, a := range s.accepted {
		topic, value := a[0].(string), a[1].([]byte)
		switch topic {
		case w.names.Decisions:
			var ev schemas.Event
			if err := schemas.Decode(value, &ev); err != nil || ev.Decision == nil {
				continue
			}
			k := decKey{ev.Decision.InputPartition, ev.Decision.InputOffset, ev.RequestID, ev.Attempt, 0}
			k.n = perKey[k]
			perKey[k]++
			if _, dup := w.committed[k]; dup {
				w.problem("decision %v committed twice", k)
			}
			w.committed[k] = &ev
		case w.names.Snapshots:
			var ev schemas.Event
			if err := schemas.Decode(value, &ev); err == nil && ev.Snapshot != nil {
				w.snaps = append(w.snaps, simSnapshot{part: ev.Snapshot.Partition, input: ev.Snapshot.InputOffset, state: ev.Snapshot.State, at: w.now})
				w.res.Stats.Snapshots++
			}
		case w.names.Requests:
			var ev schemas.Event
			if err := schemas.Decode(value, &ev); err == nil {
				w.appendRaw(int32(partitionOfKey(&ev, w.opts.Partitions)), value)
			}
		}
	}
	for p, off := range offsets {
		if int(p) < len(w.committedOff) {
			w.committedOff[p] = off
		}
	}
	s.open, s.accepted, s.lastCommitted = false, s.accepted[:0], true
	w.markersUntil = w.now + int64(3+w.rng.IntN(20))
}

// endTxn aborts the open transaction.
func (s *simTxLog) endTxn() {
	s.open, s.accepted, s.lastCommitted = false, s.accepted[:0], false
	s.w.markersUntil = s.w.now + int64(3+s.w.rng.IntN(20))
}

// partitionOfKey is where a transactional record of sluice.requests (a
// lease message; none in these runs) lands: by its scope.
func partitionOfKey(ev *schemas.Event, parts int) int {
	for i := range parts {
		if ev.Scope == scopeName(i) {
			return i
		}
	}
	return 0
}

func (s *simTxLog) Pause(p int32)  { s.paused[p] = true }
func (s *simTxLog) Resume(p int32) { delete(s.paused, p) }
func (s *simTxLog) Rewind(p int32, from int64) {
	s.pos[p] = from
}

// Append produces a Tick outside the transaction; it is sent when the
// round ends (sendAppends).
func (s *simTxLog) Append(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	s.appends = append(s.appends, r)
	promise(r, nil)
}

// sendAppends sends the round's Ticks, in partition order, after a network
// delay each.
func (s *simTxLog) sendAppends() {
	w := s.w
	sort.SliceStable(s.appends, func(i, j int) bool { return s.appends[i].Partition < s.appends[j].Partition })
	for _, r := range s.appends {
		p, b := r.Partition, r.Value
		key := fmt.Sprint("tick/", p)
		at := max(w.now+1+int64(w.rng.IntN(netMaxMs/2)), w.appendAt[key])
		w.appendAt[key] = at
		w.at(at, func() { w.appendRaw(p, b) })
	}
	s.appends = s.appends[:0]
}

// canonical orders the records of one answer by topic, partition and the
// input they come from, keeping the order of each input partition's
// records. The loop produces its partitions in map order; Kafka would keep
// whichever interleaving it got, and so may the simulation, but one seed
// must give one run, so the simulation picks one.
func canonical(q []pendingProduce) {
	type key struct {
		topic  string
		p, inP int32
	}
	keys := make(map[*kgo.Record]key, len(q))
	for _, pp := range q {
		k := key{topic: pp.r.Topic, p: pp.r.Partition}
		var ev schemas.Event
		if schemas.Decode(pp.r.Value, &ev) == nil {
			switch {
			case ev.Decision != nil:
				k.inP = ev.Decision.InputPartition
			case ev.Snapshot != nil:
				k.inP = ev.Snapshot.Partition
			}
		}
		keys[pp.r] = k
	}
	sort.SliceStable(q, func(i, j int) bool {
		a, b := keys[q[i].r], keys[q[j].r]
		if a.topic != b.topic {
			return a.topic < b.topic
		}
		if a.p != b.p {
			return a.p < b.p
		}
		return a.inP < b.inP
	})
}

// CatchUp rebuilds partition p as ledgerd's catch-up does: the newest
// committed snapshot, then the log up to upto.
func (s *simTxLog) CatchUp(_ context.Context, p int32, upto int64) (*ledger.Ledger, int, time.Time, error) {
	w := s.w
	w.res.Stats.Rebuilds++
	l := ledger.New(p, ledger.Config{})
	var at time.Time
	for i := len(w.snaps) - 1; i >= 0; i-- {
		if sn := w.snaps[i]; sn.part == p {
			r, err := ledger.Restore(sn.state)
			if err != nil {
				return nil, 0, time.Time{}, fmt.Errorf("restore snapshot of partition %d: %w", p, err)
			}
			l, at = r, time.UnixMilli(sn.at)
			break
		}
	}
	replayed := 0
	var ev schemas.Event
	var out []ledger.Output
	for off := l.Offset(); off < upto && off < int64(len(w.reqs[p])); off++ {
		r := w.reqs[p][off]
		if err := schemas.Decode(r.value, &ev); err != nil {
			ev = schemas.Event{Type: schemas.TypeTick}
		}
		out = l.Apply(r.at, off, &ev, out[:0])
		replayed++
	}
	return l, replayed, at, nil
}

func (s *simTxLog) Ping(context.Context) error { return nil }
func (s *simTxLog) Close()                     { s.closed.Store(true) }

// ---- the auditor ----

// final lets the run settle, then re-derives every partition from its
// committed log and compares.
func (w *loopSim) final() {
	for p := range w.opts.Partitions {
		l := ledger.New(int32(p), ledger.Config{})
		var ev schemas.Event
		var out []ledger.Output
		derived := map[decKey]*schemas.Event{}
		perKey := map[decKey]int{}
		reserves := map[actKey]bool{}
		for off := int64(0); off < w.committedOff[p]; off++ {
			r := w.reqs[p][off]
			if err := schemas.Decode(r.value, &ev); err != nil {
				ev = schemas.Event{Type: schemas.TypeTick}
			}
			if ev.Type == schemas.TypeReserveRequested {
				reserves[actKey{ev.RequestID, ev.Attempt}] = true
			}
			out = l.Apply(r.at, off, &ev, out[:0])
			for i := range out {
				d := out[i].Event()
				k := decKey{d.Decision.InputPartition, d.Decision.InputOffset, d.RequestID, d.Attempt, 0}
				k.n = perKey[k]
				perKey[k]++
				derived[k] = d
			}
		}
		for off := w.committedOff[p]; off < int64(len(w.reqs[p])); off++ {
			if schemas.Decode(w.reqs[p][off].value, &ev) == nil && ev.Type == schemas.TypeReserveRequested {
				w.problem("partition %d: reserve %s at offset %d never committed (committed offset %d of %d)", p, ev.RequestID, off, w.committedOff[p], len(w.reqs[p]))
				break
			}
		}
		keys := make([]decKey, 0, len(derived))
		for k := range derived {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].off < keys[j].off })
		for _, k := range keys {
			c, ok := w.committed[k]
			switch {
			case !ok:
				w.problem("partition %d: decision %v derived from the committed log was never committed", p, k)
			case !sameDecision(c, derived[k]):
				w.problem("partition %d: committed decision %v differs from the derived one: %s vs %s", p, k, c.Decision.Status, derived[k].Decision.Status)
			}
		}
		for k := range w.committed {
			if k.part == int32(p) && derived[k] == nil {
				w.problem("partition %d: committed decision %v is not derived from the committed log", p, k)
			}
		}
		decided := map[actKey]bool{}
		for k := range derived {
			decided[actKey{k.requestID, k.attempt}] = true
		}
		for k := range reserves {
			if !decided[k] {
				w.problem("partition %d: reserve %s/%d has no committed decision", p, k.requestID, k.attempt)
			}
		}
	}
	held := make(map[actKey][]schemas.Status, len(w.committed))
	for ck, c := range w.committed {
		k := actKey{ck.requestID, ck.attempt}
		held[k] = append(held[k], c.Decision.Status)
	}
	for k, st := range w.acted {
		found := false
		for _, c := range held[k] {
			found = found || c == st
		}
		if !found {
			w.problem("a gateway acted on %s of %s/%d, which the committed log does not hold", st, k.requestID, k.attempt)
		}
	}
	w.res.Stats.Committed = len(w.committed)
}

// sameDecision compares two decisions but for their event ids and
// producers' clocks.
func sameDecision(a, b *schemas.Event) bool {
	x, y := *a, *b
	x.ID, y.ID, x.ProducedAtMs, y.ProducedAtMs = "", "", 0, 0
	return reflect.DeepEqual(x, y)
}
