// Package ledgerd runs the ledger state machine on Kafka: a consumer-group
// member on sluice.requests whose single poll loop is the one writer of every
// partition it owns. Decisions are produced in the same Kafka transaction as
// the applied input offsets (GroupTransactSession), so a crash or a fenced
// zombie can never publish a decision twice or lose one: whatever did not
// commit is re-derived, identically, by the next owner. Snapshots, encoded
// off the loop, commit in that transaction or a later one.
package ledgerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// DefaultCommitInterval is Config.CommitInterval's default and
// `sluice ledger --commit-interval`'s.
const DefaultCommitInterval = time.Second

// Config configures the ledger service.
type Config struct {
	Brokers []string
	Group   string    // consumer group, default "sluice-ledger"
	Node    string    // unique per process; part of the transactional id
	Topics  bus.Names // zero value = bus.DefaultNames()
	// SnapshotEvery writes a partition snapshot after this many applied
	// events (default 10,000); SnapshotInterval after this much time with
	// at least one applied event (default 30s).
	SnapshotEvery    int
	SnapshotInterval time.Duration
	// SnapshotPlain writes a snapshot's state as plain JSON, as ledgers
	// before the gzipped format did (`sluice ledger --snapshot-plain`).
	// By default it is gzipped off the loop, about 18 times smaller on a
	// busy partition; every ledger since reads both. It is for a rolling
	// upgrade from a ledger that reads only plain snapshots: run the new
	// one plain until no old one is left, then without it
	// (docs/ledger-service.md, The snapshot's format).
	SnapshotPlain bool
	// TickMinGap bounds how often Tick records are appended to one
	// partition (default 5ms).
	TickMinGap time.Duration
	// SessionTimeout is how long the group waits for a silent member before
	// giving its partitions to another (default 6s, the broker's minimum).
	// TransactionTimeout is how long an open transaction of a dead member
	// holds back read_committed readers of its partitions (default 6s).
	// Together they bound the takeover time after a crash.
	SessionTimeout     time.Duration
	TransactionTimeout time.Duration
	// CommitInterval is how long a transaction stays open while rounds
	// produce their decisions into it (default 1s; 0 or less than a
	// millisecond takes the default). Decisions are produced as soon as
	// they are decided and gateways act on them then (read_uncommitted),
	// so the commit is off the decision path: it bounds how much a crash
	// makes the next owner re-derive and how late read_committed readers
	// (sink, views, replay) see a decision. Yet every commit still holds
	// back the decisions of a few milliseconds (the loop waits for End,
	// and the next transaction's first produce waits for the previous
	// one's markers), so the interval sets the share of requests that
	// meet one: 100ms put a commit in the way of several percent of them,
	// which was the p99 of the admission round trip. See
	// docs/ledger-service.md, The commit off the decision path.
	CommitInterval time.Duration
	// Health, if set, is updated with the member's liveness (serve it as
	// /healthz); New makes one otherwise. HealthStall is how long decided
	// work may wait without a commit before Health fails (default
	// DefaultHealthStall, at least twice CommitInterval).
	Health      *Health
	HealthStall time.Duration
	// RecreateAttempts bounds how often in a row the member tries to
	// recreate a session that a fatal error made unusable (default 5,
	// with backoff from 0.5 s to 5 s); after that Loop returns
	// ErrSessionUnusable and the process should exit, so that a
	// supervisor restarts it. AbortsMax is how many transactions in a
	// row may end without committing (aborts, failed Begins or aborts of
	// an unknown outcome) before the member treats its session as
	// unusable (default 20): no error that classify does not know can
	// wedge it either.
	RecreateAttempts int
	AbortsMax        int
	// PeerHeartbeat is how often the member appends a heartbeat to the
	// members topic (default DefaultPeerHeartbeat, 100 ms); PeerDeadAfter
	// how long a peer may be silent, counted in our own heartbeats in the
	// log, before this member fences its transactions and removes it from
	// the group (default DefaultPeerDeadAfter, 800 ms; negative: never, and
	// a crash is found after SessionTimeout only). See liveness.go and
	// docs/ledger-service.md, Takeover.
	PeerHeartbeat time.Duration
	PeerDeadAfter time.Duration
	Log           *slog.Logger
	Registerer    prometheus.Registerer
}

// ErrSessionUnusable is returned by Loop when a fatal error made the
// transactional session unusable and recreating it failed
// Config.RecreateAttempts times: the member has left the group (its
// partitions go to another) and should exit non-zero.
var ErrSessionUnusable = errors.New("ledger session unusable")

