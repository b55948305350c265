package ledgerd

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// DefaultHealthStall is Config.HealthStall's default.
const DefaultHealthStall = 10 * time.Second

// Health is a ledger member's liveness, served as /healthz on its metrics
// port (`sluice ledger --metrics`). It fails while the member cannot
// commit: its session is unusable (a fatal error, being recreated), or it
// has had decided work waiting for longer than the stall bound without a
// transaction committing. A member with nothing to do is healthy, however
// long ago it last committed. A supervisor that restarts a member failing
// it (a Kubernetes liveness probe) undoes any wedge this code does not
// foresee; the member itself recreates its session on a fatal error and
// exits when it cannot.
//
// The zero value is usable, with a stall bound of DefaultHealthStall;
// New sets it from Config.HealthStall.
type Health struct {
	mu         sync.Mutex
	stallAfter time.Duration
	// fatal is the error that made the session unusable, while it is
	// being recreated (or for good, once the member gave up).
	fatal error
	// workSince is when the oldest work not yet committed was decided
	// (zero: none); lastErr the last error of a failed transaction.
	workSince  time.Time
	lastCommit time.Time
	lastErr    error
}

// NewHealth returns a Health to pass in Config.Health, so that the caller
// can serve it before the member has joined.
func NewHealth() *Health { return &Health{} }

// Check reports why the member is not live at now, or nil.
func (h *Health) Check(now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fatal != nil {
		return fmt.Errorf("ledger session unusable: %w", h.fatal)
	}
	stall := h.stallAfter
	if stall <= 0 {
		stall = DefaultHealthStall
	}
	if !h.workSince.IsZero() && now.Sub(h.workSince) > stall {
		return fmt.Errorf("decided work waiting %s without a commit (bound %s; last commit %s ago, last error: %v)",
			now.Sub(h.workSince).Round(time.Millisecond), stall, since(now, h.lastCommit), h.lastErr)
	}
	return nil
}

func since(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return now.Sub(t).Round(time.Millisecond).String()
}

// ServeHTTP answers 200 "ok" while the member is live, else 503 with the
// reason.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := h.Check(time.Now()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "ok")
}

// working notes, once per loop round, whether the member holds work not
// yet committed.
func (h *Health) working(pending bool, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !pending:
		h.workSince = time.Time{}
	case h.workSince.IsZero():
		h.workSince = now
	}
}

// committed notes a committed transaction: whatever work remains was
// decided after it began.
func (h *Health) committed(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastCommit, h.workSince, h.lastErr = now, time.Time{}, nil
}

func (h *Health) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = err
}

// setFatal marks the session unusable (err) or usable again (nil).
func (h *Health) setFatal(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fatal = err
}
