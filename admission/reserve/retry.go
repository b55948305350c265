package reserve

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/schemas"
)

// Reports that fail are retried (issue 19, D8). A Released, Reconciled,
// ProviderRejected or emergency ReserveRequested is the only word the
// ledger gets of how a grant ended: lost during an outage, the grant stays
// held until its hold TTL (2 minutes by default) and its usage is never
// charged. Kafka fails such a record only in a few ways (a head-of-line
// record whose context ended takes its partition's buffer with it, the
// unknown-topic limit during a broker restart, a full buffer); whatever
// the reason, the report goes into a bounded queue and is produced again
// every retryInterval until it is delivered or its reservation has ended
// (RetryFor after the report was made: by then the ledger has expired the
// grant anyway). Heartbeats are not queued: the next interval's heartbeat
// is their retry.
//
// A retried report can reach the ledger after events of its scope sent
// later. The ledger's rules for a late Released or Reconciled are those of
// any duplicate: applied once to the reservation it names, nothing if that
// reservation has ended. A request's own reports keep their order, though:
// one sent while an earlier report of the same request waits in the queue
// goes into the queue behind it (Send), so that, say, the Reconciled of a
// degraded admission never reaches the ledger before the ReserveRequested
// that creates its reservation (it would name a reservation the ledger
// does not know, and its usage would go uncharged). The queue is emptied
// and produced again in order at each retry, so only a report sent during
// the microseconds of that hand-over can pass an earlier one.

// retryInterval is how often queued reports are produced again.
const retryInterval = 500 * time.Millisecond

// Defaults of Config.RetryFor and Config.RetryQueueMax.
const (
	// defaultRetryFor is the ledger's default stream_hold_ttl_ms, the
	// longest a grant is held: after it, no reservation a report names is
	// still open.
	defaultRetryFor      = 10 * time.Minute
	defaultRetryQueueMax = 10_000
	// abandonedMax bounds the attempts remembered as given up (below).
	abandonedMax = 65_536
)

// ErrRetryQueueFull is the outcome of a report that failed while the retry
// queue held Config.RetryQueueMax reports: it is dropped (and counted).
var ErrRetryQueueFull = errors.New("retry queue full")

// errRetryExpired is the outcome of a report retried until RetryFor passed.
var errRetryExpired = errors.New("not delivered before its reservation ended")

// report is an event for sluice.requests on its way to the broker: encoded
// once, retried until untilMs, its outcome given to done.
type report struct {
	ev      *schemas.Event
	value   []byte
	untilMs int64
	done    func(error)
	tries   int
}

// retryQueue holds the reports waiting to be produced again, oldest first,
// at most max of them.
type retryQueue struct {
	mu    sync.Mutex
	items []*report
	max   int
	// byReq counts the queued reports of each request id; n is
	// len(items), read without the lock by holds' fast path.
	byReq map[string]int
	n     atomic.Int64
}

// push queues r; it reports false when the queue is full.
func (q *retryQueue) push(r *report) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= q.max {
		return false
	}
	q.items = append(q.items, r)
	if q.byReq == nil {
		q.byReq = map[string]int{}
	}
	q.byReq[r.ev.RequestID]++
	q.n.Store(int64(len(q.items)))
	return true
}

// holds reports whether a report of request id is queued. It costs one
// atomic load while the queue is empty, as it is but during an outage.
func (q *retryQueue) holds(id string) bool {
	if q.n.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byReq[id] > 0
}

// take empties the queue: the reports to produce again at nowMs, and those
// whose reservation has ended.
func (q *retryQueue) take(nowMs int64) (due, expired []*report) {
	q.mu.Lock()
	items := q.items
	q.items = nil
	clear(q.byReq)
	q.n.Store(0)
	q.mu.Unlock()
	for _, r := range items {
		if nowMs >= r.untilMs {
			expired = append(expired, r)
		} else {
			due = append(due, r)
		}
	}
	return due, expired
}