func (c *Config) defaults() error {
	if len(c.Brokers) == 0 {
		return errors.New("ledger: no Kafka brokers given (set --brokers or SLUICE_KAFKA_BROKERS)")
	}
	if c.Node == "" {
		return errors.New("ledger: a node id is required (--node)")
	}
	c.Topics = c.Topics.OrDefault()
	if c.Group == "" {
		c.Group = "sluice-ledger"
	}
	if c.SnapshotEvery <= 0 {
		c.SnapshotEvery = 10000
	}
	if c.SnapshotInterval <= 0 {
		c.SnapshotInterval = 30 * time.Second
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 6 * time.Second
	}
	if c.TransactionTimeout <= 0 {
		c.TransactionTimeout = 6 * time.Second
	}
	if c.CommitInterval < time.Millisecond {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.CommitInterval > c.TransactionTimeout/2 {
		// The broker aborts a transaction open for longer than its
		// timeout; leave the commit half of it.
		return fmt.Errorf("ledger: commit interval %v must be at most half the transaction timeout %v", c.CommitInterval, c.TransactionTimeout)
	}
	if c.HealthStall <= 0 {
		c.HealthStall = max(DefaultHealthStall, 2*c.CommitInterval)
	}
	if c.HealthStall < 2*c.CommitInterval {
		return fmt.Errorf("ledger: health stall bound %v must be at least twice the commit interval %v", c.HealthStall, c.CommitInterval)
	}
	if c.Health == nil {
		c.Health = NewHealth()
	}
	c.Health.mu.Lock()
	c.Health.stallAfter = c.HealthStall
	c.Health.mu.Unlock()
	if c.RecreateAttempts <= 0 {
		c.RecreateAttempts = 5
	}
	if c.AbortsMax <= 0 {
		c.AbortsMax = 20
	}
	if c.PeerHeartbeat <= 0 {
		c.PeerHeartbeat = DefaultPeerHeartbeat
	}
	if c.PeerDeadAfter == 0 {
		c.PeerDeadAfter = DefaultPeerDeadAfter
	}
	if c.PeerDeadAfter > 0 && c.PeerDeadAfter < 2*c.PeerHeartbeat {
		return fmt.Errorf("ledger: peer dead-after %v must be at least twice the peer heartbeat %v", c.PeerDeadAfter, c.PeerHeartbeat)
	}
	if c.TickMinGap <= 0 {
		c.TickMinGap = 5 * time.Millisecond
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.DefaultRegisterer
	}
	return nil
}

// partState is one owned partition: its ledger, the outputs of applied
// inputs that no transaction has committed yet, and bookkeeping for ticks
// and snapshots.
type partState struct {
	l *ledger.Ledger
	// pending holds, in order, every record (decisions, snapshots) derived
	// from inputs below l.Offset() that is not yet committed. An aborted
	// transaction leaves them here and the next one produces them again:
	// the state after a round is a pure function of the inputs, so the
	// outputs are the ones any owner would produce, byte for byte.
	pending []output
	// produced counts the records of pending already produced in the
	// open transaction; the rest are produced by the next round.
	produced int
	// pendingInputs counts the inputs applied since the last commit.
	pendingInputs int
	// ungranted is the ledger's Stats.UngrantedUsage last counted in the
	// metric (a rebuilt partition starts from its replayed count).
	ungranted      int64
	sinceSnapshot  int
	lastSnapshot   time.Time
	tickInFlight   bool
	lastTickSentAt time.Time
	// encoding: a snapshot of this state is being encoded off the loop.
	encoding bool
}

// output is a record to produce in the partition's next transaction.
type output struct {
	topic     string
	partition int32
	key       []byte
	value     []byte
	snapshot  bool
	// lease: a lease message, an input of a partition of sluice.requests
	// (lease.go); its transaction commits at once (commitDue).
	lease bool
	// traceID is the request id of a decision while a stage trace is
	// on (bench only), else empty.
	traceID string
}

// Service is a running ledger member.
type Service struct {
	cfg Config
	// tx is the session (txlog.go), opened by dial; clock is the
	// member's time.
	tx    TxLog
	dial  func(drop func(partitions []int32)) (TxLog, error)
	clock Clock
	// sessClient is the production session's client, for the liveness
	// goroutines (the poll loop replaces the session on recreate).
	sessClient atomic.Pointer[kgo.Client]
	tickProd   *kgo.Client // non-transactional: see ticks (production only)
	m          *metrics
	log        *slog.Logger
	health     *Health
	// fatal, the poll loop's, is the first fatal error (classify) of the
	// session: the loop recreates the session before anything else.
	// abortsInRow counts transactions ended without a commit since the
	// last commit (Config.AbortsMax).
	// recreatesInRow counts sessions recreated since the last commit.
	// uncommitted says that a transaction ended without committing and
	// no commit or rebuild has happened since: the member may have
	// thrown its outputs away to derive them again, and must not look
	// idle, and live, for that (Health).
	fatal          error
	abortsInRow    int
	recreatesInRow int
	uncommitted    bool
	// decisionParts is the partition count of sluice.decisions, read at
	// start: a decision goes to bus.DecisionPartition of its node.
	decisionParts int32
	// requestParts is the partition count of sluice.requests: a lease
	// message goes to the partition its key hashes to (lease.go).
	requestParts int32

	// parts is touched only by the poll loop, except that rebalance
	// callbacks (which franz-go may run on another goroutine) record
	// partitions to drop in dropped, under mu. revokeSeen, under mu, says
	// that the session saw a revoke or loss (franz-go calls it with no
	// partitions too, e.g. when the connection to the group is lost) since
	// the last End: franz-go aborts the transaction of the next End then.
	// gen, under mu, numbers the sessions: a callback of a session
	// closed after a fatal error (it may still run during Close) must
	// not drop partitions of the next one.
	parts      map[int32]*partState
	mu         sync.Mutex
	dropped    map[int32]bool
	revokeSeen bool
	gen        uint64

	// catching maps a partition being rebuilt in the background to the
	// token of its rebuild; rebuilt delivers finished rebuilds. Both are
	// the poll loop's.
	catching   map[int32]uint64
	rebuildSeq uint64
	rebuilt    chan rebuildResult

	// The open transaction, if any: when it began, whether a partition
	// was revoked or lost since (franz-go will abort it, so end it now),
	// and the first produce error of its records.
	inTxn      bool
	txnBegan   time.Time
	txnDropped bool
	// txnLease: the open transaction holds a lease message (lease.go),
	// so it commits at the end of this round instead of after
	// CommitInterval (commitDue).
	txnLease   bool
	perrMu     sync.Mutex
	produceErr error

	// encoded collects, under encMu, the snapshots encoded off the loop
	// (snapshot) for the loop to install.
	encMu   sync.Mutex
	encoded []encodedSnapshot

	// Scratch reused by every round of the poll loop.
	ev   schemas.Event
	outs []ledger.Output
	enc  decisionEncoder // the loop's decision encoder (encode.go)

	// trace, when set (`sluice bench ledger-kafka --stages`), is told when
	// each reserve was polled and when its decision was acknowledged;
	// polledAt is the end of the round's poll.
	trace *stageTrace
	// traceFirst: the next produce is the first after an End (trace).
	traceFirst bool
	polledAt   time.Time

	// lastObserve is when Round last sampled the gauges; qbuf its scratch.
	lastObserve time.Time
	qbuf        []ledger.QueueStat
}

// Run runs the ledger member until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Loop(ctx)
}

