package lifecycle

import (
	"strings"
	"testing"
)

// TestInvariantsCatchCorruption proves the -tags invariants checks are not
// vacuous: a healthy step passes, and each corruption of the state or of
// the step's effects is reported with what broke.
func TestInvariantsCatchCorruption(t *testing.T) {
	cfg := Config{AnswerTimeoutMs: 50}
	for _, tc := range []struct {
		name    string
		corrupt func(l *Lifecycle)
		want    string
	}{
		{"healthy", func(*Lifecycle) {}, ""},
		{"two responses", func(l *Lifecycle) {
			l.out = append(l.out, Effect{Kind: Respond}, Effect{Kind: Respond})
		}, "2 responses"},
		{"response without an end", func(l *Lifecycle) { l.out = append(l.out, Effect{Kind: Respond}) }, "did not end"},
		{"ended without an outcome", func(l *Lifecycle) { l.phase = done }, "outcomes"},
		{"dispatch of a later attempt", func(l *Lifecycle) {
			l.out = append(l.out, Effect{Kind: Dispatch, Attempt: l.attempt + 1})
		}, "attempt"},
		{"waiting without a reservation", func(l *Lifecycle) { l.rec = nil }, "without a reservation"},
		{"target out of range", func(l *Lifecycle) { l.ti = len(l.order) }, "eligible"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(cfg, request("s1"))
			l.Step(1000, start())
			tc.corrupt(l)
			err := l.checkInvariants(0)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("healthy step reported: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
