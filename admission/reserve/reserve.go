// Package reserve is the gateway's side of the ledger protocol: it produces
// ReserveRequested events keyed by provider scope, waits for the ledger's
// decision on its own partition of sluice.decisions (read as soon as
// produced, see dedup.go), and reports what happened
// afterwards (reconcile, release, provider feedback).
//
// It is transport only: what a request does with a decision, and what it
// does when none comes, is admission/lifecycle's to decide. The ledger is
// the single writer of grants.
package reserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// ErrLedgerUnavailable is returned when no decision arrived within the
// answer bound; the caller fails closed (HTTP 503 with Retry-After).
var ErrLedgerUnavailable = errors.New("ledger did not answer in time")

// Config configures a Client. Zero values take the defaults noted.
type Config struct {
	Brokers []string
	Node    string    // this gateway's node id; decisions are routed back by it
	Topics  bus.Names // zero value = bus.DefaultNames()
	// AnswerTimeout bounds Reserve's wait for the broker's ack and then
	// for the ledger's first decision (granted, queued, denied …).
	// Default 2s.
	AnswerTimeout time.Duration
	// HeartbeatInterval is how often the client sends a Heartbeat into
	// each scope where it waits for decisions or may hold grants, so that
	// the ledger releases them soon after this gateway dies (see
	// heartbeat.go). Default 1s; negative turns heartbeats off (the ledger
	// then keeps this node's grants until their hold TTL).
	HeartbeatInterval time.Duration
	// RetryFor bounds how long a report that failed to produce
	// (Released, Reconciled, ProviderRejected, an emergency
	// ReserveRequested) is retried: until its reservation has ended.
	// Default 10m, the ledger's default stream_hold_ttl_ms (retry.go).
	RetryFor time.Duration
	// RetryQueueMax bounds the reports waiting for a retry; one that
	// fails while it is full is dropped and counted
	// (Stats.RetryDropped). Default 10,000.
	RetryQueueMax int
	// ReconcileLinger bounds how long a Reconciled waits to ride in the
	// produce request of the next event of its scope (coalesce.go).
	// Default DefaultReconcileLinger (5 ms); negative sends each at once;
	// at most 100 ms.
	ReconcileLinger time.Duration
	Log             *slog.Logger
}

// Decided is one decision delivered to a Watch: the attempt it answers and
// the decision.
type Decided struct {
	Attempt  int32
	Decision schemas.Decision
}

// TelemetryLinger is how long the telemetry producer lets analytics events
// (Dispatched, Outcome) gather into one produce request, instead of each
// costing a produce request of its own on an unlingered producer. Nothing
// waits for them, the ledger never reads them, and their readers (the sink,
// the live view) place them by time, not by arrival. The ledger's events
// keep their own producer, with no linger and their order.
const TelemetryLinger = 20 * time.Millisecond

// decisionFetchMaxWait is how long the broker may hold the decision
// consumer's fetch when the partition has nothing new. It adds no latency:
// with the default minimum of one byte the broker answers a waiting fetch
// at the first decision appended. It only sets how often an idle gateway
// polls: at 10 ms (before issue 25's gateway round) 100 empty fetches a
// second, each a write, a read and a wake-up in the gateway and a request
// for the broker (docs/ledger-service.md, Client settings).
const decisionFetchMaxWait = 250 * time.Millisecond

// watchBuffer bounds the decisions queued for one watcher; a watcher reads
// them as they come, so only stale repeats are ever dropped. The channel
// holds pointers: a buffer of 16 Decided values was 2.9 kB allocated (and
// zeroed, and scanned) per request for the one or two decisions it gets.
const watchBuffer = 16