// New connects and joins the group (the first poll does the join).
func New(ctx context.Context, cfg Config) (*Service, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	// Check reachability with a plain client first so the error is clear.
	probe, err := bus.NewClient(ctx, cfg.Brokers, 10*time.Second)
	if err != nil {
		return nil, err
	}
	decisionParts, err := bus.PartitionCount(ctx, probe, cfg.Topics.Decisions)
	var requestParts int32
	if err == nil {
		requestParts, err = bus.PartitionCount(ctx, probe, cfg.Topics.Requests)
	}
	probe.Close()
	if err != nil {
		return nil, err
	}

	tickProd, err := kgo.NewClient(bus.Opts(cfg.Brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.RetryBackoffFn(bus.RetryBackoff))...)
	if err != nil {
		return nil, fmt.Errorf("ledger tick producer: %w", err)
	}
	s := newService(cfg, Medium{Clock: wallClock{}, DecisionPartitions: decisionParts, RequestPartitions: requestParts})
	s.tickProd = tickProd
	s.dial = s.kgoDial
	if cfg.PeerDeadAfter > 0 {
		// The members topic, where an installation created before it
		// existed lacks it (`sluice topics ensure` creates it too).
		ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := ensureMembersTopic(ectx, cfg.Brokers, cfg.Topics)
		cancel()
		if err != nil {
			s.log.Warn("peer liveness off: members topic unavailable; a crashed member is found after the session timeout", "topic", cfg.Topics.Members, "err", err)
			s.cfg.PeerDeadAfter = -1
		}
	}
	if err := s.openSession(); err != nil {
		tickProd.Close()
		return nil, err
	}
	return s, nil
}

// newService makes a member over m, with no session open yet.
func newService(cfg Config, m Medium) *Service {
	s := &Service{cfg: cfg, log: cfg.Log, health: cfg.Health, parts: map[int32]*partState{}, dropped: map[int32]bool{},
		catching: map[int32]uint64{}, rebuilt: make(chan rebuildResult, 64), decisionParts: m.DecisionPartitions,
		requestParts: m.RequestPartitions, dial: m.Dial, clock: m.Clock}
	s.m = newMetrics(cfg.Registerer)
	return s
}

// openSession creates the transactional group session (it joins at the
// first poll), as a new generation: callbacks of an earlier session are
// ignored from now on.
func (s *Service) openSession() error {
	s.mu.Lock()
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	drop := func(partitions []int32) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.gen != gen {
			return
		}
		s.revokeSeen = true
		for _, p := range partitions {
			s.dropped[p] = true
		}
	}
	tx, err := s.dial(drop)
	if err != nil {
		return err
	}
	s.tx = tx
	return nil
}

// kgoDial opens the production session: a franz-go GroupTransactSession
// with the client settings that docs/ledger-service.md measures.
func (s *Service) kgoDial(dropped func(partitions []int32)) (TxLog, error) {
	cfg := s.cfg
	drop := func(_ context.Context, _ *kgo.Client, m map[string][]int32) { dropped(m[cfg.Topics.Requests]) }
	sess, err := kgo.NewGroupTransactSession(bus.Opts(cfg.Brokers,
		kgo.TransactionalID(transactionalID(cfg.Node)),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics.Requests),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.FetchMaxWait(10*time.Millisecond), // the broker minimum franz-go accepts
		kgo.ProducerLinger(0),
		// Unlingered decision batches are a few records: snappy (franz-go's
		// default) cost 0.9–2.1 µs per decision to compress and undo for
		// 48–265 bytes saved (BenchmarkDecisionBatchSnappy), as much CPU
		// as encoding the decision (docs/ledger-service.md, Client settings).
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		// A produce that the broker answers CONCURRENT_TRANSACTIONS (the
		// previous transaction's markers still being written) is retried
		// by franz-go only after a metadata refresh, and refreshes are at
		// most one per MetadataMinAge: at the default 5s that stalled
		// every decision for up to 5s (docs/ledger-service.md).
		kgo.MetadataMinAge(10*time.Millisecond),
		kgo.ProducerBatchMaxBytesFn(batchMaxBytes(cfg.Topics)),
		kgo.SessionTimeout(cfg.SessionTimeout),
		// Survivors see the rebalance that a peer's eviction starts
		// (liveness.go) at their next heartbeat: 100 ms of the 2 s
		// takeover budget (docs/ledger-service.md, Takeover).
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.RebalanceTimeout(10*time.Second),
		kgo.OnPartitionsRevoked(drop),
		kgo.OnPartitionsLost(drop),
		// At most 1 s between retries instead of franz-go's 5 s: after a
		// broker restart the rejoin, the JoinGroup and the InitProducerID
		// each waited out a backoff grown during the outage or the
		// coordinators' loading (bus.RetryBackoff; docs/ledger-service.md,
		// Broker restart).
		kgo.RetryBackoffFn(bus.RetryBackoff),
	)...)
	if err != nil {
		return nil, fmt.Errorf("ledger transactional session: %w", err)
	}
	s.sessClient.Store(sess.Client())
	return &kgoTxLog{sess: sess, tickProd: s.tickProd, brokers: cfg.Brokers, names: cfg.Topics, log: s.log}, nil
}

// brokerMaxMessageBytes is Kafka's default max.message.bytes, which every
// topic but sluice.snapshots keeps.
const brokerMaxMessageBytes = 1_000_012

// batchMaxBytes bounds the session's record batches per topic: a snapshot
// is one record of up to bus.SnapshotMaxBytes (its topic allows that much),
// while a batch of decisions must stay within the decisions topic's default
// limit. franz-go bounds the batch before compression, so with one bound of
// bus.SnapshotMaxBytes for every topic, a round that decided more than about
// 1 MB of decisions for one gateway (a backlog after a takeover or an
// outage) was refused as MESSAGE_TOO_LARGE unless compression happened to
// bring it under the limit, and the ledger aborted and produced it again
// forever (seen with compression off; docs/ledger-service.md).
func batchMaxBytes(n bus.Names) func(topic string) int32 {
	return func(topic string) int32 {
		if topic == n.Snapshots {
			return bus.SnapshotMaxBytes
		}
		return brokerMaxMessageBytes
	}
}

