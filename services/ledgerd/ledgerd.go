// Package ledgerd runs the ledger state machine on Kafka: a consumer-group
// member on sluice.requests whose single poll loop is the one writer of every
// partition it owns. Decisions, Tick records and snapshots are produced in
// the same Kafka transaction as the consumed offsets (GroupTransactSession),
// so a crash or a fenced zombie can never publish a decision twice or lose
// one: whatever did not commit is re-derived, identically, by the next owner.
package ledgerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

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
	Log                *slog.Logger
	Registerer         prometheus.Registerer
}

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

// partState is one owned partition: its ledger and bookkeeping for ticks
// and snapshots.
type partState struct {
	l              *ledger.Ledger
	sinceSnapshot  int
	lastSnapshot   time.Time
	tickInFlight   bool
	lastTickSentAt time.Time
}

// Service is a running ledger member.
type Service struct {
	cfg      Config
	sess     *kgo.GroupTransactSession
	tickProd *kgo.Client // non-transactional: see ticks
	m        *metrics
	log      *slog.Logger

	// parts is touched only by the poll loop, except that rebalance
	// callbacks (which franz-go may run on another goroutine) record
	// partitions to drop in dropped, under mu.
	parts   map[int32]*partState
	mu      sync.Mutex
	dropped map[int32]bool
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
	probe.Close()

	s := &Service{cfg: cfg, log: cfg.Log, parts: map[int32]*partState{}, dropped: map[int32]bool{}}
	s.m = newMetrics(cfg.Registerer)
	drop := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range m[cfg.Topics.Requests] {
			s.dropped[p] = true
		}
	}
	s.sess, err = kgo.NewGroupTransactSession(
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.TransactionalID("sluice-ledger-"+cfg.Node),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics.Requests),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.FetchMaxWait(10*time.Millisecond), // the broker minimum franz-go accepts
		kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(bus.SnapshotMaxBytes),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.RebalanceTimeout(10*time.Second),
		kgo.OnPartitionsRevoked(drop),
		kgo.OnPartitionsLost(drop),
	)
	if err != nil {
		return nil, fmt.Errorf("ledger transactional session: %w", err)
	}
	s.tickProd, err = kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		s.sess.Close()
		return nil, fmt.Errorf("ledger tick producer: %w", err)
	}
	return s, nil
}

// Close leaves the group.
func (s *Service) Close() {
	s.sess.Close()
	s.tickProd.Close()
}

// Loop polls, applies and commits until ctx ends.
func (s *Service) Loop(ctx context.Context) error {
	var outs []ledger.Output
	var qbuf []ledger.QueueStat
	var lastObserve time.Time
	for {
		if ctx.Err() != nil {
			return nil
		}
		pollCtx, cancel := context.WithTimeout(ctx, s.pollWait())
		fs := s.sess.PollFetches(pollCtx)
		cancel()
		if fs.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				s.log.Warn("ledger fetch", "topic", t, "partition", p, "err", err)
			}
		})
		s.applyDrops()
		if fs.NumRecords() == 0 {
			// Nothing to apply: no transaction. (A transaction that
			// consumed nothing is not free: on kfake its commit took
			// 500 ms, stalling every decision behind it.)
			s.ticks(ctx)
			continue
		}

		if err := s.sess.Begin(); err != nil {
			// Only possible if an earlier transaction is still open;
			// clean up and retry the round rather than exit.
			s.log.Warn("begin transaction", "err", err)
			s.m.aborts.Inc()
			s.parts = map[int32]*partState{}
			s.abortOpen(ctx)
			continue
		}
		var produceErr error
		var perr sync.Mutex
		promise := func(_ *kgo.Record, err error) {
			if err != nil {
				perr.Lock()
				produceErr = err
				perr.Unlock()
			}
		}
		n := 0
		var stepErr error
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if stepErr != nil || len(fp.Records) == 0 {
				return
			}
			ps, err := s.ensure(ctx, fp.Partition, fp.Records[0].Offset)
			if err != nil {
				stepErr = err
				return
			}
			var ev schemas.Event
			for _, r := range fp.Records {
				if r.Offset < ps.l.Offset() {
					continue // already reflected (replayed during catch-up)
				}
				if err := decodeInput(r.Value, &ev); err != nil {
					s.m.invalid.Inc()
					s.log.Warn("undecodable request record skipped", "partition", fp.Partition, "offset", r.Offset, "err", err)
				}
				if ev.Type == schemas.TypeTick && ev.Node == s.cfg.Node {
					ps.tickInFlight = false
				}
				outs = ps.l.Apply(r.Timestamp.UnixMilli(), r.Offset, &ev, outs[:0])
				n++
				ps.sinceSnapshot++
				for i := range outs {
					d := &outs[i]
					s.m.decision(d)
					b, err := schemas.Encode(d.Event())
					if err != nil {
						stepErr = fmt.Errorf("encode decision: %w", err)
						return
					}
					s.sess.Produce(ctx, &kgo.Record{Topic: s.cfg.Topics.Decisions, Partition: fp.Partition, Key: []byte(d.Scope), Value: b}, promise)
				}
			}
			s.m.lag.WithLabelValues(strconv.Itoa(int(fp.Partition))).Set(float64(fp.HighWatermark - ps.l.Offset()))
			if ps.sinceSnapshot >= s.cfg.SnapshotEvery || (ps.sinceSnapshot > 0 && time.Since(ps.lastSnapshot) >= s.cfg.SnapshotInterval) {
				if err := s.snapshot(ctx, fp.Partition, ps, promise); err != nil {
					stepErr = err
				}
			}
		})
		if err := s.sess.Client().Flush(ctx); err != nil && stepErr == nil {
			stepErr = err
		}
		perr.Lock()
		if stepErr == nil {
			stepErr = produceErr
		}
		perr.Unlock()
		try := kgo.TryCommit
		if stepErr != nil {
			try = kgo.TryAbort
		}
		committed, err := s.sess.End(ctx, try)
		if err != nil || !committed {
			// Nothing of this round is visible; throw the in-memory state
			// away so it is rebuilt from the committed log.
			s.m.aborts.Inc()
			s.log.Warn("ledger transaction aborted; rebuilding partition state", "err", errors.Join(stepErr, err))
			s.parts = map[int32]*partState{}
			if err != nil {
				// The End request itself failed (e.g. the broker is
				// down): the transaction may still be open, and Begin
				// would refuse. Abort until the session is clean.
				s.abortOpen(ctx)
			}
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		s.m.applied.Add(float64(n))
		s.ticks(ctx)
		if time.Since(lastObserve) >= 500*time.Millisecond {
			// Gauges are sampled, not kept exact: walking the queues on
			// every round would tax the hot loop.
			lastObserve = time.Now()
			for p, ps := range s.parts {
				qbuf = s.m.observe(p, ps.l, time.Since(ps.lastSnapshot), qbuf)
			}
		}
	}
}

