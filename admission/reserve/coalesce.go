package reserve

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/schemas"
)

// Coalescing reconciles (issue 25): a request used to cost the gateway two
// produce requests to sluice.requests, its reserve and its reconcile, each
// on an unlingered producer. A Reconciled now waits, at most
// Config.ReconcileLinger, for the next event this client produces into the
// same scope, and is enqueued right before it: both reach the partition in
// the order they were sent and, nearly always, in the same produce request
// (the producer drains what is buffered for a partition into one batch; it
// may start draining the first before the second is buffered, which the
// produce-request count, Stats.ProduceRequests, shows). When no event of
// the scope follows in time, the scope's waiting reconciles go on their
// own, together, when the first of them has waited the linger.
//
// Why it is safe for the ledger's state:
//   - Order per scope is unchanged: every event this client enqueues for a
//     scope (reserve, retry, release, provider rejection, heartbeat, a
//     retried report) first enqueues the scope's waiting reconciles, under
//     one lock, so the partition holds the client's events in Send/Request
//     order, exactly as before. A reserve sent after a reconcile is still
//     applied after it. (A reserve's own Produce, which may block on a full
//     buffer, runs after the lock is released: what was sent before it has
//     been enqueued by then, and Send never waits behind it.)
//   - Nothing is lost or invented: a waiting reconcile is only delayed,
//     and Close sends what waits before flushing the producer.
//   - The delay is bounded (ReconcileLinger, default 5 ms, at most
//     reconcileLingerMax): while a reconcile waits, the ledger still holds
//     the grant's estimate and its concurrency slot, i.e. it is stricter
//     for those few milliseconds, never looser; the hold TTL (seconds) is
//     far above the bound, so a waiting reconcile never meets an expired
//     hold.
//
// Only Reconciled and ProviderObserved wait: a Released gives capacity back
// for a request that was not served (cancel, timeout) and goes at once, as
// does a ProviderRejected (a 429 must close the scope before the next
// grant). A ProviderObserved lowers a learned limit at most the linger
// later, well inside the late-grant bound the ledger already allows for.

// DefaultReconcileLinger is how long a Reconciled may wait for the next
// event of its scope when Config.ReconcileLinger is zero: well under a
// request's service time, so that at 1,000 req/s over a few scopes nearly
// every reconcile finds a reserve to ride with, and short enough that the
// capacity it returns is back before the next wait of a queued request is
// decided (the ledger's pump runs on every input).
const DefaultReconcileLinger = 5 * time.Millisecond

// reconcileLingerMax bounds Config.ReconcileLinger: a reconcile delays the
// capacity it returns by up to the linger.
const reconcileLingerMax = 100 * time.Millisecond

// coalescer holds the reconciles waiting for a ride, by scope. mu also
// orders every enqueue into the request producer (see enqueueScope).
type coalescer struct {
	mu      sync.Mutex
	linger  time.Duration // ≤ 0: off, reconciles go at once
	pending map[string][]*report
	// timers holds the linger timer of each scope with reports waiting.
	// It is stopped when its batch rides with another event: an unstopped
	// timer fired 5 ms after every request for nothing (a goroutine, a
	// lock and a thread woken, per request at 1 client; issue 25).
	timers map[string]*time.Timer
	// rides and alone count the reconciles sent ahead of another event of
	// their scope and those sent when their linger ran out.
	rides, alone int64
}

// waits reports whether ev waits for a ride: a Reconciled, and the
// ProviderObserved the gateway sends right behind it (a response's
// rate-limit headers), which would otherwise carry the reconcile in a
// produce request of their own, two per request again.
func (co *coalescer) waits(ev *schemas.Event) bool {
	return co.linger > 0 && (ev.Type == schemas.TypeReconciled || ev.Type == schemas.TypeProviderObserved)
}

// hold queues r (a Reconciled or ProviderObserved) for its scope; the first of a scope's batch
// arms the linger timer that sends the batch should nothing else come.
func (c *Client) hold(r *report) {
	c.co.mu.Lock()
	if c.closing.Load() {
		c.co.mu.Unlock()
		c.sendReport(r)
		return
	}
	scope := r.ev.Scope
	if len(c.co.pending[scope]) == 0 {
		c.co.timers[scope] = time.AfterFunc(c.co.linger, func() { c.lingerExpired(scope) })
	}
	c.co.pending[scope] = append(c.co.pending[scope], r)
	c.co.mu.Unlock()
}

// lingerExpired sends the scope's waiting reconciles on their own. It may
// find a later batch than the one that armed it (the first went with a
// reserve as the timer fired, too late to stop it); that batch is then
// sent early, which only shortens its wait.
func (c *Client) lingerExpired(scope string) {
	c.co.mu.Lock()
	n := len(c.co.pending[scope])
	c.co.alone += int64(n)
	c.flushLocked(scope)
	c.co.mu.Unlock()
}

// enqueueScope runs enqueue, which hands one event of scope to the request
// producer without blocking (TryProduce), right after the scope's waiting
// reconciles, under the lock that keeps the client's enqueues of a scope in
// order.
func (c *Client) enqueueScope(scope string, enqueue func()) {
	c.co.mu.Lock()
	if n := len(c.co.pending[scope]); n > 0 {
		c.co.rides += int64(n)
		c.flushLocked(scope)
	}
	enqueue()
	c.co.mu.Unlock()
}

// flushScope enqueues the scope's waiting reports ahead of an event the
// caller enqueues right after, without the lock (a blocking Produce). The
// order still holds: a report sent before the caller's event began is in
// pending now, or already enqueued; one sent later waits for a later event.
func (c *Client) flushScope(scope string) {
	c.co.mu.Lock()
	if n := len(c.co.pending[scope]); n > 0 {
		c.co.rides += int64(n)
		c.flushLocked(scope)
	}
	c.co.mu.Unlock()
}

// flushLocked enqueues the scope's waiting reconciles, in order.
func (c *Client) flushLocked(scope string) {
	rs := c.co.pending[scope]
	if len(rs) == 0 {
		return
	}
	delete(c.co.pending, scope)
	if t := c.co.timers[scope]; t != nil {
		t.Stop()
		delete(c.co.timers, scope)
	}
	for _, r := range rs {
		c.tryProduce(r)
	}
}

// flushAll sends every waiting reconcile (Close).
func (c *Client) flushAll() {
	c.co.mu.Lock()
	for scope, rs := range c.co.pending {
		c.co.alone += int64(len(rs))
		c.flushLocked(scope)
	}
	c.co.mu.Unlock()
}

// Coalesced returns how many Reconciled went in the produce request of a
// later event of their scope (rides) and how many went on their own when
// their linger ran out (alone).
func (c *Client) Coalesced() (rides, alone int64) {
	c.co.mu.Lock()
	defer c.co.mu.Unlock()
	return c.co.rides, c.co.alone
}

// produceCounter counts the produce requests a client writes (Kafka API
// key 0), so that what coalescing saves is measured, not assumed.
type produceCounter struct{ n *atomic.Int64 }

func (p *produceCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil {
		p.n.Add(1)
	}
}
