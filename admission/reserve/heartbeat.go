package reserve

import (
	"slices"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// Heartbeats (DESIGN.md §11): a gateway that dies must not hold its grants
// until the hold TTL. The ledger releases the holds of a node whose
// heartbeats stop (ledger.Config.NodeLivenessMs), so the client sends a
// Heartbeat, keyed like the requests, into every scope in which it waits
// for a decision or may still hold a grant. A grant is held at most its
// Decision.HoldTTLMs (the ledger expires it after that anyway), so a scope
// stays "active" until the last grant's hold TTL has passed — longer than
// strictly needed when the grant was reconciled early, which costs one
// small event per scope per interval and nothing else.

// defaultHoldMs is assumed for a grant that does not say its hold TTL (an
// emergency grant): the ledger's default hold_ttl_ms.
const defaultHoldMs = 120_000

// activity tracks the scopes a client must heartbeat. Time is a parameter
// (unix ms), so the rules are tested without a clock.
type activity struct {
	mu     sync.Mutex
	scopes map[string]*scopeActivity
}

type scopeActivity struct {
	waiting int   // Reserve calls waiting for a decision
	untilMs int64 // a grant may be held until then
}

func newActivity() *activity { return &activity{scopes: map[string]*scopeActivity{}} }

// begin notes a wait for a decision in scope. first reports that the scope
// was not active: its first heartbeat should go out before the request, so
// the ledger tracks the node from the request's grant on.
func (a *activity) begin(scope string, nowMs int64) (first bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.scopes[scope]
	if s == nil {
		s = &scopeActivity{}
		a.scopes[scope] = s
	}
	first = s.waiting == 0 && s.untilMs <= nowMs
	s.waiting++
	return first
}

// end notes that a wait in scope ended with decision d (zero: no decision).
func (a *activity) end(scope string, d schemas.Decision, nowMs int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.scopes[scope]
	if s == nil {
		return
	}
	s.waiting--
	if d.Status == schemas.StatusGranted {
		hold := d.HoldTTLMs
		if hold <= 0 {
			hold = defaultHoldMs
		}
		s.untilMs = max(s.untilMs, nowMs+hold)
	}
}

// due returns the scopes to heartbeat at nowMs, sorted, and forgets the
// scopes that need none any more.
func (a *activity) due(nowMs int64, buf []string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	buf = buf[:0]
	for sc, s := range a.scopes {
		if s.waiting > 0 || s.untilMs > nowMs {
			buf = append(buf, sc)
		} else {
			delete(a.scopes, sc)
		}
	}
	slices.Sort(buf)
	return buf
}

// heartbeatEvent is the Heartbeat of node for scope.
func heartbeatEvent(node, scope string, nowMs int64) *schemas.Event {
	ev := eventid.New(schemas.TypeHeartbeat, nowMs)
	ev.Node, ev.Scope = node, scope
	ev.Heartbeat = &schemas.Heartbeat{}
	return ev
}

// heartbeats sends a Heartbeat for every active scope each interval until
// stop is closed.
func (c *Client) heartbeats(interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	var buf []string
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			buf = c.act.due(now.UnixMilli(), buf)
			for _, sc := range buf {
				c.sendHeartbeat(sc, now.UnixMilli())
			}
		}
	}
}

func (c *Client) sendHeartbeat(scope string, nowMs int64) {
	c.Send(heartbeatEvent(c.cfg.Node, scope, nowMs), func(err error) {
		if err != nil {
			// The next one follows within an interval; the ledger's bound
			// is many intervals.
			c.log.Debug("heartbeat not produced", "scope", scope, "err", err)
		}
	})
}
