// Package reserve is the gateway's side of the ledger protocol: it produces
// ReserveRequested events keyed by provider scope, waits for the ledger's
// decision on sluice.decisions (read_committed), and reports what happened
// afterwards (reconcile, release, provider feedback).
//
// The ledger is the single writer of grants; this package never decides
// anything itself except failing closed (or, when configured, admitting
// under a local emergency cap) when the ledger does not answer in time.
package reserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	// AnswerTimeout bounds the wait for the ledger's first decision
	// (granted, queued, denied …). Default 2s.
	AnswerTimeout time.Duration
	// EmergencyCapPerSec, when > 0, admits up to this many requests per
	// second locally while the ledger is unavailable, flagged in the event,
	// instead of failing closed. Default 0: fail closed.
	EmergencyCapPerSec int
	// HeartbeatInterval is how often the client sends a Heartbeat into
	// each scope where it waits for decisions or may hold grants, so that
	// the ledger releases them soon after this gateway dies (see
	// heartbeat.go). Default 1s; negative turns heartbeats off (the ledger
	// then keeps this node's grants until their hold TTL).
	HeartbeatInterval time.Duration
	Log               *slog.Logger
}

type waitKey struct {
	requestID string
	attempt   int32
}

// Client talks to the ledger over Kafka. It is safe for concurrent use.
type Client struct {
	cfg  Config
	prod *kgo.Client
	cons *kgo.Client
	log  *slog.Logger

	mu      sync.Mutex
	waiters map[waitKey]chan schemas.Decision

	emMu     sync.Mutex
	emSecond int64
	emUsed   int

	act    *activity
	hbStop chan struct{}
	hbDone chan struct{}

	done chan struct{}
}

// New connects to Kafka, positions the decision consumer at the current end
// of sluice.decisions (so no decision for a request produced after New
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
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	)
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(prod)
	ends, err := adm.ListEndOffsets(ctx, cfg.Topics.Decisions)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("list %s end offsets: %w", cfg.Topics.Decisions, err)
	}
	starts := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Partition >= 0 {
			starts[o.Partition] = kgo.NewOffset().At(o.Offset)
		}
	})
	if len(starts) == 0 {
		prod.Close()
		return nil, fmt.Errorf("topic %s has no partitions (run `sluice topics ensure`)", cfg.Topics.Decisions)
	}
	cons, err := kgo.NewClient(bus.Opts(cfg.Brokers,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topics.Decisions: starts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(10*time.Millisecond),
	)...)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("decision consumer: %w", err)
	}
	c := &Client{cfg: cfg, prod: prod, cons: cons, log: cfg.Log, act: newActivity(),
		waiters: map[waitKey]chan schemas.Decision{}, done: make(chan struct{})}
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
	if c.hbStop != nil {
		close(c.hbStop)
		<-c.hbDone
	}
	c.cons.Close()
	<-c.done
	c.prod.Close()
}

func (c *Client) consume() {
	defer close(c.done)
	var ev schemas.Event
	for {
		fs := c.cons.PollFetches(context.Background())
		if fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			c.log.Warn("decision fetch", "topic", t, "partition", p, "err", err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if err := schemas.Decode(r.Value, &ev); err != nil || ev.Decision == nil {
				return
			}
			if ev.Node != c.cfg.Node {
				return
			}
			c.mu.Lock()
			ch := c.waiters[waitKey{ev.RequestID, ev.Attempt}]
			c.mu.Unlock()
			if ch != nil {
				select {
				case ch <- *ev.Decision:
				default: // a waiter holds at most a few; drop stale repeats
				}
			}
		})
	}
}

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
	c.send(c.cfg.Topics.Requests, ev, done)
}

// SendTelemetry is Send for analytics-only events (Dispatched, Outcome).
func (c *Client) SendTelemetry(ev *schemas.Event, done func(error)) {
	c.send(c.cfg.Topics.Telemetry, ev, done)
}

func (c *Client) send(topic string, ev *schemas.Event, done func(error)) {
	b, err := schemas.Encode(ev)
	if err != nil {
		if done != nil {
			done(err)
		}
		return
	}
	c.prod.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(ev.Scope), Value: b}, func(_ *kgo.Record, err error) {
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

// Reserve produces ev (a ReserveRequested) and waits for its decision.
// A queued decision is followed until it becomes terminal (granted, denied,
// expired, cancelled), the request's context ends, or the answer bound
// passes with no answer at all. If ctx ends while the request waits in a
// queue, Reserve reports a Released event so the ledger drops it, and
// returns ctx's error.
func (c *Client) Reserve(ctx context.Context, ev *schemas.Event) (d schemas.Decision, err error) {
	if c.hbStop != nil {
		if c.act.begin(ev.Scope, time.Now().UnixMilli()) {
			// Ahead of the request in its partition: the ledger tracks
			// this node before it grants anything here.
			c.sendHeartbeat(ev.Scope, time.Now().UnixMilli())
		}
		defer func() { c.act.end(ev.Scope, d, time.Now().UnixMilli()) }()
	}
	key := waitKey{ev.RequestID, ev.Attempt}
	ch := make(chan schemas.Decision, 4)
	c.mu.Lock()
	c.waiters[key] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, key)
		c.mu.Unlock()
	}()

	if err := c.Produce(ctx, ev); err != nil {
		if d, ok := c.emergency(ev); ok {
			return d, nil
		}
		return schemas.Decision{}, fmt.Errorf("%w: %v", ErrLedgerUnavailable, err)
	}
	answer := time.NewTimer(c.cfg.AnswerTimeout)
	defer answer.Stop()
	answered := false
	for {
		select {
		case d := <-ch:
			answered = true
			if d.Status != schemas.StatusQueued {
				return d, nil
			}
		case <-answer.C:
			if !answered {
				c.release(ev, schemas.ReasonLedgerTimeout)
				if d, ok := c.emergency(ev); ok {
					return d, nil
				}
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

// emergency admits locally under the configured cap while the ledger is
// unavailable. The grant is flagged so analytics and the ledger (when it
// catches up) can see it.
func (c *Client) emergency(ev *schemas.Event) (schemas.Decision, bool) {
	if c.cfg.EmergencyCapPerSec <= 0 {
		return schemas.Decision{}, false
	}
	now := time.Now().Unix()
	c.emMu.Lock()
	defer c.emMu.Unlock()
	if now != c.emSecond {
		c.emSecond, c.emUsed = now, 0
	}
	if c.emUsed >= c.cfg.EmergencyCapPerSec {
		return schemas.Decision{}, false
	}
	c.emUsed++
	if ev.ReserveRequested != nil {
		ev.ReserveRequested.EmergencyAdmitted = true
	}
	return schemas.Decision{Status: schemas.StatusGranted, Reason: schemas.ReasonEmergencyCap, GatewayDecision: schemas.GDEmergencyAdmitted}, true
}