// Close leaves the group.
func (s *Service) Close() {
	if s.tx != nil {
		s.tx.Close()
	}
	if s.tickProd != nil {
		s.tickProd.Close()
	}
}

// Health returns the member's liveness (Config.Health).
func (s *Service) Health() *Health { return s.health }

// Loop polls, applies and commits until ctx ends.
//
// A round is: poll, rebuild newly assigned partitions (outside any
// transaction), apply every record to its partition's ledger, and — only if
// some partition has outputs to publish — one transaction that produces them
// and commits exactly the applied input offsets. A round whose inputs decide
// nothing (reconciles, most ticks) opens no transaction: its offsets ride on
// the next one, and a crash before then only makes the next owner re-derive
// the same nothing. That also keeps a transaction's first request a produce,
// never the offset commit: on a Kafka 4 broker (transaction version 2) a
// TxnOffsetCommit sent while the previous transaction's markers are still
// being written fails with CONCURRENT_TRANSACTIONS, which franz-go treats as
// abortable, whereas a produce in that window is retried by the broker and
// the client until the previous transaction is complete.
func (s *Service) Loop(ctx context.Context) (err error) {
	stopLiveness := s.startLiveness(ctx)
	// Only a clean stop says goodbye: a member giving up on an unusable
	// session may leave a transaction open, which a peer's fence aborts.
	defer func() { stopLiveness(err == nil) }()
	for {
		if done, err := s.Round(ctx); done {
			return err
		}
	}
}

// Round runs one round of the loop (Loop): it polls, applies, produces
// and, when due, commits. It reports done when the loop is to stop: ctx
// ended, the session closed, or recreating an unusable session failed
// (err). The pipeline simulation calls it one round at a time.
func (s *Service) Round(ctx context.Context) (done bool, err error) {
	if ctx.Err() != nil {
		s.endOnExit()
		return true, nil
	}
	if s.fatal != nil {
		if err := s.recreate(ctx); err != nil {
			return true, err
		}
		return false, nil
	}
	fs := s.tx.Poll(ctx, s.pollWait())
	if s.trace != nil {
		s.polledAt = s.clock.Now()
	}
	if fs.IsClientClosed() || ctx.Err() != nil {
		s.endOnExit()
		return true, nil
	}
	fs.EachError(func(t string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			s.log.Warn("ledger fetch", "topic", t, "partition", p, "err", err)
		}
		if classify(err) == errFatal {
			s.noteErr("fetch", err) // e.g. the group refused us: recreate
		}
	})
	s.applyDrops(ctx)
	s.installRebuilt()
	s.installSnapshots()
	if fs.NumRecords() > 0 {
		s.rebuildNew(ctx, fs)
		if err := s.apply(fs); err != nil {
			// Only a programmer error (an output that does not
			// encode) gets here; the state is suspect.
			s.log.Error("ledger apply failed; rebuilding every partition", "err", err)
			s.rewindAll()
		}
	}
	if s.hasUnproduced() {
		s.produce(ctx)
	}
	s.health.working(s.inTxn || s.hasUnproduced() || s.uncommitted, s.clock.Now())
	if s.inTxn && s.commitDue() {
		if done := s.commit(ctx); !done && ctx.Err() != nil {
			return true, nil
		}
	}
	s.ticks(ctx)
	if now := s.clock.Now(); now.Sub(s.lastObserve) >= 500*time.Millisecond {
		// Gauges are sampled, not kept exact: walking the queues on
		// every round would tax the hot loop.
		s.lastObserve = now
		for p, ps := range s.parts {
			s.qbuf = s.m.observe(p, ps.l, now.Sub(ps.lastSnapshot), s.qbuf)
		}
	}
	return false, nil
}

// rebuildNew starts, in the background, the rebuild of every partition of
// fs that has records but no state (newly assigned, or thrown away after an
// unknown transaction outcome). The partition is paused and rewound to its
// first fetched record meanwhile, and, having no state, none of it is
// committed: the partitions already owned go on deciding, and a long replay
// of one partition can neither stall them nor time out their transaction.
func (s *Service) rebuildNew(ctx context.Context, fs kgo.Fetches) {
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		p := fp.Partition
		if len(fp.Records) == 0 || s.parts[p] != nil || s.catching[p] != 0 {
			return
		}
		from := fp.Records[0].Offset
		s.tx.Pause(p)
		s.tx.Rewind(p, from)
		s.rebuildSeq++
		token := s.rebuildSeq
		s.catching[p] = token
		tx, clock := s.tx, s.clock
		clock.Go(func() {
			start := clock.Now()
			var r caughtUp
			var err error
			r.l, r.replayed, r.snapshotAt, err = tx.CatchUp(ctx, p, from)
			select {
			case s.rebuilt <- rebuildResult{p: p, token: token, r: r, err: err, took: clock.Now().Sub(start)}:
			case <-ctx.Done():
			}
		})
	})
}

// rebuildResult is a finished background rebuild of partition p.
type rebuildResult struct {
	p     int32
	token uint64
	r     caughtUp
	err   error
	took  time.Duration
}

