package ledgerd

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestDecisionBeforeCommit: a decision is on sluice.decisions, readable
// read_uncommitted, while its transaction is still open (the commit is off
// the decision path), and a read_committed reader gets it once the member
// stops and commits what it decided.
func TestDecisionBeforeCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rig := newKfakeRig(t, ctx, "committest.", 1, benchLedgerConfig)
	brokers, names, adm := rig.brokers, rig.names, rig.cl
	// A transaction open far longer than this test: only the stop
	// commits it.
	svc, err := New(ctx, Config{Brokers: brokers, Topics: names, Node: "commit-a", Group: "committest.ledger",
		CommitInterval: 5 * time.Minute, TransactionTimeout: 10 * time.Minute,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	lctx, stopLoop := context.WithCancel(ctx)
	loopDone := make(chan error, 1)
	go func() { loopDone <- svc.Loop(lctx) }()

	ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
	ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = "req-1", 1, "gw", "scope", "t", "k", "interactive"
	ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "key", ID: "k"}}, InputTokens: 10, OutputTokens: 10}
	b, err := schemas.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.ProduceSync(ctx, &kgo.Record{Topic: names.Requests, Key: []byte("scope"), Value: b}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	decision := func(iso kgo.IsolationLevel) *schemas.Event {
		cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Decisions),
			kgo.FetchIsolationLevel(iso), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		for ctx.Err() == nil {
			var got *schemas.Event
			cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				var d schemas.Event
				if schemas.Decode(r.Value, &d) == nil && d.Decision != nil && d.RequestID == "req-1" {
					got = &d
				}
			})
			if got != nil {
				return got
			}
		}
		t.Fatal("no decision")
		return nil
	}
	uncommitted := decision(kgo.ReadUncommitted())
	if n := testutil.ToFloat64(svc.m.transactions); n != 0 {
		t.Fatalf("transactions committed before the stop = %v, want 0 (the interval is minutes)", n)
	}
	stopLoop()
	if err := <-loopDone; err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(svc.m.transactions); n != 1 {
		t.Fatalf("transactions committed at the stop = %v, want 1", n)
	}
	committed := decision(kgo.ReadCommitted())
	if committed.ID != uncommitted.ID || committed.Decision.Status != schemas.StatusGranted {
		t.Errorf("committed decision %s (%s), acted-on %s: want the same grant", committed.ID, committed.Decision.Status, uncommitted.ID)
	}
}

// TestBatchMaxBytes: only snapshot batches may be as large as a snapshot;
// every other topic's batches stay within the broker's default
// max.message.bytes, which franz-go checks before compression.
func TestBatchMaxBytes(t *testing.T) {
	names := bus.NamesWithPrefix("batchmax.")
	max := batchMaxBytes(names)
	for _, tc := range []struct {
		topic string
		want  int32
	}{
		{names.Snapshots, bus.SnapshotMaxBytes},
		{names.Decisions, brokerMaxMessageBytes},
		{names.Requests, brokerMaxMessageBytes},
		{"other", brokerMaxMessageBytes},
	} {
		if got := max(tc.topic); got != tc.want {
			t.Errorf("batchMaxBytes(%q) = %d, want %d", tc.topic, got, tc.want)
		}
	}
}
