//go:build integration

package reserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestReconcileRidesWithNextReserve: with reconciles coalesced (the
// default), a request costs one produce request to sluice.requests, not
// two: each Reconciled goes in the produce request of the next reserve of
// its scope, and the partition still holds the events in the order they
// were sent (reserve i, reconcile i, reserve i+1, …). The last reconcile,
// with no reserve after it, goes on its own once its linger runs out.
func TestReconcileRidesWithNextReserve(t *testing.T) {
	names, brokers := topics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc, err := reserve.New(ctx, reserve.Config{Brokers: brokers, Topics: names, Node: "gw-test",
		HeartbeatInterval: -1, ReconcileLinger: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	before := rc.Stats().ProduceRequests
	for i := range n {
		ev := reserveEvent("r-ride-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		if err := rc.Request(ctx, ev); err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
		rec := eventid.Derive(ev, schemas.TypeReconciled, time.Now().UnixMilli())
		rec.Reconciled = &schemas.Reconciled{InputTokens: 1, OutputTokens: 1, HTTPStatus: 200}
		rc.Send(rec, func(err error) {
			if err != nil {
				t.Errorf("reconcile %d: %v", i, err)
			}
		})
	}
	// The last reconcile waits for its linger, then goes alone.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, alone := rc.Coalesced(); alone == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	rides, alone := rc.Coalesced()
	produced := rc.Stats().ProduceRequests - before
	rc.Close()
	if rides != n-1 || alone != 1 {
		t.Errorf("rides %d, alone %d; want %d and 1", rides, alone, n-1)
	}
	// n reserves, n reconciles: n+1 requests when every reconcile rode
	// with the next reserve; a few more are the producer draining the
	// first of a pair before the second was buffered, which the figure
	// in the bench (produce_requests_per_request) reports.
	t.Logf("%d produce requests for %d reserves and %d reconciles", produced, n, n)
	if produced > n+n/4 {
		t.Errorf("%d produce requests for %d requests; want about one per request (≤ %d)", produced, n, n+n/4)
	}
	order := readScope(t, brokers, names, "scope-a", 2*n)
	for i := 0; i+1 < len(order); i += 2 {
		a, b := order[i], order[i+1]
		if a.Type != schemas.TypeReserveRequested || b.Type != schemas.TypeReconciled || a.RequestID != b.RequestID {
			t.Fatalf("records %d, %d of the partition: %s %s then %s %s; want each reserve followed by its reconcile",
				i, i+1, a.Type, a.RequestID, b.Type, b.RequestID)
		}
	}
}

// readScope reads the partition of sluice.requests that holds scope's
// events until it has want of them.
func readScope(t *testing.T, brokers []string, names bus.Names, scope string, want int) []schemas.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Requests),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []schemas.Event
	for len(got) < want && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.Scope == scope {
				got = append(got, ev)
			}
		})
	}
	if len(got) < want {
		t.Fatalf("%d events of %s on %s, want %d", len(got), scope, names.Requests, want)
	}
	return got
}
