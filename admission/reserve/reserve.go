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
)

// ErrLedgerUnavailable is returned when no decision arrived within the
// answer bound; the caller fails closed (HTTP 503 with Retry-After).
var ErrLedgerUnavailable = errors.New("ledger did not answer in time")

// Config configures a Client. Zero values take the defaults noted.
type Config struct {
	Brokers []string
	Node    string    // this gateway's node id; decisions are routed back by it
	Topics  bus.Names // zero value = bus.DefaultNames()
	// AnswerTimeout bounds Reserve's wait for the ledger's first decision
	// (granted, queued, denied …). Default 2s.
	AnswerTimeout time.Duration
	// HeartbeatInterval is how often the client sends a Heartbeat into
	// each scope where it waits for decisions or may hold grants, so that
	// the ledger releases them soon after this gateway dies (see
	// heartbeat.go). Default 1s; negative turns heartbeats off (the ledger
	// then keeps this node's grants until their hold TTL).
	HeartbeatInterval time.Duration
	Log               *slog.Logger
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

	// reproduced counts decisions dropped as copies of delivered ones
	// (produced again after an aborted transaction).
	reproduced atomic.Int64

	act    *activity
	hbStop chan struct{}
	hbDone chan struct{}

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
	cfg.Topics = cfg.Topics.OrDefault()
	prod, err := bus.NewClient(ctx, cfg.Brokers, 10*time.Second,
		kgo.ProducerLinger(0),
		// Unlingered batches hold one or two events: snappy on each was
		// 2.4 % of a busy gateway's CPU (and the ledger's to undo) for a
		// few hundred bytes saved per request.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
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
		kgo.FetchMaxWait(10*time.Millisecond),
	)...)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("decision consumer: %w", err)
	}
	tele, err := kgo.NewClient(bus.Opts(cfg.Brokers,
		kgo.ProducerLinger(TelemetryLinger),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	)...)
	if err != nil {
		cons.Close()
		prod.Close()
		return nil, fmt.Errorf("telemetry producer: %w", err)
	}
	c := &Client{cfg: cfg, prod: prod, tele: tele, cons: cons, log: cfg.Log, act: newActivity(), trips: newRoundTrips(),
		watchers: map[string]chan *Decided{}, done: make(chan struct{})}
	go c.consume()
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
				c.reproduced.Add(1)
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
func (c *Client) Reproduced() int64 { return c.reproduced.Load() }

// Produce writes ev to sluice.requests keyed by its scope and waits for the
// broker's ack.
func (c *Client) Produce(ctx context.Context, ev *schemas.Event) error {
	return c.produce(ctx, c.cfg.Topics.Requests, ev)
}

// Send queues ev for sluice.requests without waiting for the broker's ack.
// Events of one scope sent through one Client keep their order, so a
// reconcile sent before the next reserve is applied before it. done, if not
// nil, receives the outcome. Send blocks only when the client's buffer is
// full (backpressure, never loss).
func (c *Client) Send(ev *schemas.Event, done func(error)) {
	c.send(c.prod, c.cfg.Topics.Requests, ev, done)
}

// SendTelemetry is Send for analytics-only events (Dispatched, Outcome),
// to sluice.telemetry through a producer of its own that lingers up to
// TelemetryLinger: they keep their order among themselves, but may reach
// the broker after the ledger's events sent later.
func (c *Client) SendTelemetry(ev *schemas.Event, done func(error)) {
	c.send(c.tele, c.cfg.Topics.Telemetry, ev, done)
}

func (c *Client) send(cl *kgo.Client, topic string, ev *schemas.Event, done func(error)) {
	b, err := schemas.Encode(ev)
	if err != nil {
		if done != nil {
			done(err)
		}
		return
	}
	cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(ev.Scope), Value: b}, func(_ *kgo.Record, err error) {
		if done != nil {
			if err != nil {
				err = fmt.Errorf("produce %s to %s: %w", ev.Type, topic, err)
			}
			done(err)
		}
	})
}

func (c *Client) produce(ctx context.Context, topic string, ev *schemas.Event) error {
	b, err := schemas.Encode(ev)
	if err != nil {
		return err
	}
	rec := &kgo.Record{Topic: topic, Key: []byte(ev.Scope), Value: b}
	if err := c.prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("produce %s to %s: %w", ev.Type, topic, err)
	}
	return nil
}

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
	return c.Produce(ctx, ev)
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
	if err := c.Request(ctx, ev); err != nil {
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
// payload per event, see schemas.Event.Derive). It uses a fresh context:
// the caller's is usually already done.
func (c *Client) release(ev *schemas.Event, reason schemas.Reason) {
	rel := releaseEvent(ev, reason, time.Now().UnixMilli())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Produce(ctx, rel); err != nil {
		c.log.Warn("release after abandoned wait", "request_id", ev.RequestID, "attempt", rel.Attempt, "err", err)
	}
}

// releaseEvent is the Released that gives back ev's attempt.
func releaseEvent(ev *schemas.Event, reason schemas.Reason, nowMs int64) *schemas.Event {
	rel := ev.Derive(schemas.TypeReleased, nowMs)
	rel.Released = &schemas.Released{Reason: reason}
	return rel
}
