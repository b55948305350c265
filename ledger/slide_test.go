package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestSlideWindow: a bucket learned from remaining counts without a limit
// (Azure) never grants more within any trailing window than the window's
// share of the learned capacity (slide.go). 600 RPM configured over a
// 10 s window; a's answer says 23 remaining: at most 24 a minute, 4 per
// 10 s window (headroom 1000). The token bucket holds 4 and refills one
// every 2.5 s, so alone it grants e at 2,500, the fifth request of the
// provider's fixed window [0, 10,000). The window counts slots of 1 s:
// a's slot [0, 1,000) leaves it when slot 11 begins, at 11,000. A limit
// header ends the window check: the bucket alone decides again.
func TestSlideWindow(t *testing.T) {
	cfg := testConfig(rpm("scope", "*", 600, 10_000))
	cfg.Learn.HeadroomPermille = 1000
	steps := []step{
		{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}},
		{At: 1, Ev: limitObs("a", 1, schemas.DimRequests, 0, 23)},
		{At: 2, Ev: reserve("b"), Want: []string{"b/1 granted admitted"}},
		{At: 2, Ev: reserve("c"), Want: []string{"c/1 granted admitted"}},
		{At: 2, Ev: reserve("d"), Want: []string{"d/1 granted admitted"}},
		// The bucket has refilled one request; the window holds four.
		{At: 2_500, Ev: reserve("e", class("batch")), Want: []string{"e/1 queued capacity queued"}},
		{At: 10_000, Ev: tick()},
		{At: 10_999, Ev: tick()},
		{At: 11_000, Ev: tick(), Want: []string{"e/1 granted queued_then_admitted"}},
		// a (seeded at the report), b, c, d (slot 0) leave at 11,000 too:
		// the bucket, full again (4), and the window take e, f, g, h.
		{At: 11_001, Ev: reserve("f", class("batch")), Want: []string{"f/1 granted admitted"}},
		{At: 11_002, Ev: reserve("g", class("batch")), Want: []string{"g/1 granted admitted"}},
		{At: 11_003, Ev: reserve("h", class("batch")), Want: []string{"h/1 granted admitted"}},
		// The fifth of the window [11,000, 21,000): i waits for slot 11
		// to leave, at 22,000, though the bucket refills one at 13,503.
		{At: 12_504, Ev: reserve("i", class("batch")), Want: []string{"i/1 queued capacity queued"}},
		{At: 13_503, Ev: tick()},
		{At: 15_010, Ev: tick()},
		// A limit header of the same 24 a minute: the bucket alone.
		{At: 15_020, Ev: limitObs("h", 1, schemas.DimRequests, 24, 20), Want: []string{"i/1 granted queued_then_admitted"}},
	}
	runSteps(t, cfg, steps)
}