// installRebuilt installs the partitions whose rebuild finished and resumes
// fetching them. A result for a partition that was revoked, or whose rebuild
// was invalidated since, is dropped.
func (s *Service) installRebuilt() {
	for {
		var res rebuildResult
		select {
		case res = <-s.rebuilt:
		default:
			return
		}
		if s.catching[res.p] != res.token {
			continue
		}
		delete(s.catching, res.p)
		s.tx.Resume(res.p)
		if res.err != nil {
			// Resumed from its first unapplied record, so it is
			// fetched, and rebuilt, again.
			s.log.Warn("catch up failed; retrying", "partition", res.p, "err", res.err)
			continue
		}
		s.m.catchUp.Observe(res.took.Seconds())
		s.m.rebuilds.Inc()
		s.log.Info("partition rebuilt; deciding", "partition", res.p, "took", res.took, "replayed", res.r.replayed)
		s.uncommitted = false // it reads the broker again; what it must decide shows as pending
		// The snapshot clock continues from the snapshot that was read:
		// a rebuild does not postpone the next snapshot, so the tail a
		// later takeover replays stays bounded by the snapshot settings.
		last := res.r.snapshotAt
		if last.IsZero() {
			last = s.clock.Now().Add(-s.cfg.SnapshotInterval)
		}
		s.parts[res.p] = &partState{l: res.r.l, sinceSnapshot: res.r.replayed, lastSnapshot: last, ungranted: res.r.l.Stats().UngrantedUsage}
	}
}

// cancelRebuilds invalidates every background rebuild and resumes its
// partition, which is then fetched and rebuilt again from where the
// consumer now stands (after an abort franz-go rewinds every partition to
// its committed offset, which may not be where the rebuild stops).
func (s *Service) cancelRebuilds() {
	for p := range s.catching {
		s.tx.Resume(p)
	}
	clear(s.catching)
}

// apply applies every fetched record to its partition's ledger and queues
// the outputs, and the snapshots that are due, as the partition's pending
// records.
func (s *Service) apply(fs kgo.Fetches) error {
	var applyErr error
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		ps := s.parts[fp.Partition]
		if applyErr != nil || len(fp.Records) == 0 || ps == nil {
			return
		}
		for _, r := range fp.Records {
			if r.Offset < ps.l.Offset() {
				continue // already applied (replayed in catch-up, or redelivered after an abort)
			}
			if err := decodeInput(r.Value, &s.ev); err != nil {
				s.badInput(fp.Partition, r.Offset, err)
			}
			if s.ev.Type == schemas.TypeTick && s.ev.Node == s.cfg.Node {
				ps.tickInFlight = false
			}
			s.outs = ps.l.Apply(r.Timestamp.UnixMilli(), r.Offset, &s.ev, s.outs[:0])
			if s.ev.Type == schemas.TypeConfigChanged {
				s.configApplied(fp.Partition, r.Offset, ps.l.ConfigError()) // configauth.go
			}
			if s.trace != nil && s.ev.Type == schemas.TypeReserveRequested {
				s.trace.polled(s.ev.RequestID, r.Timestamp, s.polledAt)
			}
			ps.pendingInputs++
			ps.sinceSnapshot++
			for i := range s.outs {
				d := &s.outs[i]
				s.m.decision(d)
				b, err := s.enc.encode(d) // encode.go: no allocation but the id
				if err != nil {
					applyErr = fmt.Errorf("encode decision of partition %d offset %d: %w", fp.Partition, r.Offset, err)
					return
				}
				o := output{topic: s.cfg.Topics.Decisions, partition: bus.DecisionPartition(d.Node, s.decisionParts), key: s.enc.key(d.Scope), value: b}
				if s.trace != nil {
					o.traceID = d.RequestID
				}
				ps.pending = append(ps.pending, o)
			}
			// Capacity learned from this input (ledger/learn.go) goes out
			// in the same transaction, after its decisions, so that replay
			// re-derives and checks it like a decision.
			for i := range ps.l.LearnedOutputs() {
				lo := &ps.l.LearnedOutputs()[i]
				b, err := s.enc.encodeEvent(lo.Event())
				if err != nil {
					applyErr = fmt.Errorf("encode learned capacity of partition %d offset %d: %w", fp.Partition, r.Offset, err)
					return
				}
				ps.pending = append(ps.pending, output{topic: s.cfg.Topics.Decisions,
					partition: bus.DecisionPartition("", s.decisionParts), key: []byte(lo.Scope), value: b})
			}
			if applyErr = s.leaseOutputs(ps, fp.Partition, r.Offset, r.Timestamp.UnixMilli()); applyErr != nil {
				return
			}
		}
		if n := ps.l.Stats().UngrantedUsage; n > ps.ungranted {
			s.m.ungrantedUsage.Add(float64(n - ps.ungranted))
			ps.ungranted = n
		}
		s.m.lagOf(fp.Partition).Set(float64(fp.HighWatermark - ps.l.Offset())) // encode.go
		if ps.sinceSnapshot >= s.cfg.SnapshotEvery || (ps.sinceSnapshot > 0 && s.clock.Now().Sub(ps.lastSnapshot) >= s.cfg.SnapshotInterval) {
			s.snapshot(fp.Partition, ps)
		}
	})
	return applyErr
}

func (s *Service) hasUnproduced() bool {
	for _, ps := range s.parts {
		if ps.produced < len(ps.pending) {
			return true
		}
	}
	return false
}

