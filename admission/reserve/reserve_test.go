package reserve

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestReleaseEventHasOnePayload: the Released for an abandoned wait is
// valid whatever event was waited on. It used to be a copy of that event,
// so a retry attempt's Released still carried its RetryRequested, failed
// validation and was never produced; the reservation then stayed queued
// until its deadline or held until the hold TTL.
func TestReleaseEventHasOnePayload(t *testing.T) {
	env := func(typ schemas.Type, attempt int32) *schemas.Event {
		ev := eventid.New(typ, 1)
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

// TestActivityDecidesWhichScopesHeartbeat: a scope is heartbeated while a
// decision is awaited in it and until the hold TTL of its last grant.
func TestActivityDecidesWhichScopesHeartbeat(t *testing.T) {
	granted := func(holdMs int64) schemas.Decision {
		return schemas.Decision{Status: schemas.StatusGranted, HoldTTLMs: holdMs}
	}
	a := newActivity()
	type step struct {
		at    int64
		do    func() bool // nil: only check
		first bool
		want  []string
	}
	begin := func(sc string) func() bool { return func() bool { return a.begin(sc, 0) } }
	end := func(sc string, d schemas.Decision, at int64) func() bool {
		return func() bool { a.end(sc, d, at); return false }
	}
	steps := []step{
		{at: 0, want: []string{}},
		{at: 0, do: begin("s1"), first: true, want: []string{"s1"}},
		{at: 0, do: begin("s1"), first: false, want: []string{"s1"}},
		{at: 0, do: begin("s2"), first: true, want: []string{"s1", "s2"}},
		// s2's wait ends without a grant: nothing to hold there.
		{at: 10, do: end("s2", schemas.Decision{Status: schemas.StatusDenied}, 10), want: []string{"s1"}},
		{at: 10, do: end("s1", granted(1000), 10), want: []string{"s1"}},
		{at: 20, do: end("s1", granted(500), 20), want: []string{"s1"}},
		{at: 1009, want: []string{"s1"}},
		{at: 1010, want: []string{}},
		{at: 1010, do: begin("s1"), first: true, want: []string{"s1"}},
		{at: 1020, do: end("s1", schemas.Decision{Status: schemas.StatusGranted}, 1020), want: []string{"s1"}}, // emergency: no TTL given
		{at: 1020 + defaultHoldMs - 1, want: []string{"s1"}},
		{at: 1020 + defaultHoldMs, want: []string{}},
	}
	for i, s := range steps {
		if s.do != nil {
			if first := s.do(); first != s.first {
				t.Errorf("step %d: first = %v, want %v", i, first, s.first)
			}
		}
		got := a.due(s.at, nil)
		if len(got) != len(s.want) || (len(got) > 0 && strings.Join(got, ",") != strings.Join(s.want, ",")) {
			t.Errorf("step %d (t=%d): due %q, want %q", i, s.at, got, s.want)
		}
	}
}

// TestHeartbeatsAreProduced: while Reserve waits in a scope, the client
// puts Heartbeats of its node, keyed by that scope, on sluice.requests —
// the first one before the request itself.
func TestHeartbeatsAreProduced(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx := context.Background()
	brokers := cluster.ListenAddrs()
	names := bus.DefaultNames()
	adm, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := bus.Ensure(ctx, kadm.NewClient(adm), bus.DefaultTopics().Specs()); err != nil {
		t.Fatal(err)
	}
	rc, err := New(ctx, Config{Brokers: brokers, Node: "gw-hb", HeartbeatInterval: 20 * time.Millisecond, AnswerTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wait, cancel := context.WithCancel(ctx)
	res := make(chan error, 1)
	ev := eventid.New(schemas.TypeReserveRequested, 1)
	ev.RequestID, ev.Attempt, ev.Node, ev.Scope = "r-hb", 1, "gw-hb", "scope-hb"
	ev.ReserveRequested = &schemas.ReserveRequested{InputTokens: 1}
	go func() { _, err := rc.Reserve(wait, ev); res <- err }()

	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Requests), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var seq []schemas.Type // of scope-hb, in log order
	beats := 0
	poll, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	for beats < 3 && poll.Err() == nil {
		cons.PollFetches(poll).EachRecord(func(r *kgo.Record) {
			var e schemas.Event
			if schemas.Decode(r.Value, &e) != nil || string(r.Key) != "scope-hb" {
				return
			}
			seq = append(seq, e.Type)
			if e.Type == schemas.TypeHeartbeat {
				if e.Node != "gw-hb" || e.Scope != "scope-hb" || e.Heartbeat == nil {
					t.Errorf("heartbeat %+v", e)
				}
				beats++
			}
		})
	}
	cancel()
	<-res
	rc.Close()
	if beats < 3 {
		t.Fatalf("saw %d heartbeats while waiting (events %v), want ≥ 3", beats, seq)
	}
	if seq[0] != schemas.TypeHeartbeat {
		t.Fatalf("first event of the scope is %s, want the Heartbeat ahead of the request (%v)", seq[0], seq)
	}
}
