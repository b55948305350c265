package gateway

import (
	"testing"
	"time"
)

// TestSendHold: an attempt is held until its grant's send-at by the
// gateway's clock, never longer than the allowance the ledger gave it
// (a clock behind the ledger's) and not at all once send-at has passed
// (a clock ahead, or a grant delivered late) or without one.
func TestSendHold(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	const allowance = 150 * time.Millisecond
	for _, tc := range []struct {
		name      string
		sendAtMs  int64
		allowance time.Duration
		want      time.Duration
	}{
		{"no send-at", 0, allowance, 0},
		{"delivered in 4 ms", 1_000_146, allowance, 146 * time.Millisecond},
		{"delivered in 112 ms", 1_000_038, allowance, 38 * time.Millisecond},
		{"at send-at", 1_000_000, allowance, 0},
		{"delivered after the allowance", 999_990, allowance, 0},
		{"clock 1 s behind the log", 1_001_150, allowance, allowance},
		{"no allowance", 1_000_100, 0, 0},
	} {
		if got := sendHold(now, tc.sendAtMs, tc.allowance); got != tc.want {
			t.Errorf("%s: hold %v, want %v", tc.name, got, tc.want)
		}
	}
}
