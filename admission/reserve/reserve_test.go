package reserve

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestReleaseEventHasOnePayload: the Released for an abandoned wait is
// valid whatever event was waited on. It used to be a copy of that event,
// so a retry attempt's Released still carried its RetryRequested, failed
// validation and was never produced; the reservation then stayed queued
// until its deadline or held until the hold TTL.
func TestReleaseEventHasOnePayload(t *testing.T) {
	env := func(typ schemas.Type, attempt int32) *schemas.Event {
		ev := schemas.New(typ, 1)
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope = "r1", attempt, "gw-1", "scope-a"
		ev.Tenant, ev.KeyID, ev.Route, ev.Class = "acme", "k1", "chat", "interactive"
		return ev
	}
	reserveEv := env(schemas.TypeReserveRequested, 1)
	reserveEv.ReserveRequested = &schemas.ReserveRequested{InputTokens: 10, OutputTokens: 5}
	retryEv := env(schemas.TypeRetryRequested, 2)
	retryEv.RetryRequested = &schemas.RetryRequested{PreviousAttempt: 1, Reason: "retryable_capacity"}
	retryNoAttempt := env(schemas.TypeRetryRequested, 0)
	retryNoAttempt.RetryRequested = &schemas.RetryRequested{PreviousAttempt: 2, Reason: "retryable_overload"}

	for _, c := range []struct {
		name        string
		ev          *schemas.Event
		wantAttempt int32
	}{
		{"reserve", reserveEv, 1},
		{"retry", retryEv, 2},
		{"retry without attempt", retryNoAttempt, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			rel := releaseEvent(c.ev, "cancel", 7)
			if _, err := schemas.Encode(rel); err != nil {
				t.Fatalf("Released does not encode: %v", err)
			}
			if rel.Type != schemas.TypeReleased || rel.Released == nil || rel.Released.Reason != "cancel" ||
				rel.ReserveRequested != nil || rel.RetryRequested != nil {
				t.Fatalf("payloads: %+v", rel)
			}
			if rel.RequestID != "r1" || rel.Attempt != c.wantAttempt || rel.Scope != "scope-a" || rel.Node != "gw-1" ||
				rel.Tenant != "acme" || rel.KeyID != "k1" || rel.Route != "chat" || rel.Class != "interactive" {
				t.Fatalf("envelope: %+v, want attempt %d", rel, c.wantAttempt)
			}
			if rel.ID == c.ev.ID || rel.ProducedAtMs != 7 {
				t.Fatalf("id %q (waited-on %q), produced_at_ms %d", rel.ID, c.ev.ID, rel.ProducedAtMs)
			}
		})
	}
}
