package gateway

import (
	"sync"
	"time"

	"github.com/sluice-dev/sluice/admission/lifecycle"
)

// timers holds a lifecycle's pending timers (a handful per request).
type timers struct {
	at []timerAt
}

type timerAt struct {
	t    lifecycle.Timer
	atMs int64
}

func (ts *timers) set(t lifecycle.Timer, atMs int64) { ts.at = append(ts.at, timerAt{t, atMs}) }

// next is how long until the earliest timer (an hour when none is set:
// something else will wake the request first).
func (ts *timers) next(nowMs int64) time.Duration {
	d := time.Hour
	for _, t := range ts.at {
		d = min(d, time.Duration(max(0, t.atMs-nowMs))*time.Millisecond)
	}
	return d
}

// due removes and returns the timers due at nowMs, in the order they were
// set.
func (ts *timers) due(nowMs int64) []lifecycle.Timer {
	var out []lifecycle.Timer
	keep := ts.at[:0]
	for _, t := range ts.at {
		if t.atMs <= nowMs {
			out = append(out, t.t)
		} else {
			keep = append(keep, t)
		}
	}
	ts.at = keep
	return out
}

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
