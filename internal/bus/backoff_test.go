package bus

import (
	"testing"
	"time"
)

func TestRetryBackoff(t *testing.T) {
	for _, tc := range []struct {
		fails    int
		low, top time.Duration
	}{
		{fails: -1, low: 80 * time.Millisecond, top: 120 * time.Millisecond},
		{fails: 0, low: 80 * time.Millisecond, top: 120 * time.Millisecond},
		{fails: 1, low: 80 * time.Millisecond, top: 120 * time.Millisecond},
		{fails: 2, low: 160 * time.Millisecond, top: 240 * time.Millisecond},
		{fails: 3, low: 320 * time.Millisecond, top: 480 * time.Millisecond},
		{fails: 4, low: 640 * time.Millisecond, top: time.Second},
		{fails: 5, low: time.Second * 8 / 10, top: time.Second},
		{fails: 40, low: time.Second * 8 / 10, top: time.Second},
		{fails: 1 << 30, low: time.Second * 8 / 10, top: time.Second},
	} {
		for range 200 {
			if d := RetryBackoff(tc.fails); d < tc.low || d > tc.top {
				t.Fatalf("RetryBackoff(%d) = %v, want within [%v, %v]", tc.fails, d, tc.low, tc.top)
			}
		}
	}
}
