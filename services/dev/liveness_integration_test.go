//go:build integration

package dev_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
	"github.com/sluice-dev/sluice/services/dev"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// TestDeadGatewayCapacityComesBack: on the real broker with the real
// ledger service, a gateway takes every concurrency unit of a scope and
// dies without releasing them (its client closes: heartbeats stop). A
// waiter of another gateway is granted once the ledger finds the dead node
// silent for node_liveness_ms, long before the 120 s hold TTL, and the
// dead node's grants are expired as node_lost.
func TestDeadGatewayCapacityComesBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	brokers := bus.SplitBrokers(testenv.KafkaBrokers(t))
	names := bus.NamesWithPrefix(fmt.Sprintf("test%d.", time.Now().UnixNano()))
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: brokers, Topics: names, Partitions: 2})
	if err != nil {
		t.Fatalf("dev stack on the real broker: %v", err)
	}
	defer st.Close()

	// node_liveness_ms stays at its default (10 s): a claim about the real
	// broker is measured at the default settings.
	lc := ledger.DefaultDevConfig()
	lc.HoldTTLMs = 120_000 // what the dead gateway's units would be lost for
	lc.Scopes = append(lc.Scopes, ledger.ScopeConfig{Name: "scope-live", Buckets: []ledger.BucketConfig{
		{Level: ledger.LevelScope, ID: "*", Dimension: schemas.DimConcurrency, Capacity: 2},
	}})
	lj, err := json.Marshal(lc)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgerd.PublishConfig(ctx, brokers, names, lj, "liveness integration test"); err != nil {
		t.Fatal(err)
	}
	ask := func(rc *reserve.Client, node, id, class string) schemas.Decision {
		t.Helper()
		ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Class = id, 1, node, "scope-live", class
		ev.ReserveRequested = &schemas.ReserveRequested{InputTokens: 10, OutputTokens: 10}
		d, err := rc.Reserve(ctx, ev)
		if err != nil {
			t.Fatalf("reserve %s: %v", id, err)
		}
		return d
	}

	// Generous answer bounds: the ledger member may still be joining its
	// group when the stack is up, and that is not what is tested here.
	dying, err := reserve.New(ctx, reserve.Config{Brokers: brokers, Topics: names, Node: "gw-dying", AnswerTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"held-1", "held-2"} {
		if d := ask(dying, "gw-dying", id, "interactive"); d.Status != schemas.StatusGranted {
			t.Fatalf("%s: %+v, want granted", id, d)
		}
	}
	// The client's first heartbeat in the scope went out ahead of its
	// first request, so the ledger tracks the node already.
	dying.Close() // killed with grants in flight: no Reconciled, no Released
	died := time.Now()

	alive, err := reserve.New(ctx, reserve.Config{Brokers: brokers, Topics: names, Node: "gw-alive", AnswerTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Close()
	d := ask(alive, "gw-alive", "waiter", "batch") // waits up to the batch class's 20 min
	back := time.Since(died)
	if d.Status != schemas.StatusGranted {
		t.Fatalf("waiter: %+v, want granted once the dead gateway's units come back", d)
	}
	t.Logf("capacity back %v after the gateway died (node_liveness_ms default, hold TTL %d ms)", back.Round(time.Millisecond), lc.HoldTTLMs)

	lost := lostDecisions(ctx, t, brokers, names.Decisions, 2)
	for _, id := range []string{"held-1", "held-2"} {
		if lost[id] != string(schemas.ReasonNodeLost) {
			t.Errorf("%s: expired reason %q, want %s (saw %v)", id, lost[id], schemas.ReasonNodeLost, lost)
		}
	}
}

// lostDecisions reads topic from its start until it has seen n hold-expired
// decisions, and returns their reasons by request id.
func lostDecisions(ctx context.Context, t *testing.T, brokers []string, topic string, n int) map[string]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out := map[string]string{}
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.Decision != nil && ev.Decision.HoldExpired() {
				out[ev.RequestID] = string(ev.Decision.Reason)
			}
		})
	}
	return out
}
