package lifecycle

import (
	"slices"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestEligible: one row per rule of which targets a request may use.
func TestEligible(t *testing.T) {
	offers := func(ctx int64, tools, structured bool) Target {
		tg := target("s")
		tg.ContextTokens, tg.Tools, tg.StructuredOutput = ctx, tools, structured
		return tg
	}
	unserved := target("s")
	unserved.Unserved = true
	plain := target("s")
	tests := []struct {
		name              string
		fallback          bool
		estimate          int64 // input + output tokens, split evenly
		tools, structured bool
		targets           []Target
		want              []int
	}{
		{name: "primary alone", targets: []Target{plain}, want: []int{0}},
		{name: "no fallback unless the client allows it", targets: []Target{plain, plain}, want: []int{0}},
		{name: "fallbacks in route order", fallback: true, targets: []Target{plain, plain, plain}, want: []int{0, 1, 2}},
		{name: "nothing speaks the API", fallback: true, targets: []Target{unserved, unserved}, want: nil},
		{name: "the first target that serves is the primary", fallback: true, targets: []Target{unserved, plain, plain}, want: []int{1, 2}},
		{name: "an unserved fallback is skipped", fallback: true, targets: []Target{plain, unserved, plain}, want: []int{0, 2}},
		// The primary is the route's own choice: it is never held to fit.
		{name: "the primary need not fit", fallback: true, estimate: 1000, tools: true, structured: true,
			targets: []Target{offers(10, false, false)}, want: []int{0}},
		{name: "a window too small", fallback: true, estimate: 1000, targets: []Target{plain, offers(999, false, false), offers(1000, false, false)}, want: []int{0, 2}},
		{name: "an unknown window is not checked", fallback: true, estimate: 1 << 40, targets: []Target{plain, offers(0, false, false)}, want: []int{0, 1}},
		{name: "tools needed", fallback: true, tools: true, targets: []Target{plain, offers(0, false, true), offers(0, true, false)}, want: []int{0, 2}},
		{name: "structured output needed", fallback: true, structured: true, targets: []Target{plain, offers(0, true, false), offers(0, false, true)}, want: []int{0, 2}},
		{name: "tools offered but not needed", fallback: true, targets: []Target{plain, offers(0, true, true)}, want: []int{0, 1}},
		{name: "every need at once", fallback: true, estimate: 100, tools: true, structured: true,
			targets: []Target{plain, offers(50, true, true), offers(100, true, false), offers(100, true, true)}, want: []int{0, 3}},
	}
	for _, tc := range tests {
		req := request()
		req.FallbackAllowed, req.NeedsTools, req.NeedsStructuredOutput = tc.fallback, tc.tools, tc.structured
		req.Estimate = Usage{InputTokens: tc.estimate / 2, OutputTokens: tc.estimate - tc.estimate/2}
		req.Targets = tc.targets
		if got := Eligible(&req); !slices.Equal(got, tc.want) {
			t.Errorf("%s: eligible %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFallbackSkipsTargetsThatDoNotFit: the lifecycle only ever reserves
// and dispatches eligible targets, and Dispatch names the route's index.
func TestFallbackSkipsTargetsThatDoNotFit(t *testing.T) {
	req := request("s1", "s2", "s3")
	req.NeedsTools = true
	req.Targets[2].Tools = true // s2 lacks tools: skipped
	runSteps(t, testConfig, req, []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"},
			Check: func(t *testing.T, _ *Lifecycle, out []Effect) {
				if !out[0].Event.ReserveRequested.FallbackAllowed {
					t.Errorf("the reservation must allow fallback: an eligible fallback exists")
				}
			}},
		{At: 1005, In: denied(1, schemas.ReasonQueueFull, schemas.RetryOverload, true), Want: []string{"wait_ended s1 denied",
			"produce ReserveRequested s3/2", "timer answer/2 @3005"}},
		{At: 1010, In: granted(2, 1010), Want: []string{"wait_ended s3 granted", "telemetry Dispatched s3/2", "dispatch 2/2"}},
	})
	// No fallback fits: the reservation says so, and the denial is the answer.
	req.Targets[2].Tools = false
	runSteps(t, testConfig, req, []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"},
			Check: func(t *testing.T, _ *Lifecycle, out []Effect) {
				if out[0].Event.ReserveRequested.FallbackAllowed {
					t.Errorf("the reservation allows fallback with no eligible fallback")
				}
			}},
		{At: 1005, In: denied(1, schemas.ReasonQueueFull, schemas.RetryOverload, true), Want: []string{"wait_ended s1 denied",
			"telemetry Outcome s1/1 failure rejected_locally", "count requests rate_limit_exceeded", "respond 429 rate_limit_exceeded rejected_locally"}},
	})
}