func (q *retryQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// retried reports whether a failed event of type t is queued for a retry.
func retried(t schemas.Type) bool {
	switch t {
	case schemas.TypeReleased, schemas.TypeReconciled, schemas.TypeProviderRejected, schemas.TypeReserveRequested:
		return true
	}
	return false
}

// sendReport produces r without blocking: a full producer buffer is a
// failure like any other, so that no request waits on a broker that does
// not answer.
func (c *Client) sendReport(r *report) {
	c.enqueueScope(r.ev.Scope, func() { c.tryProduce(r) })
}

// tryProduce hands r to the request producer without waiting; the caller
// holds the order lock (enqueueScope).
func (c *Client) tryProduce(r *report) {
	rec := &kgo.Record{Topic: c.cfg.Topics.Requests, Key: []byte(r.ev.Scope), Value: r.value}
	c.prod.TryProduce(context.Background(), rec, func(_ *kgo.Record, err error) {
		if err == nil {
			if r.tries > 0 {
				c.stats.retried.Add(1)
			}
			c.finish(r, nil)
			return
		}
		err = fmt.Errorf("produce %s to %s: %w", r.ev.Type, c.cfg.Topics.Requests, err)
		if !retried(r.ev.Type) {
			c.finish(r, err)
			return
		}
		c.requeue(r, err)
	})
}

// requeue puts a failed report back for the retry loop.
func (c *Client) requeue(r *report, err error) {
	r.tries++
	if c.closing.Load() {
		c.giveUp(r, fmt.Errorf("%w (client closed)", err))
		return
	}
	if !c.retry.push(r) {
		c.stats.retryDropped.Add(1)
		c.giveUp(r, fmt.Errorf("%w (%d queued): %w", ErrRetryQueueFull, c.cfg.RetryQueueMax, err))
	}
}

// giveUp ends a report that will not be delivered. A Released that is lost
// leaves its grant held; the attempt is remembered, so that its grant, if
// one comes, is released again (consume).
func (c *Client) giveUp(r *report, err error) {
	if r.ev.Type == schemas.TypeReleased {
		c.abandon(r.ev.RequestID, r.ev.Attempt, time.Now().UnixMilli())
	}
	c.finish(r, err)
}

func (c *Client) finish(r *report, err error) {
	if r.done != nil {
		r.done(err)
	}
}

// retries produces the queued reports again every retryInterval until stop
// is closed, and forgets given-up attempts whose reservation has ended.
func (c *Client) retries(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(retryInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			c.retryOnce(now.UnixMilli())
		}
	}
}

func (c *Client) retryOnce(nowMs int64) {
	due, expired := c.retry.take(nowMs)
	for _, r := range expired {
		c.stats.retryExpired.Add(1)
		c.giveUp(r, errRetryExpired)
	}
	for _, r := range due {
		c.sendReport(r)
	}
	if nowMs-c.sweptMs >= forgetEvery.Milliseconds() {
		c.sweptMs = nowMs
		c.forgetAbandoned(nowMs)
	}
}

// forgetEvery is how often the given-up attempts past their bound are
// forgotten (a walk over at most abandonedMax entries).
const forgetEvery = 10 * time.Second

// attemptKey names one reservation: a request's attempt.
type attemptKey struct {
	requestID string
	attempt   int32
}

// abandon remembers that this client gave attempt of requestID up (its
// produce was not acked in time, or its Released was lost) until RetryFor
// after nowMs. A grant for it that comes later is given back: nobody waits
// for it, and held it would count against the scope until its hold TTL.
// At most abandonedMax attempts are remembered; past that a late grant
// waits out the ledger's liveness bound or its hold TTL, as before.
func (c *Client) abandon(requestID string, attempt int32, nowMs int64) {
	c.abMu.Lock()
	defer c.abMu.Unlock()
	if len(c.abandoned) >= abandonedMax {
		c.stats.abandonedFull.Add(1)
		return
	}
	c.abandoned[attemptKey{requestID, attempt}] = nowMs + c.cfg.RetryFor.Milliseconds()
}

// takeAbandoned reports whether attempt of requestID was given up, and
// forgets it.
func (c *Client) takeAbandoned(requestID string, attempt int32) bool {
	c.abMu.Lock()
	defer c.abMu.Unlock()
	k := attemptKey{requestID, attempt}
	_, ok := c.abandoned[k]
	if ok {
		delete(c.abandoned, k)
	}
	return ok
}

func (c *Client) forgetAbandoned(nowMs int64) {
	c.abMu.Lock()
	defer c.abMu.Unlock()
	for k, until := range c.abandoned {
		if nowMs >= until {
			delete(c.abandoned, k)
		}
	}
}

// Stats are the client's counts of what it did about a broker that did not
// deliver, for the gateway's metrics.
type Stats struct {
	Reproduced   int64 // decisions dropped as copies of delivered ones
	RetryQueued  int64 // reports waiting for a retry now
	Retried      int64 // reports delivered after at least one retry
	RetryDropped int64 // reports dropped: the retry queue was full
	RetryExpired int64 // reports given up: their reservation had ended
	// LateReleased counts grants given back because they came for an
	// attempt this client had given up.
	LateReleased int64
	// Abandoned counts produces the client stopped waiting for at the
	// caller's bound, the broker still holding them.
	Abandoned int64
	// ProduceRequests counts the produce requests written to the brokers
	// for sluice.requests (reserves, reports, heartbeats): with reconciles
	// coalesced (coalesce.go) about one per request.
	ProduceRequests int64
}

type stats struct {
	reproduced, retried, retryDropped, retryExpired, lateReleased, abandoned, abandonedFull atomic.Int64
}

// Stats returns the client's counts.
func (c *Client) Stats() Stats {
	return Stats{Reproduced: c.stats.reproduced.Load(), RetryQueued: int64(c.retry.len()), Retried: c.stats.retried.Load(),
		RetryDropped: c.stats.retryDropped.Load(), RetryExpired: c.stats.retryExpired.Load(),
		LateReleased: c.stats.lateReleased.Load(), Abandoned: c.stats.abandoned.Load(), ProduceRequests: c.produceRequests.Load()}
}
