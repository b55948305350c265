package shell

import (
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/admission/lifecycle"
)

// TestTimers: the earliest pending timer is the one waited for, and a
// wake takes every timer due, in the order they were set, and no other.
func TestTimers(t *testing.T) {
	var ts timers
	if _, ok := ts.next(); ok {
		t.Fatal("next with no timer set: ok")
	}
	answer := lifecycle.Timer{Kind: lifecycle.TimerAnswer, Attempt: 1}
	deadline := lifecycle.Timer{Kind: lifecycle.TimerDeadline}
	ts.set(deadline, 900)
	ts.set(answer, 300)
	ts.set(lifecycle.Timer{Kind: lifecycle.TimerAnswer, Attempt: 2}, 300)
	for _, c := range []struct {
		nowMs  int64
		due    []lifecycle.Timer
		nextMs int64
		next   bool
	}{
		{100, nil, 300, true},
		{300, []lifecycle.Timer{answer, {Kind: lifecycle.TimerAnswer, Attempt: 2}}, 900, true},
		{899, nil, 900, true},
		{1000, []lifecycle.Timer{deadline}, 0, false},
	} {
		if got := ts.due(c.nowMs); !slices.Equal(got, c.due) {
			t.Errorf("at %d: due %v, want %v", c.nowMs, got, c.due)
		}
		if at, ok := ts.next(); at != c.nextMs || ok != c.next {
			t.Errorf("at %d: next %d %v, want %d %v", c.nowMs, at, ok, c.nextMs, c.next)
		}
	}
}