// Client talks to the ledger over Kafka. It is safe for concurrent use.
type Client struct {
	cfg  Config
	prod *kgo.Client // sluice.requests: no linger, one order per scope
	tele *kgo.Client // sluice.telemetry: lingered batches (TelemetryLinger)
	cons *kgo.Client
	log  *slog.Logger

	mu       sync.Mutex
	watchers map[string]chan *Decided // by request id

	// abandoned are the attempts this client gave up without a decision
	// (retry.go), under abMu: the decision reader looks each grant up
	// there, and must not contend with Watch for mu. sweptMs is the
	// retry loop's.
	abMu      sync.Mutex
	abandoned map[attemptKey]int64
	sweptMs   int64

	stats stats
	retry retryQueue
	co    coalescer // reconciles waiting for a ride (coalesce.go)
	// produceRequests counts the produce requests prod wrote.
	produceRequests *atomic.Int64
	closing         atomic.Bool

	act    *activity
	hbStop chan struct{}
	hbDone chan struct{}
	rtStop chan struct{}
	rtDone chan struct{}

	// The readiness probe (probe.go).
	trips       *roundTrips
	probing     atomic.Bool
	decisionsOK atomic.Bool
	fetchFailed atomic.Int64 // fetch errors on the decision partition since the last probe round
	probeStop   chan struct{}
	probeDone   chan struct{}

	done chan struct{}
}

// New connects to Kafka, positions the decision consumer at the current end
// of this node's partition of sluice.decisions (so no decision for a request produced after New
// returns can be missed), and starts consuming.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.AnswerTimeout <= 0 {
		cfg.AnswerTimeout = 2 * time.Second
	}
	if cfg.Node == "" {
		return nil, errors.New("reserve: node id is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.RetryFor <= 0 {
		cfg.RetryFor = defaultRetryFor
	}
	if cfg.RetryQueueMax <= 0 {
		cfg.RetryQueueMax = defaultRetryQueueMax
	}
	if cfg.ReconcileLinger == 0 {
		cfg.ReconcileLinger = DefaultReconcileLinger
	}
	if cfg.ReconcileLinger > reconcileLingerMax {
		return nil, fmt.Errorf("reserve: reconcile linger %v is above its bound %v (a waiting reconcile delays the capacity it returns)", cfg.ReconcileLinger, reconcileLingerMax)
	}
	cfg.Topics = cfg.Topics.OrDefault()
	counter := &produceCounter{n: new(atomic.Int64)}
	prod, err := bus.NewClient(ctx, cfg.Brokers, 10*time.Second,
		kgo.ProducerLinger(0),
		// Unlingered batches hold one or two events: snappy on each was
		// 2.4 % of a busy gateway's CPU (and the ledger's to undo) for a
		// few hundred bytes saved per request.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(bus.ScopePartitioner()), // a split scope's sub-scopes on partitions apart
		kgo.WithHooks(counter),
		// Retry at most a second apart, as the ledger does: franz-go's
		// default backoff grows to 5 s during an outage and then holds a
		// gateway back for seconds after the broker answers again
		// (docs/ledger-service.md, broker restarts).
		kgo.RetryBackoffFn(bus.RetryBackoff),
	)
	if err != nil {
		return nil, err
	}
	// Decisions for this node are produced to one partition of
	// sluice.decisions (bus.DecisionPartition); read only that one.
	parts, err := bus.PartitionCount(ctx, prod, cfg.Topics.Decisions)
	if err != nil {
		prod.Close()
		return nil, err
	}
	own := bus.DecisionPartition(cfg.Node, parts)
	ends, err := kadm.NewClient(prod).ListEndOffsets(ctx, cfg.Topics.Decisions)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("list %s end offsets: %w", cfg.Topics.Decisions, err)
	}
	end, ok := ends.Lookup(cfg.Topics.Decisions, own)
	if !ok || end.Err != nil {
		prod.Close()
		return nil, fmt.Errorf("no end offset for %s partition %d", cfg.Topics.Decisions, own)
	}
	starts := map[int32]kgo.Offset{own: kgo.NewOffset().At(end.Offset)}
	cons, err := kgo.NewClient(bus.Opts(cfg.Brokers,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topics.Decisions: starts}),
		// Act on decisions as soon as they are produced; a Dedup drops the
		// copies an aborted transaction leaves (dedup.go).
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.FetchMaxWait(decisionFetchMaxWait),
		kgo.RetryBackoffFn(bus.RetryBackoff),
	)...)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("decision consumer: %w", err)
	}
	tele, err := kgo.NewClient(bus.Opts(cfg.Brokers,
		kgo.ProducerLinger(TelemetryLinger),
		kgo.RecordPartitioner(bus.ScopePartitioner()),
		kgo.RetryBackoffFn(bus.RetryBackoff),
	)...)
	if err != nil {
		cons.Close()
		prod.Close()
		return nil, fmt.Errorf("telemetry producer: %w", err)
	}
	c := &Client{cfg: cfg, prod: prod, tele: tele, cons: cons, log: cfg.Log, act: newActivity(), trips: newRoundTrips(),
		watchers: map[string]chan *Decided{}, abandoned: map[attemptKey]int64{}, done: make(chan struct{}),
		retry: retryQueue{max: cfg.RetryQueueMax}, rtStop: make(chan struct{}), rtDone: make(chan struct{}),
		co: coalescer{linger: cfg.ReconcileLinger, pending: map[string][]*report{}, timers: map[string]*time.Timer{}}, produceRequests: counter.n}
	go c.consume()
	go c.retries(c.rtStop, c.rtDone)
	if cfg.HeartbeatInterval > 0 {
		c.hbStop, c.hbDone = make(chan struct{}), make(chan struct{})
		go c.heartbeats(cfg.HeartbeatInterval, c.hbStop, c.hbDone)
	}
	return c, nil
}