// abortOpen retries aborting the session's transaction, with capped
// backoff, until it succeeds or ctx ends.
func (s *Service) abortOpen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if _, err := s.sess.End(ctx, kgo.TryAbort); err == nil {
			return
		} else {
			s.log.Warn("aborting the open ledger transaction failed; retrying", "err", err, "backoff", backoff)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *Service) pollWait() time.Duration {
	wait := 100 * time.Millisecond
	now := time.Now().UnixMilli()
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

func (s *Service) applyDrops() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.dropped {
		delete(s.parts, p)
	}
	clear(s.dropped)
}

// ensure returns the state of partition p, rebuilding it from the latest
// snapshot and the committed log before upto when the partition is new to
// this member (assignment) or its state was thrown away (abort).
func (s *Service) ensure(ctx context.Context, p int32, upto int64) (*partState, error) {
	if ps := s.parts[p]; ps != nil {
		return ps, nil
	}
	start := time.Now()
	l, err := CatchUp(ctx, s.cfg.Brokers, s.cfg.Topics, p, upto, s.log)
	if err != nil {
		return nil, fmt.Errorf("catch up partition %d: %w", p, err)
	}
	s.m.catchUp.Observe(time.Since(start).Seconds())
	ps := &partState{l: l, lastSnapshot: time.Now()}
	s.parts[p] = ps
	return ps, nil
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
	now := time.Now()
	for p, ps := range s.parts {
		if !s.needsTick(ps, now) {
			continue
		}
		ev := schemas.New(schemas.TypeTick, now.UnixMilli())
		ev.Node = s.cfg.Node
		ev.Tick = &schemas.Tick{Reason: "wake"}
		b, err := schemas.Encode(ev)
		if err != nil {
			continue
		}
		s.tickProd.Produce(ctx, &kgo.Record{Topic: s.cfg.Topics.Requests, Partition: p, Value: b}, func(_ *kgo.Record, err error) {
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

func (s *Service) snapshot(ctx context.Context, p int32, ps *partState, promise func(*kgo.Record, error)) error {
	state, err := ps.l.MarshalSnapshot()
	if err != nil {
		return fmt.Errorf("snapshot partition %d: %w", p, err)
	}
	ev := schemas.New(schemas.TypeSnapshot, time.Now().UnixMilli())
	ev.Node = s.cfg.Node
	ev.Snapshot = &schemas.Snapshot{Partition: p, InputOffset: ps.l.Offset(), State: state}
	b, err := schemas.Encode(ev)
	if err != nil {
		return err
	}
	ps.sinceSnapshot = 0
	ps.lastSnapshot = time.Now()
	if len(b) > bus.SnapshotMaxBytes {
		// Too big for one record: skip it rather than abort the round's
		// decisions with it. Takeover replays a longer tail meanwhile.
		s.m.snapshotsSkipped.Inc()
		s.log.Warn("snapshot too large; skipped", "partition", p, "bytes", len(b), "max", bus.SnapshotMaxBytes)
		return nil
	}
	s.sess.Produce(ctx, &kgo.Record{Topic: s.cfg.Topics.Snapshots, Partition: 0, Key: SnapshotKey(p), Value: b}, promise)
	s.m.snapshots.Inc()
	return nil
}

// SnapshotKey is the compaction key of partition p's snapshots.
func SnapshotKey(p int32) []byte { return []byte("requests/" + strconv.Itoa(int(p))) }
