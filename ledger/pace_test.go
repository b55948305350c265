package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestPacedMaxWait: a provider of 6,000 TPM over a 1 s window holds 100
// tokens, two thirds of a 150-token request, so it takes one such request
// per 1,500 ms (the pacing interval; 40 RPM over 1 s, as learned in
// noisy-neighbor-handwritten, is the same for requests). An interactive request (max wait 300 ms) arriving just after
// a grant cannot be granted within 300 ms by any order of the queue; it
// waits the interval on top of its max wait and is granted at the next
// refill, ahead of the aged batch backlog (deadline rescue). Before, it
// was denied wait_exceeds_max at once, and the batch waiter took the
// refill. A second interactive request behind it still expires at its
// bound (one interval plus the max wait), and a max wait the request
// named itself is kept.
func TestPacedMaxWait(t *testing.T) {
	tpm := func(perMin int64) BucketConfig {
		return BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimTotalTokens, Capacity: perMin, PeriodMs: 60_000, WindowMs: 1000}
	}
	cfg := testConfig(tpm(6000))
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("b1", class("batch")), Want: []string{"b1/1 granted admitted"}},
		{At: 0, Ev: reserve("b2", class("batch")), Want: []string{"b2/1 queued capacity queued"}},
		// The first record after 1,500 ms: the bucket is full again, and
		// the aged b2 (queued 31 s ago, age offset 30 s) is deferred behind
		// the interactive arrival, which takes the refill.
		{At: 31_000, Ev: reserve("i1"), Want: []string{"i1/1 granted admitted"}},
		// Full again at 32,500: 1,400 ms away, past i2's 300 ms max wait
		// but within it plus the interval (expiry 31,100 + 300 + 1,500).
		{At: 31_100, Ev: reserve("i2"), Want: []string{"i2/1 queued capacity queued"}},
		{At: 31_100, Ev: reserve("own", maxWait(300)), Want: []string{"own/1 denied wait_exceeds_max rejected_locally"}},
		// i3 waits behind i2 and expires at its bound, 31,200 + 300 +
		// 1,500, before the refill after i2's (34,000).
		{At: 31_200, Ev: reserve("i3"), Want: []string{"i3/1 queued capacity queued"}},
		{At: 32_499, Ev: tick()},
		{At: 32_500, Ev: tick(), Want: []string{"i2/1 granted queued_then_admitted"}},
		{At: 33_000, Ev: tick(), Want: []string{"i3/1 expired max_wait_exceeded queued_then_expired"}},
		{At: 34_000, Ev: tick(), Want: []string{"b2/1 granted queued_then_admitted"}},
	})
	// The interval itself, per bucket shape (paceMs).
	for _, tc := range []struct {
		name string
		b    BucketConfig
		want int64
	}{
		{"6,000 TPM, 1 s window: two thirds of a request", tpm(6000), 1500},
		{"13,500 TPM, 1 s window: 1.5 requests", tpm(13_500), 334}, // (150 + 150 − 225) × 60,000 / 13,500, rounded up
		{"18,000 TPM, 1 s window: two requests", tpm(18_000), 0},
		{"90,000 TPM, 1 s window: ten", tpm(90_000), 0},
		{"60 RPM, 1 s window: one request", rpm("scope", "*", 60, 1000), 1000},
		{"600 RPM, 1 s window: ten", rpm("scope", "*", 600, 1000), 0},
		{"1 an hour, window of the hour: a quota, not pacing", BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimRequests, Capacity: 1, PeriodMs: 3_600_000, WindowMs: 3_600_000}, 0},
	} {
		l := New(0, testConfig(tc.b))
		l.Apply(0, 0, reserve("a"), nil)
		ri, ok := l.resFind("a", 1)
		if !ok {
			t.Fatalf("%s: a not found", tc.name)
		}
		if got := l.paceMs(&l.st.Res[ri]); got != tc.want {
			t.Errorf("%s: pace %d ms, want %d", tc.name, got, tc.want)
		}
	}
}