// Close stops the client. Its heartbeats stop with it: grants it still
// holds are released by the ledger once the node's liveness bound passes.
func (c *Client) Close() {
	if c.probeStop != nil {
		close(c.probeStop)
		<-c.probeDone
	}
	if c.hbStop != nil {
		close(c.hbStop)
		<-c.hbDone
	}
	c.cons.Close()
	<-c.done
	// Queued reports get one last try; a failure now is final.
	close(c.rtStop)
	<-c.rtDone
	c.closing.Store(true)
	c.flushAll()
	due, expired := c.retry.take(time.Now().UnixMilli())
	for _, r := range expired {
		c.giveUp(r, errRetryExpired)
	}
	for _, r := range due {
		c.sendReport(r)
	}
	// Deliver what is still buffered (a lingered batch, reports sent
	// without waiting) before closing, within a bound.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.tele.Flush(ctx)
	_ = c.prod.Flush(ctx)
	c.tele.Close()
	c.prod.Close()
}

func (c *Client) consume() {
	defer close(c.done)
	var ev schemas.Event
	seen := NewDedup()
	for {
		fs := c.cons.PollFetches(context.Background())
		if fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			c.fetchFailed.Add(1)
			c.log.Warn("decision fetch", "topic", t, "partition", p, "err", err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if err := schemas.Decode(r.Value, &ev); err != nil || ev.Decision == nil {
				return
			}
			if ev.Node != c.cfg.Node {
				return
			}
			if !seen.First(&ev) {
				c.stats.reproduced.Add(1)
				return
			}
			if ev.Decision.Status == schemas.StatusGranted && c.takeAbandoned(ev.RequestID, ev.Attempt) {
				c.releaseLate(&ev)
				return
			}
			c.trips.decided(ev.Scope, time.Now().UnixMilli())
			c.mu.Lock()
			ch := c.watchers[ev.RequestID]
			c.mu.Unlock()
			if ch != nil {
				select {
				case ch <- &Decided{Attempt: ev.Attempt, Decision: *ev.Decision}:
				default: // a watcher holds at most a few; drop stale repeats
				}
			}
		})
	}
}

// Reproduced returns the number of decisions dropped as copies of ones
// already delivered: the re-production of an aborted transaction's records.
func (c *Client) Reproduced() int64 { return c.stats.reproduced.Load() }

// releaseLate gives back a grant for an attempt this client gave up: its
// reserve reached the ledger after the wait for it ended, or the Released
// that should have followed was lost. Nobody dispatches it.
func (c *Client) releaseLate(d *schemas.Event) {
	c.stats.lateReleased.Add(1)
	rel := releaseEvent(d, schemas.ReasonLedgerTimeout, time.Now().UnixMilli())
	b, err := schemas.Encode(rel)
	if err != nil {
		c.log.Error("release of a late grant", "request_id", rel.RequestID, "err", err)
		return
	}
	// Not Send: the attempt is not remembered as given up again.
	c.sendReport(&report{ev: rel, value: b, untilMs: rel.ProducedAtMs + c.cfg.RetryFor.Milliseconds(), done: func(err error) {
		if err != nil {
			c.log.Warn("release of a late grant", "request_id", rel.RequestID, "attempt", rel.Attempt, "err", err)
		}
	}})
}

