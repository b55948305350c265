package ledgerd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestAbortReproducesWithoutRebuild makes the broker refuse the ledger's
// first transactional offset commits with CONCURRENT_TRANSACTIONS (what a
// Kafka 4 broker answers while the previous transaction completes). The
// transactions abort, yet no partition is rebuilt: the next transaction
// produces the same decisions again, and every request ends with exactly
// one committed decision.
func TestAbortReproducesWithoutRebuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rig := newKfakeRig(t, ctx, "aborttest.", 2, benchLedgerConfig)
	c, brokers, names, tc := rig.c, rig.brokers, rig.names, rig.topics

	const refusals = 3
	var refused atomic.Int32
	c.ControlKey(int16(kmsg.TxnOffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		if refused.Load() >= refusals {
			return nil, nil, false
		}
		c.KeepControl()
		refused.Add(1)
		return testenv.RefuseTxnOffsetCommit(kr.(*kmsg.TxnOffsetCommitRequest), kerr.ConcurrentTransactions.Code), nil, true
	})

	reg := prometheus.NewRegistry()
	svc, err := New(ctx, Config{Brokers: brokers, Topics: names, Node: "abort-a", Group: "aborttest.ledger",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	loopDone := make(chan error, 1)
	lctx, stopLoop := context.WithCancel(ctx)
	go func() { loopDone <- svc.Loop(lctx) }()
	defer func() {
		stopLoop()
		<-loopDone
		svc.Close()
	}()

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const requests = 40
	for i := range requests {
		scope := fmt.Sprintf("scope-%d", i%4)
		ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = fmt.Sprintf("req-%03d", i), 1, "gw", scope, "t", "k-"+scope, "interactive"
		ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "key", ID: "k-" + scope}}, InputTokens: 10, OutputTokens: 10}
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: names.Requests, Key: []byte(scope), Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// Read committed decisions until every request has one.
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Decisions),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	perRequest := map[string]int{}
	ids := map[string]int{}
	for len(perRequest) < requests && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.Decision != nil {
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
	if got := refused.Load(); got != refusals {
		t.Fatalf("broker refused %d offset commits, want %d", got, refusals)
	}
	if aborts := testutil.ToFloat64(svc.m.aborts); aborts != refusals {
		t.Errorf("aborts = %v, want %d (one per refused commit)", aborts, refusals)
	}
	// Each partition is built once, on assignment; an abort rebuilds none.
	if rebuilds := testutil.ToFloat64(svc.m.rebuilds); rebuilds > float64(tc.RequestPartitions) {
		t.Errorf("partition rebuilds = %v, want at most %d (assignment only)", rebuilds, tc.RequestPartitions)
	}
}

// TestCommitOffsets: the committed offset of each partition is what its
// ledger applied; partitions without state are not committed.
func TestCommitOffsets(t *testing.T) {
	mk := func(p int32, off int64) kmsg.TxnOffsetCommitRequestTopicPartition {
		x := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		x.Partition, x.Offset, x.LeaderEpoch = p, off, 3
		return x
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	in := kmsg.NewTxnOffsetCommitRequestTopic()
	in.Topic = "requests"
	in.Partitions = []kmsg.TxnOffsetCommitRequestTopicPartition{mk(0, 90), mk(1, 50), mk(2, 7)}
	other := kmsg.NewTxnOffsetCommitRequestTopic()
	other.Topic = "other"
	other.Partitions = []kmsg.TxnOffsetCommitRequestTopicPartition{mk(0, 5)}
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{in, other}

	if err := commitOffsets("requests", map[int32]int64{0: 80, 1: 50, 3: 12})(req); err != nil {
		t.Fatal(err)
	}
	got := map[int32]int64{}
	for _, p := range req.Topics[0].Partitions {
		got[p.Partition] = p.Offset
	}
	want := map[int32]int64{0: 80, 1: 50, 3: 12}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests offsets = %v, want %v", got, want)
	}
	if p := req.Topics[1].Partitions; len(p) != 1 || p[0].Offset != 5 {
		t.Errorf("another topic's offsets changed: %+v", p)
	}
}
