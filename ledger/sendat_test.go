package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// sendAtIs checks that the step's only decision carries send-at want.
func sendAtIs(want int64) func(t *testing.T, l *Ledger, out []Output) {
	return func(t *testing.T, _ *Ledger, out []Output) {
		t.Helper()
		if len(out) != 1 {
			t.Fatalf("%d decisions, want 1", len(out))
		}
		if got := out[0].Decision.SendAtMs; got != want {
			t.Errorf("%s/%d %s: send_at_ms %d, want %d", out[0].RequestID, out[0].Attempt, out[0].Decision.Status, got, want)
		}
	}
}

// TestSendAt: a grant through a requests bucket whose window holds at
// most one request carries SendAtMs = its log time +
// learn.pace_delivery_ms (default 150), whether the bucket was paced by a
// reported limit (paceBound) or configured so; a grant through a wider
// window, a queued decision and a negative allowance carry none.
func TestSendAt(t *testing.T) {
	batch := func(id string) *schemas.Event {
		ev := reserve(id)
		ev.Class = "batch"
		return ev
	}
	for _, tc := range []struct {
		name     string
		delivery int64
		wantMs   int64 // the allowance a paced grant carries; 0 none
	}{
		{"default", 0, 150},
		{"configured", 80, 80},
		{"off", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := func(logMs int64) int64 {
				if tc.wantMs == 0 {
					return 0
				}
				return logMs + tc.wantMs
			}
			// Learned: 400 RPM over 1 s (6.7 a window, unpaced) until the
			// headers report 40 (0.67 a window: paced, 39 at the default
			// headroom, 1,538.5 ms between grants).
			cfg := testConfig(rpm("scope", "*", 400, 1000))
			cfg.Learn.PaceDeliveryMs = tc.delivery
			runSteps(t, cfg, []step{
				{At: 0, Ev: batch("a"), Want: []string{"a/1 granted admitted"}, Check: sendAtIs(0)},
				{At: 1, Ev: limitObs("a", 1, schemas.DimRequests, 40, 39)},
				{At: 2, Ev: batch("b"), Want: []string{"b/1 granted admitted"}, Check: sendAtIs(at(2))},
				{At: 3, Ev: batch("d"), Want: []string{"d/1 queued capacity queued"}, Check: sendAtIs(0)},
				{At: 1_541, Ev: tick(), Want: []string{"d/1 granted queued_then_admitted"}, Check: sendAtIs(at(1_541))},
			})
			// Configured: 60 RPM over 1 s holds exactly one request a
			// window (a configured window holds at least one), paced from
			// the start.
			cfg = testConfig(rpm("scope", "*", 60, 1000))
			cfg.Learn.PaceDeliveryMs = tc.delivery
			runSteps(t, cfg, []step{
				{At: 5, Ev: batch("a"), Want: []string{"a/1 granted admitted"}, Check: sendAtIs(at(5))},
			})
			// 61 RPM over 1 s holds more than one: no send-at.
			cfg = testConfig(rpm("scope", "*", 61, 1000))
			cfg.Learn.PaceDeliveryMs = tc.delivery
			runSteps(t, cfg, []step{
				{At: 5, Ev: batch("a"), Want: []string{"a/1 granted admitted"}, Check: sendAtIs(0)},
			})
		})
	}
}

// TestSendAtAnyPace: compiled.anyPace, which lets sendAt skip its walk,
// is false for a document that never paces and turns true with every way
// a bucket comes to pace one request a window: configured so, a learned
// capacity lowered to it, a bucket the headers alone set, and each of
// these restored from a snapshot (relearn). A grant after each carries
// the send-at that the walk gives.
func TestSendAtAnyPace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		steps    []step
		wantPace bool // compiled.anyPace after the steps
	}{
		{"wide window", testConfig(rpm("scope", "*", 400, 1000)), []step{
			{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}, Check: sendAtIs(0)},
		}, false},
		{"configured", testConfig(rpm("scope", "*", 60, 1000)), []step{
			{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}, Check: sendAtIs(150)},
		}, true},
		{"learned", testConfig(rpm("scope", "*", 400, 1000)), []step{
			{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}, Check: sendAtIs(0)},
			{At: 1, Ev: limitObs("a", 1, schemas.DimRequests, 40, 39)},
			{At: 2, Ev: reserve("b"), Want: []string{"b/1 granted admitted"}, Check: sendAtIs(152)},
		}, true},
		{"headers only", testConfig(tpmWindow(1_000_000, 1000)), []step{
			{At: 0, Ev: reserve("a"), Want: []string{"a/1 granted admitted"}, Check: sendAtIs(0)},
			{At: 1, Ev: limitObs("a", 1, schemas.DimRequests, 40, 39)},
			{At: 2, Ev: reserve("b"), Want: []string{"b/1 granted admitted"}, Check: sendAtIs(152)},
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := runSteps(t, tc.cfg, tc.steps)
			if l.cc.anyPace != tc.wantPace {
				t.Fatalf("anyPace %v, want %v", l.cc.anyPace, tc.wantPace)
			}
			b, err := l.MarshalSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			r, err := Restore(b)
			if err != nil {
				t.Fatal(err)
			}
			if r.cc.anyPace != tc.wantPace {
				t.Fatalf("restored: anyPace %v, want %v", r.cc.anyPace, tc.wantPace)
			}
		})
	}
}