// Produce writes ev to sluice.requests keyed by its scope and waits for the
// broker's ack.
func (c *Client) Produce(ctx context.Context, ev *schemas.Event) error {
	return c.produce(ctx, c.cfg.Topics.Requests, ev)
}

// Send queues ev for sluice.requests without waiting for the broker's ack.
// Events of one scope sent through one Client keep their order, so a
// reconcile sent before the next reserve is applied before it (a retried
// one excepted, retry.go). done, if not nil, receives the outcome: nil
// once delivered, or why it was not. Send never blocks: a full producer
// buffer is a failure, and a Released, Reconciled, ProviderRejected or
// ReserveRequested that fails is retried until its reservation has ended
// (Config.RetryFor), within Config.RetryQueueMax.
func (c *Client) Send(ev *schemas.Event, done func(error)) {
	b, err := schemas.Encode(ev)
	if err != nil {
		if done != nil {
			done(err)
		}
		return
	}
	if ev.Type == schemas.TypeReleased {
		// Should the reserve it gives back be decided after all, its
		// grant is released again (consume).
		c.abandon(ev.RequestID, ev.Attempt, time.Now().UnixMilli())
	}
	r := &report{ev: ev, value: b, untilMs: ev.ProducedAtMs + c.cfg.RetryFor.Milliseconds(), done: done}
	if retried(ev.Type) && c.retry.holds(ev.RequestID) {
		// Behind the request's earlier report, in order (retry.go).
		c.requeue(r, errBehindEarlier)
		return
	}
	if c.co.waits(ev) {
		c.hold(r) // rides with the scope's next event (coalesce.go)
		return
	}
	c.sendReport(r)
}

// errBehindEarlier is why a report went into the retry queue unsent: an
// earlier report of its request waits there.
var errBehindEarlier = errors.New("queued behind an earlier report of its request")

// SendTelemetry is Send for analytics-only events (Dispatched, Outcome),
// to sluice.telemetry through a producer of its own that lingers up to
// TelemetryLinger: they keep their order among themselves, but may reach
// the broker after the ledger's events sent later. It never blocks, and
// what fails is not retried: done gets the error.
func (c *Client) SendTelemetry(ev *schemas.Event, done func(error)) {
	b, err := schemas.Encode(ev)
	if err != nil {
		if done != nil {
			done(err)
		}
		return
	}
	topic := c.cfg.Topics.Telemetry
	c.tele.TryProduce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(ev.Scope), Value: b}, func(_ *kgo.Record, err error) {
		if done != nil {
			if err != nil {
				err = fmt.Errorf("produce %s to %s: %w", ev.Type, topic, err)
			}
			done(err)
		}
	})
}

// produce writes ev to topic and waits for the broker's ack, the end of
// ctx at the latest. franz-go fails a record whose context ends only while
// no request carries it: once sent, an idempotent producer cannot tell
// "never written" from "written, reply lost", so it waits for the reply
// (with a frozen broker, until the connection's read deadline,
// ProduceRequestTimeout + RequestTimeoutOverhead = 20 s, and then retries
// it). So the wait here ends with ctx whatever the record does; the record
// may still reach the broker later (Request gives its attempt back).
func (c *Client) produce(ctx context.Context, topic string, ev *schemas.Event) error {
	b, err := schemas.Encode(ev)
	if err != nil {
		return err
	}
	acked := make(chan error, 1)
	// Behind the scope's waiting reconciles, in the same produce request
	// (coalesce.go). The lock is not held across Produce, which blocks
	// while the producer's buffer is full: Send must not wait behind it.
	c.flushScope(ev.Scope)
	c.prod.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(ev.Scope), Value: b}, func(_ *kgo.Record, err error) { acked <- err })
	select {
	case err = <-acked:
	case <-ctx.Done():
		err = fmt.Errorf("%w: no ack before the bound (%w)", errAbandoned, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("produce %s to %s: %w", ev.Type, topic, err)
	}
	return nil
}

// errAbandoned: produce stopped waiting for a record the producer may
// still deliver.
var errAbandoned = errors.New("abandoned in flight")

// Watch delivers the decisions for request id, of any attempt, from now
// until stop is called. One watcher per request id.
func (c *Client) Watch(requestID string) (decisions <-chan *Decided, stop func()) {
	ch := make(chan *Decided, watchBuffer)
	c.mu.Lock()
	c.watchers[requestID] = ch
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		if c.watchers[requestID] == ch {
			delete(c.watchers, requestID)
		}
		c.mu.Unlock()
	}
}

