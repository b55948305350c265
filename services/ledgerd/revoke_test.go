package ledgerd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestRevokeBeforeTransactionDoesNotAbort starts a ledger alone (it takes
// every partition and commits the config's decisions), then a second one,
// whose join revokes half of the first one's partitions while no
// transaction is open. franz-go remembers that revoke and aborted the first
// one's next transaction, begun after the group was stable again (the
// noisy-neighbor loadtest's one abort 47 ms into the load). Every request
// is decided once and neither ledger aborts.
func TestRevokeBeforeTransactionDoesNotAbort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rig := newKfakeRig(t, ctx, "revoketest.", 2, benchLedgerConfig)
	brokers, names, kadmin, tc := rig.brokers, rig.names, rig.adm, rig.topics

	const group = "revoketest.ledger"
	start := func(node string) *Service {
		svc, err := New(ctx, Config{Brokers: brokers, Topics: names, Node: node, Group: group,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		lctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- svc.Loop(lctx) }()
		t.Cleanup(func() {
			stop()
			<-done
			svc.Close()
		})
		return svc
	}
	// stable waits until the group is stable with members members, each
	// owning a partition, and every partition assigned.
	stable := func(members int) {
		for ctx.Err() == nil {
			gs, err := kadmin.DescribeGroups(ctx, group)
			if err == nil {
				g := gs[group]
				owning := 0
				for _, m := range g.Members {
					if a, ok := m.Assigned.AsConsumer(); ok && len(a.Topics) > 0 && len(a.Topics[0].Partitions) > 0 {
						owning++
					}
				}
				if g.State == "Stable" && len(g.Members) == members && owning == members &&
					len(g.AssignedPartitions()[names.Requests]) == int(tc.RequestPartitions) {
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("group never stable with %d members", members)
	}

	a := start("revoke-a")
	stable(1)
	// Let a decide the config record on both partitions and commit.
	for ctx.Err() == nil && testutil.ToFloat64(a.m.transactions) == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	b := start("revoke-b")
	stable(2)

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const requests = 20
	for i := range requests {
		scope := fmt.Sprintf("scope-%d", i%4)
		ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = fmt.Sprintf("req-%03d", i), 1, "gw", scope, "t", "k-"+scope, "interactive"
		ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "key", ID: "k-" + scope}}, InputTokens: 10, OutputTokens: 10}
		v, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		// Both partitions, so that both members decide.
		r := &kgo.Record{Topic: names.Requests, Partition: int32(i % 2), Key: []byte(scope), Value: v}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Decisions),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ids := map[string]int{}
	perRequest := map[string]int{}
	for len(perRequest) < requests && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.Decision != nil && ev.RequestID != "" {
				perRequest[ev.RequestID]++
				ids[ev.ID]++
			}
		})
	}
	if len(perRequest) != requests {
		t.Fatalf("%d of %d requests decided", len(perRequest), requests)
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("decision %s committed %d times", id, n)
		}
	}
	for _, m := range []struct {
		node string
		svc  *Service
	}{{"a", a}, {"b", b}} {
		if aborts := testutil.ToFloat64(m.svc.m.aborts); aborts != 0 {
			t.Errorf("ledger %s: %v aborted transactions, want 0", m.node, aborts)
		}
	}
}
