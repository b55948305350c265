package lifecycle

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// reserveOf is the ReserveRequested among a step's effects.
func reserveOf(t *testing.T, out []Effect) *schemas.ReserveRequested {
	t.Helper()
	for _, e := range out {
		if e.Event != nil && e.Event.ReserveRequested != nil {
			return e.Event.ReserveRequested
		}
	}
	t.Fatal("no ReserveRequested")
	return nil
}

// TestEachTargetReservesItsOwnEstimate: a target whose provider counts the
// request otherwise (a chat completion translated to Anthropic Messages)
// reserves, fits and reconciles a cut stream with its own estimate; the
// others with the request's.
func TestEachTargetReservesItsOwnEstimate(t *testing.T) {
	req := request("s1", "s2")
	req.Targets[1].Kind = schemas.ProviderAnthropic
	req.Targets[1].Estimate = Usage{InputTokens: 130, OutputTokens: 50}
	req.Targets[1].InputCostPerMTok = 3
	want := func(in, out int64) func(*testing.T, *Lifecycle, []Effect) {
		return func(t *testing.T, _ *Lifecycle, effects []Effect) {
			if rr := reserveOf(t, effects); rr.InputTokens != in || rr.OutputTokens != out {
				t.Errorf("reserved in=%d out=%d, want %d/%d", rr.InputTokens, rr.OutputTokens, in, out)
			}
		}
	}
	runSteps(t, testConfig, req, []step{
		{At: 1000, In: start(), Want: []string{"produce ReserveRequested s1/1", "timer answer/1 @3000"}, Check: want(100, 50)},
		{At: 1005, In: denied(1, schemas.ReasonQueueFull, schemas.RetryOverload, true), Want: []string{"wait_ended s1 denied",
			"produce ReserveRequested s2/2", "timer answer/2 @3005"}, Check: func(t *testing.T, l *Lifecycle, out []Effect) {
			want(130, 50)(t, l, out)
			if rr := reserveOf(t, out); rr.SpendMicros != 390 {
				t.Errorf("spend %d, want 390 (130 tokens at 3 USD/Mtok)", rr.SpendMicros)
			}
		}},
		{At: 1010, In: granted(2, 1010), Want: []string{"wait_ended s2 granted", "telemetry Dispatched s2/2", "dispatch 1/2"}},
		{At: 1020, In: streamStarted(2), Want: []string{"relay 2"}},
		// A cut stream whose provider never reported input: the input the
		// target's estimate said.
		{At: 1100, In: streamEnded(2, schemas.ReasonClientDisconnect), Want: []string{"report Reconciled s2/2 499 in=130 out=7 partial",
			"telemetry Outcome s2/2 cancelled admitted", "count requests cancelled"}},
	})
	// Fits uses the target's estimate: 180 tokens do not fit 150.
	req.Targets[1].ContextTokens = 150
	if req.Fits(&req.Targets[1]) {
		t.Error("a target whose own estimate exceeds its context window fits")
	}
	req.Targets[1].ContextTokens = 180
	if !req.Fits(&req.Targets[1]) {
		t.Error("a target whose own estimate fits its context window does not fit")
	}
}