// produce sends every partition's pending records not yet produced into
// the open transaction, beginning one if none is open. It does not wait for
// the broker: with no linger the records go out at once, and a gateway acts
// on a decision as soon as the broker has it (docs/ledger-service.md,
// Acting on produced decisions). A produce error is kept for commit, which
// then aborts.
//
// A transaction therefore always begins with a produce, never with the
// offset commit: on a Kafka 4 broker (transaction version 2) a
// TxnOffsetCommit sent while the previous transaction's markers are still
// being written fails with CONCURRENT_TRANSACTIONS, which franz-go treats
// as abortable, whereas a produce in that window is retried.
func (s *Service) produce(ctx context.Context) {
	if !s.inTxn {
		// A revoke since this round's applyDrops would abort the
		// transaction about to begin; clear it first.
		s.applyDrops(ctx)
		if err := s.tx.Begin(); err != nil {
			// franz-go fails Begin when an earlier transaction is still
			// open, or when its producer id has an error it cannot
			// recover from (a fenced producer: D1, where treating that
			// as transient kept a fenced member on its partitions for
			// minutes); the latter is fatal and recreates the session.
			s.m.aborts.Inc()
			if s.noteErr("begin transaction", err) == errFatal {
				return
			}
			s.log.Warn("begin transaction", "err", err)
			s.endedUncommitted(err)
			s.rewindAll()
			s.abortOpen(ctx)
			return
		}
		s.inTxn, s.txnBegan, s.txnDropped, s.txnLease = true, s.clock.Now(), false, false
		s.perrMu.Lock()
		s.produceErr = nil
		s.perrMu.Unlock()
	}
	first := s.trace != nil && s.traceFirst
	s.traceFirst = false
	for _, ps := range s.parts {
		for _, o := range ps.pending[ps.produced:] {
			promise := s.promise
			if o.traceID != "" {
				promise = s.trace.promise(o.traceID, s.promise)
			}
			if first {
				promise, first = s.trace.firstProduce(s.clock.Now(), promise), false
			}
			if s.trace != nil && o.snapshot {
				promise = s.trace.snapshotProduce(s.clock.Now(), len(o.value), promise)
			}
			s.tx.Produce(ctx, &kgo.Record{Topic: o.topic, Partition: o.partition, Key: o.key, Value: o.value}, promise)
			s.txnLease = s.txnLease || o.lease
		}
		ps.produced = len(ps.pending)
	}
}

// promise notes the first produce error of the open transaction.
func (s *Service) promise(_ *kgo.Record, err error) {
	if err == nil {
		return
	}
	s.perrMu.Lock()
	if s.produceErr == nil {
		s.produceErr = err
	}
	s.perrMu.Unlock()
}

// commitDue says whether the open transaction should end now: it has been
// open for CommitInterval, it holds a lease message, a produce failed (it
// can only abort), or a partition was revoked or lost (franz-go aborts it;
// the sooner, the sooner the partition's next owner may start).
//
// A lease message commits at once because its reader is a ledger, which
// reads sluice.requests read_committed: it sees the message only after the
// commit, and until then the open transaction holds back the last stable
// offset of the partition it went to, so every reserve of that partition
// waits too. With the commit after CommitInterval (1 s) each lease round
// trip took two commits (the holder's request, the budget partition's
// grant) and stalled both partitions meanwhile: a split scope decided
// 26 a second with a p50 of 3 s (ledger/budget/README.md, Hot scopes).
func (s *Service) commitDue() bool {
	s.perrMu.Lock()
	failed := s.produceErr != nil
	s.perrMu.Unlock()
	return failed || s.txnDropped || s.txnLease || s.clock.Now().Sub(s.txnBegan) >= s.cfg.CommitInterval
}

