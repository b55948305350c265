package gateway

import (
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// A grant through a requests bucket whose window holds at most one
// request carries Decision.SendAtMs, the log time + the ledger's
// learn.pace_delivery_ms (ledger/sendat.go). The ledger spaced such
// grants one provider interval apart in log time; the delay from its
// grant to this gateway varies with the machine's load (p50 4 ms, max
// 112 ms measured), and a grant delayed followed by one that is not
// reach the provider closer than the interval, which it refuses. Holding
// each such attempt until SendAtMs by the wall clock gives every grant
// the same delay, so they reach the provider as far apart as the ledger
// granted them (services/loadtest/README.md, "Send at").

// sendHold is how long to hold an attempt granted with send-at sendAtMs
// and delivery allowance allowance (SendAtMs − LogTimeMs) at wall time
// now: until sendAtMs, clamped to [0, allowance], so that a clock ahead
// of or behind the ledger's log time never holds a request longer than
// the allowance the ledger gave it. 0 without a send-at.
func sendHold(now time.Time, sendAtMs int64, allowance time.Duration) time.Duration {
	if sendAtMs <= 0 || allowance <= 0 {
		return 0
	}
	return min(max(0, time.UnixMilli(sendAtMs).Sub(now)), allowance)
}

// noteSendAt remembers the send-at of attempt's grant d for its dispatch.
func (c *call) noteSendAt(attempt int32, d *schemas.Decision) {
	if d.Status != schemas.StatusGranted {
		return
	}
	c.sendAtAttempt, c.sendAtMs = attempt, d.SendAtMs
	c.sendAllowance = time.Duration(max(0, d.SendAtMs-d.LogTimeMs)) * time.Millisecond
}

// holdForSendAt waits before attempt's dispatch until its grant's
// send-at (sendHold), or until the request's context ends (the client
// gone, or its deadline: the dispatch that follows then fails at once
// without reaching the provider). It counts the hold in
// sluice_gateway_send_hold_seconds.
func (c *call) holdForSendAt(attempt int32) {
	if c.sendAtAttempt != attempt || c.sendAtMs <= 0 {
		return
	}
	d := sendHold(time.Now(), c.sendAtMs, c.sendAllowance)
	c.sendAtMs = 0 // once: a later dispatch of the attempt (none today) is not held again
	c.s.m.sendHold.Observe(d.Seconds())
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.ctx.Done():
	}
}
