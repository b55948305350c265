package gateway

import (
	"sync"
	"time"
)

// wakeTimers keeps the stopped timers of finished requests for the next
// ones (a timer and its channel are three allocations). Reuse is safe
// since Go 1.23 (go.mod says 1.26): Stop and Reset guarantee that no value
// sent before them is received after, so a reused timer never fires for
// its last request.
var wakeTimers sync.Pool

// getWakeTimer returns a stopped timer from the pool, or a new one.
func getWakeTimer() *time.Timer {
	if t, ok := wakeTimers.Get().(*time.Timer); ok {
		return t
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// putWakeTimer stops t and gives it back to the pool.
func putWakeTimer(t *time.Timer) {
	t.Stop()
	wakeTimers.Put(t)
}

// emergencyCap counts the requests admitted locally in the current second
// while the ledger is silent (config emergency_cap_per_sec); the lifecycle
// decides when to ask.
type emergencyCap struct {
	mu     sync.Mutex
	second int64
	used   int
}

// take reports whether one more request fits capPerSec in second (unix s).
func (e *emergencyCap) take(capPerSec int, second int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if second != e.second {
		e.second, e.used = second, 0
	}
	if e.used >= capPerSec {
		return false
	}
	e.used++
	return true
}