// endOnExit ends a transaction left open when the loop stops: it commits
// what was decided if it can still do so within a couple of seconds, so a
// clean shutdown leaves the next owner nothing to re-derive.
func (s *Service) endOnExit() {
	if !s.inTxn {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.commit(ctx)
}

// commit ends the open transaction: it waits for its records, commits each
// owned partition's applied input offset with them and tries to commit. It
// reports whether the transaction committed.
//
// A clean abort (a produce failed, the broker refused the offset commit, a
// rebalance began) keeps every partition's state and pending records: the
// next round produces them again. Only an unknown outcome (End itself
// failed, so the transaction may have committed) or a fenced producer
// throws the state away and rebuilds it from the committed log.
func (s *Service) commit(ctx context.Context) bool {
	// Every pending record must be in the transaction that commits the
	// offsets of the inputs it was derived from.
	s.produce(ctx)
	if !s.inTxn {
		return false
	}
	s.inTxn = false
	began := s.clock.Now()
	offsets := make(map[int32]int64, len(s.parts))
	for p, ps := range s.parts {
		offsets[p] = ps.l.Offset()
	}
	flushErr := s.tx.Flush(ctx)
	s.perrMu.Lock()
	produceErr := errors.Join(s.produceErr, flushErr)
	s.perrMu.Unlock()
	revoked := s.takeRevoke()
	committed, err := s.tx.End(ctx, produceErr == nil, offsets)
	s.m.commitSeconds.Observe(s.clock.Now().Sub(began).Seconds())
	if s.trace != nil {
		s.trace.committed(began, s.clock.Now())
		s.traceFirst = true
	}
	if produceErr != nil {
		s.noteErr("produce", produceErr)
	}
	switch {
	case err == nil && committed:
		s.m.transactions.Inc()
		s.abortsInRow, s.recreatesInRow, s.uncommitted = 0, 0, false
		s.health.committed(s.clock.Now())
		for p, ps := range s.parts {
			for _, o := range ps.pending {
				if o.snapshot {
					s.m.snapshots.Inc()
					s.m.snapBytes.WithLabelValues(strconv.Itoa(int(p))).Set(float64(len(o.value)))
				}
			}
			s.m.applied.Add(float64(ps.pendingInputs))
			ps.pending, ps.produced, ps.pendingInputs = ps.pending[:0], 0, 0
		}
		return true
	case err == nil:
		s.m.aborts.Inc()
		// franz-go aborts without an error when partitions were revoked
		// or lost during the transaction (a rebalance) or the broker
		// refused the offset commit; say which, the remedies differ.
		// SLUICE_KAFKA_LOG=info shows franz-go's own account
		// ("transaction session ending; was_failed: …").
		s.mu.Lock()
		rebalanced := revoked || s.txnDropped || len(s.dropped) > 0
		s.mu.Unlock()
		s.log.Warn("ledger transaction aborted; producing its records again in the next one", "produce_err", produceErr, "rebalance", rebalanced)
		s.endedUncommitted(errors.Join(errors.New("transaction aborted"), produceErr))
		for _, ps := range s.parts {
			ps.reproduce()
		}
		s.cancelRebuilds() // the abort rewound the partitions they were to resume
		return false
	default:
		s.m.aborts.Inc()
		s.log.Warn("ledger transaction outcome unknown; rebuilding partition state", "err", errors.Join(produceErr, err), "class", classify(err))
		s.rewindAll()
		if s.noteErr("end transaction", err) == errFatal {
			return false // the session is recreated; its transaction dies with it
		}
		s.endedUncommitted(err)
		// The transaction may still be open, and Begin would refuse.
		s.abortOpen(ctx)
		return false
	}
}

// reproduce marks every pending record as not produced, after an abort,
// keeping only the newest pending snapshot (an older one was superseded
// while it was in the aborted transaction).
func (ps *partState) reproduce() {
	last := -1
	for i, o := range ps.pending {
		if o.snapshot {
			last = i
		}
	}
	kept := ps.pending[:0]
	for i, o := range ps.pending {
		if !o.snapshot || i == last {
			kept = append(kept, o)
		}
	}
	ps.pending, ps.produced = kept, 0
}

// commitOffsets returns the PreTxnCommit hook that sets the committed offset
// of every partition of topic to the next input its ledger will apply, and
// drops partitions without state. The consumer's own position can differ
// from what was applied (records fetched but not yet applied, redelivery
// after an abort); the ledger's offset is what its outputs reflect, and only
// that may be committed with them.
func commitOffsets(topic string, offsets map[int32]int64) func(*kmsg.TxnOffsetCommitRequest) error {
	return func(req *kmsg.TxnOffsetCommitRequest) error {
		for i := range req.Topics {
			t := &req.Topics[i]
			if t.Topic != topic {
				continue
			}
			seen := make(map[int32]bool, len(t.Partitions))
			kept := t.Partitions[:0]
			for _, p := range t.Partitions {
				off, ok := offsets[p.Partition]
				if !ok {
					continue
				}
				seen[p.Partition] = true
				p.Offset = off
				kept = append(kept, p)
			}
			for p, off := range offsets {
				if !seen[p] {
					np := kmsg.NewTxnOffsetCommitRequestTopicPartition()
					np.Partition, np.Offset, np.LeaderEpoch = p, off, -1
					kept = append(kept, np)
				}
			}
			t.Partitions = kept
		}
		return nil
	}
}

// rewindAll throws away every partition's state; each is rebuilt from its
// snapshot and the committed log when its records are fetched again (franz-go
// rewinds the consumer to the committed offsets after an abort).
func (s *Service) rewindAll() {
	s.parts = map[int32]*partState{}
	s.cancelRebuilds()
}

// abortOpen retries aborting the session's transaction, with capped
// backoff, until it succeeds, ctx ends, or the session is found unusable:
// on a fatal error, or after Config.AbortsMax failed tries. It used to
// retry until ctx ended, and a fenced producer fails every abort.
func (s *Service) abortOpen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for try := 1; ctx.Err() == nil; try++ {
		s.takeRevoke()
		_, err := s.tx.End(ctx, false, nil)
		if err == nil {
			return
		}
		if s.noteErr("abort transaction", err) == errFatal {
			return
		}
		if try >= s.cfg.AbortsMax {
			s.fatal = fmt.Errorf("abort transaction failed %d times: %w", try, err)
			return
		}
		s.log.Warn("aborting the open ledger transaction failed; retrying", "err", err, "class", classify(err), "backoff", backoff)
		select {
		case <-ctx.Done():
		case <-s.clock.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *Service) pollWait() time.Duration {
	wait := 100 * time.Millisecond
	if len(s.catching) > 0 {
		wait = 10 * time.Millisecond // install a finished rebuild promptly
	}
	if s.inTxn {
		wait = min(wait, s.txnBegan.Add(s.cfg.CommitInterval).Sub(s.clock.Now()))
	}
	now := s.clock.Now().UnixMilli()
	for _, ps := range s.parts {
		if at, ok := ps.l.NextWakeMs(); ok && !ps.tickInFlight {
			if d := time.Duration(at-now) * time.Millisecond; d < wait {
				wait = d
			}
		}
	}
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	return wait
}

// applyDrops throws away the state of every partition revoked or lost
// since the last round. A revoke or loss seen while no transaction is open
// is then cleared from the session (clearRevoke), so that it does not abort
// the next transaction.
func (s *Service) applyDrops(ctx context.Context) {
	s.mu.Lock()
	revoked := s.revokeSeen
	for p := range s.dropped {
		s.txnDropped = s.txnDropped || s.inTxn
		delete(s.parts, p)
		if s.catching[p] != 0 {
			// Paused partitions stay paused across rebalances: resume
			// it, or it would never be fetched again if reassigned.
			delete(s.catching, p)
			s.tx.Resume(p)
		}
	}
	clear(s.dropped)
	s.mu.Unlock()
	if revoked && !s.inTxn {
		s.clearRevoke(ctx)
	}
}

// clearRevoke ends the session with no transaction open, after a revoke or
// loss. franz-go's GroupTransactSession remembers a revoke or loss until
// its next End and then aborts, without an error, whatever transaction
// that End ends, even one begun after the rebalance was over. At group
// start that was the first transaction of every member whose partitions
// the cooperative rebalance moved (the first member takes all partitions,
// the second's join revokes half): one abort per start, 47 ms into the
// load, with the group already stable (docs/ledger-service.md). An End
// with no transaction open sends nothing to the broker; it only clears the
// flag and, like any abort, rewinds the consumer to the committed offsets
// (inputs applied since are skipped when redelivered; rebuilds in flight
// start again).
func (s *Service) clearRevoke(ctx context.Context) {
	s.takeRevoke()
	if _, err := s.tx.End(ctx, false, nil); err != nil {
		s.log.Warn("clearing a revoke outside a transaction", "err", err, "class", classify(err))
		s.noteErr("clear revoke", err)
	}
	s.cancelRebuilds()
}

// takeRevoke reports and clears revokeSeen; called just before every End,
// which clears franz-go's own flag. A revoke that lands during that End
// sets revokeSeen again and costs one clearRevoke more, nothing else.
func (s *Service) takeRevoke() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := s.revokeSeen
	s.revokeSeen = false
	return seen
}

// ticks appends a Tick to every owned partition whose ledger has pending
// time-driven work that is due, so that time advances through the log.
//
// Ticks are produced outside the transaction, by a plain idempotent
// producer: a Tick carries no decision, so a duplicate or one left behind
// by a crashed member only advances time, which any later record would do
// as well. Keeping them out of the transaction means a round with nothing
// to apply needs no transaction at all.
func (s *Service) ticks(ctx context.Context) {
	now := s.clock.Now()
	for p, ps := range s.parts {
		if !s.needsTick(ps, now) {
			continue
		}
		ev := eventid.New(schemas.TypeTick, now.UnixMilli())
		ev.Node = s.cfg.Node
		ev.Tick = &schemas.Tick{Reason: "wake"}
		b, err := schemas.Encode(ev)
		if err != nil {
			continue
		}
		s.tx.Append(ctx, &kgo.Record{Topic: s.cfg.Topics.Requests, Partition: p, Value: b}, func(_ *kgo.Record, err error) {
			if err != nil && ctx.Err() == nil {
				s.log.Warn("tick not appended; the next one will be", "partition", p, "err", err)
			}
		})
		ps.tickInFlight = true
		ps.lastTickSentAt = now
		s.m.ticks.Inc()
	}
}

// needsTick says whether partition ps has time-driven work due at now and
// no recent Tick of ours still on its way through the log.
func (s *Service) needsTick(ps *partState, now time.Time) bool {
	at, ok := ps.l.NextWakeMs()
	if !ok || now.UnixMilli() < at {
		return false
	}
	if ps.tickInFlight && now.Sub(ps.lastTickSentAt) < time.Second {
		return false
	}
	return now.Sub(ps.lastTickSentAt) >= s.cfg.TickMinGap
}

// snapshot queues partition p's snapshot with the round's outputs, in the
// same transaction as the input offset it reflects.
func (s *Service) snapshot(p int32, ps *partState) {
	if ps.encoding {
		return // the last one is still being encoded: this one is due after it
	}
	// The loop only freezes the state (a few slice copies); the JSON
	// encoding, tens of milliseconds for a partition holding thousands of
	// reservations, runs on its own goroutine while the loop goes on
	// deciding. Encoded on the loop it set the p99 of the admission round
	// trip at 5,000 req/s (docs/ledger-service.md, Snapshots off the loop).
	f := ps.l.Freeze()
	// The snapshot's log time is the ledger clock at the freeze (the log
	// time of the last input applied): readers such as the gateway's
	// /v1/sluice/usage report it as observed_at_ms, and pick the newest
	// snapshot by it. Left 0 it made every snapshot look equally old.
	logTimeMs := ps.l.NowMs()
	ev := eventid.New(schemas.TypeSnapshot, s.clock.Now().UnixMilli())
	ev.Node = s.cfg.Node
	ps.sinceSnapshot = 0
	ps.lastSnapshot = s.clock.Now()
	ps.encoding = true
	plain := s.cfg.SnapshotPlain
	s.clock.Go(func() {
		state, err := f.Marshal()
		if err == nil && !plain {
			// Compressed here, off the loop like the JSON: the record
			// is what the member's one transactional connection must
			// carry before the decisions produced after it.
			state, err = gzipSnapshot(state)
		}
		var b []byte
		if err == nil {
			ev.Snapshot = &schemas.Snapshot{Partition: p, InputOffset: f.NextOffset(), LogTimeMs: logTimeMs, State: state}
			b, err = schemas.Encode(ev)
		}
		if err != nil {
			err = fmt.Errorf("snapshot partition %d: %w", p, err)
		}
		s.encMu.Lock()
		s.encoded = append(s.encoded, encodedSnapshot{p: p, ps: ps, value: b, err: err})
		s.encMu.Unlock()
	})
}

// encodedSnapshot is a snapshot encoded off the loop, for partition p's
// state ps (the partition may have been dropped or rebuilt meanwhile).
type encodedSnapshot struct {
	p     int32
	ps    *partState
	value []byte
	err   error
}

// installSnapshots queues every snapshot encoded since the last round as
// its partition's pending record, to be produced in the open (or next)
// transaction. A snapshot of state at input offset X may commit in any
// transaction after the one that applied X: the offsets it commits are at
// least X, and a takeover that reads it replays the log from X. One of a
// partition whose state was dropped or replaced since the freeze is thrown
// away.
func (s *Service) installSnapshots() {
	s.encMu.Lock()
	done := s.encoded
	s.encoded = nil
	s.encMu.Unlock()
	for _, e := range done {
		e.ps.encoding = false
		if s.parts[e.p] != e.ps {
			continue
		}
		switch {
		case e.err != nil:
			// Only a programmer error gets here; the next one is due at
			// once, and the log since the last snapshot stays replayable.
			s.log.Error("snapshot not written", "partition", e.p, "err", e.err)
			continue
		case len(e.value) > bus.SnapshotMaxBytes:
			// Too big for one record: skip it rather than abort the
			// round's decisions with it. Takeover replays a longer tail
			// meanwhile.
			s.m.snapshotsSkipped.Inc()
			s.log.Warn("snapshot too large; skipped", "partition", e.p, "bytes", len(e.value), "max", bus.SnapshotMaxBytes)
			continue
		}
		ps := e.ps
		// A newer snapshot of the partition supersedes a pending one not
		// yet produced (one already in the open transaction stays;
		// compaction keeps the newer).
		kept := ps.pending[:ps.produced]
		for _, o := range ps.pending[ps.produced:] {
			if !o.snapshot {
				kept = append(kept, o)
			}
		}
		ps.pending = append(kept, output{topic: s.cfg.Topics.Snapshots, partition: 0, key: SnapshotKey(e.p), value: e.value, snapshot: true})
	}
}

// SnapshotKey is the compaction key of partition p's snapshots.
func SnapshotKey(p int32) []byte { return []byte("requests/" + strconv.Itoa(int(p))) }