// Request produces ev (a ReserveRequested or RetryRequested) and waits for
// the broker's ack. Its scope counts as one where this node waits for a
// decision, and is heartbeated, until Settled is called for it.
func (c *Client) Request(ctx context.Context, ev *schemas.Event) error {
	if c.hbStop != nil && c.act.begin(ev.Scope, time.Now().UnixMilli()) {
		// Ahead of the request in its partition: the ledger tracks
		// this node before it grants anything here.
		c.sendHeartbeat(ev.Scope, time.Now().UnixMilli())
	}
	err := c.Produce(ctx, ev)
	if errors.Is(err, errAbandoned) {
		// The reserve may yet reach the ledger and be granted with nobody
		// waiting. A Released right behind it, in the same partition,
		// gives it back in order (or is a no-op if it never lands); and
		// the attempt is remembered, should that Released be lost.
		c.stats.abandoned.Add(1)
		c.release(ev, schemas.ReasonLedgerTimeout)
	}
	return err
}

// Settled ends a wait begun by Request in scope, with the decision it got
// (zero: none). A grant keeps the scope heartbeated for its hold TTL.
func (c *Client) Settled(scope string, d schemas.Decision) {
	if c.hbStop != nil {
		c.act.end(scope, d, time.Now().UnixMilli())
	}
}

// Reserve produces ev (a ReserveRequested or RetryRequested) and waits for
// its terminal decision (granted, denied, expired, cancelled), the end of
// ctx (it then releases the reservation and returns ctx's error), or the
// answer bound with no answer at all (ErrLedgerUnavailable). It serves
// tools and benchmarks that take one decision; the gateway follows a
// request's whole life with Watch and Request (admission/lifecycle).
func (c *Client) Reserve(ctx context.Context, ev *schemas.Event) (d schemas.Decision, err error) {
	attempt := ev.Attempt
	if ev.RetryRequested != nil && attempt <= 0 {
		attempt = ev.RetryRequested.PreviousAttempt + 1
	}
	ch, stop := c.Watch(ev.RequestID)
	defer stop()
	pctx, cancel := context.WithTimeout(ctx, c.cfg.AnswerTimeout)
	err = c.Request(pctx, ev)
	cancel()
	if err != nil {
		c.Settled(ev.Scope, schemas.Decision{})
		return schemas.Decision{}, fmt.Errorf("%w: %v", ErrLedgerUnavailable, err)
	}
	defer func() { c.Settled(ev.Scope, d) }()
	answer := time.NewTimer(c.cfg.AnswerTimeout)
	defer answer.Stop()
	answered := false
	for {
		select {
		case got := <-ch:
			if got.Attempt != attempt {
				continue
			}
			answered = true
			if got.Decision.Status != schemas.StatusQueued {
				return got.Decision, nil
			}
		case <-answer.C:
			if !answered {
				c.release(ev, schemas.ReasonLedgerTimeout)
				return schemas.Decision{}, ErrLedgerUnavailable
			}
		case <-ctx.Done():
			c.release(ev, schemas.ReasonCancel)
			return schemas.Decision{}, ctx.Err()
		}
	}
}

// release tells the ledger to drop a reservation we stopped waiting for.
// ev is the event we waited on: a ReserveRequested or, for a retry, a
// RetryRequested; the Released is built from its envelope alone (one
// payload per event, see eventid.Derive). It does not wait: Send
// retries it until delivered or the reservation has ended.
func (c *Client) release(ev *schemas.Event, reason schemas.Reason) {
	rel := releaseEvent(ev, reason, time.Now().UnixMilli())
	c.Send(rel, func(err error) {
		if err != nil {
			c.log.Warn("release after abandoned wait", "request_id", ev.RequestID, "attempt", rel.Attempt, "err", err)
		}
	})
}

// releaseEvent is the Released that gives back ev's attempt.
func releaseEvent(ev *schemas.Event, reason schemas.Reason, nowMs int64) *schemas.Event {
	rel := eventid.Derive(ev, schemas.TypeReleased, nowMs)
	rel.Released = &schemas.Released{Reason: reason}
	return rel
}
