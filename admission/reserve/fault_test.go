package reserve

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// faultCluster is a kfake cluster with the Sluice topics, and a client of
// it with heartbeats off (they would interleave with what the tests read).
func faultCluster(t *testing.T, node string) (*kfake.Cluster, *Client) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	ctx := context.Background()
	adm, err := bus.NewClient(ctx, cluster.ListenAddrs(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := bus.Ensure(ctx, kadm.NewClient(adm), bus.DefaultTopics().Specs()); err != nil {
		t.Fatal(err)
	}
	rc, err := New(ctx, Config{Brokers: cluster.ListenAddrs(), Node: node, HeartbeatInterval: -1, AnswerTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return cluster, rc
}

// requestsOf reads sluice.requests from the start until it holds want
// events of request id (or the read's bound passes), in log order.
func requestsOf(t *testing.T, cluster *kfake.Cluster, id string, want int) []*schemas.Event {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(bus.DefaultNames().Requests),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []*schemas.Event
	for len(got) < want && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.RequestID == id {
				got = append(got, &ev)
			}
		})
	}
	return got
}

func faultReserve(id, node string) *schemas.Event {
	ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
	ev.RequestID, ev.Attempt, ev.Node, ev.Scope = id, 1, node, "scope-f"
	ev.ReserveRequested = &schemas.ReserveRequested{InputTokens: 1, OutputTokens: 1}
	return ev
}

// TestRequestEndsAtItsBoundWithTheBrokerFrozen (issue 19, D2): with the
// broker holding every produce unanswered, Request returns when its
// context ends — ProduceSync did not, an idempotent producer keeps a sent
// record until the broker answers — and the reserve, which reaches the
// log once the broker thaws, is followed there by the Released that gives
// it back.
func TestRequestEndsAtItsBoundWithTheBrokerFrozen(t *testing.T) {
	cluster, rc := faultCluster(t, "gw-f")
	thaw := testenv.FreezeProduce(cluster)
	defer thaw()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- rc.Request(ctx, faultReserve("r-frozen", "gw-f")) }()
	var err error
	select {
	case err = <-returned:
	case <-time.After(15 * time.Second): // a hang, not a slow answer
		t.Fatal("Request still waits on a frozen broker after its bound")
	}
	if !errors.Is(err, errAbandoned) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Request: %v, want an abandoned produce at the deadline", err)
	}
	if s := rc.Stats(); s.Abandoned != 1 {
		t.Errorf("stats %+v, want 1 abandoned", s)
	}
	thaw()
	got := requestsOf(t, cluster, "r-frozen", 2)
	var types []schemas.Type
	for _, ev := range got {
		types = append(types, ev.Type)
	}
	// The reserve may have been failed before it was sent (then only the
	// Released, a no-op for the ledger, lands); if it lands, the Released
	// is behind it.
	switch {
	case len(got) == 2 && got[0].Type == schemas.TypeReserveRequested && got[1].Type == schemas.TypeReleased:
	case len(got) == 1 && got[0].Type == schemas.TypeReleased:
	default:
		t.Fatalf("events of the request in log order: %v, want ReserveRequested then Released", types)
	}
	if rel := got[len(got)-1]; rel.Attempt != 1 || rel.Released.Reason != schemas.ReasonLedgerTimeout {
		t.Errorf("Released %+v", rel)
	}
}

// TestLateGrantOfAGivenUpAttemptIsReleased (D8): a grant that reaches the
// client for an attempt it gave up is released; one for an attempt it
// never gave up, with nobody watching (another process with the same node
// id, a restart), is left alone.
func TestLateGrantOfAGivenUpAttemptIsReleased(t *testing.T) {
	cluster, rc := faultCluster(t, "gw-late")
	ctx := context.Background()
	rc.abandon("r-gone", 1, time.Now().UnixMilli())

	parts, err := bus.PartitionCount(ctx, rc.prod, bus.DefaultNames().Decisions)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"r-other", "r-gone"} {
		// Decisions as the ledger writes them: ids and input offsets in
		// order, or the client's Dedup takes the second for a copy.
		d := eventid.New(schemas.TypeDecision, time.Now().UnixMilli())
		d.ID = fmt.Sprintf("d-0-%d-0", i+1)
		d.RequestID, d.Attempt, d.Node, d.Scope = id, 1, "gw-late", "scope-f"
		d.Decision = &schemas.Decision{Status: schemas.StatusGranted, HoldTTLMs: 120_000, InputOffset: int64(i + 1)}
		b, err := schemas.Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: bus.DefaultNames().Decisions, Partition: bus.DecisionPartition("gw-late", parts), Value: b}
		w, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	got := requestsOf(t, cluster, "r-gone", 1)
	if len(got) != 1 || got[0].Type != schemas.TypeReleased || got[0].Attempt != 1 || got[0].Scope != "scope-f" {
		t.Fatalf("events of the given-up request: %+v, want its Released", got)
	}
	if s := rc.Stats(); s.LateReleased != 1 {
		t.Errorf("stats %+v, want 1 late grant released", s)
	}
	if rc.takeAbandoned("r-gone", 1) {
		t.Error("the released attempt is still remembered")
	}
}

// TestFailedReleasedIsRetried (D8): a Released the broker refuses is
// produced again until it is delivered; a Heartbeat is not (the next one
// is its retry).
func TestFailedReleasedIsRetried(t *testing.T) {
	cluster, rc := faultCluster(t, "gw-retry")
	var refuse atomic.Int32
	refuse.Store(3)
	cluster.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if refuse.Add(-1) < 0 {
			return nil, nil, false
		}
		return testenv.RefuseProduce(kreq.(*kmsg.ProduceRequest), kerr.InvalidRecord.Code), nil, true
	})
	delivered := make(chan error, 1)
	rc.release(faultReserve("r-retry", "gw-retry"), schemas.ReasonError)
	rc.Send(releaseEvent(faultReserve("r-retry", "gw-retry"), schemas.ReasonError, time.Now().UnixMilli()), func(err error) { delivered <- err })
	select {
	case err := <-delivered:
		if err != nil {
			t.Fatalf("Released not delivered: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Released neither delivered nor given up")
	}
	if got := requestsOf(t, cluster, "r-retry", 2); len(got) != 2 {
		t.Fatalf("%d Released on the log, want 2", len(got))
	}
	if s := rc.Stats(); s.Retried < 1 || s.RetryDropped != 0 {
		t.Errorf("stats %+v, want retries and no drop", s)
	}
}

// TestRetryQueueBoundsAndExpires: the retry queue holds at most its limit,
// and gives a report up once its reservation has ended.
func TestRetryQueueBoundsAndExpires(t *testing.T) {
	q := retryQueue{max: 2}
	r := func(until int64) *report {
		return &report{ev: &schemas.Event{Type: schemas.TypeReleased}, untilMs: until}
	}
	steps := []struct {
		name        string
		push        *report
		pushed      bool
		takeAt      int64 // 0: no take
		due, expire int
	}{
		{name: "first", push: r(100), pushed: true},
		{name: "second", push: r(200), pushed: true},
		{name: "full", push: r(300), pushed: false},
		{name: "take before both ends", takeAt: 50, due: 2},
		{name: "again", push: r(100), pushed: true},
		{name: "again 2", push: r(200), pushed: true},
		{name: "one ended", takeAt: 100, due: 1, expire: 1},
		{name: "empty", takeAt: 1000},
	}
	for _, s := range steps {
		if s.push != nil {
			if ok := q.push(s.push); ok != s.pushed {
				t.Errorf("%s: push = %v, want %v", s.name, ok, s.pushed)
			}
			continue
		}
		due, expired := q.take(s.takeAt)
		if len(due) != s.due || len(expired) != s.expire {
			t.Errorf("%s: take(%d) = %d due, %d expired; want %d, %d", s.name, s.takeAt, len(due), len(expired), s.due, s.expire)
		}
	}
}

// TestReportsOfARequestKeepTheirOrder: a report sent while an earlier one
// of the same request waits in the retry queue goes in behind it, not
// straight to the broker, so the log has them in the order they were made
// — a degraded admission's Reconciled never precedes the ReserveRequested
// that creates its reservation. Another request's report is not held.
func TestReportsOfARequestKeepTheirOrder(t *testing.T) {
	cluster, rc := faultCluster(t, "gw-order")
	var refuse atomic.Int32
	refuse.Store(1)
	cluster.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if refuse.Add(-1) < 0 {
			return nil, nil, false
		}
		return testenv.RefuseProduce(kreq.(*kmsg.ProduceRequest), kerr.InvalidRecord.Code), nil, true
	})
	adm := faultReserve("r-order", "gw-order")
	adm.ReserveRequested.EmergencyAdmitted, adm.ReserveRequested.Degraded = true, true
	first := make(chan error, 1)
	rc.Send(adm, func(err error) { first <- err })
	for deadline := time.Now().Add(10 * time.Second); rc.Stats().RetryQueued == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the refused reservation never reached the retry queue")
		}
	}
	// The broker takes produces again; the reconcile must still wait.
	rec := eventid.Derive(adm, schemas.TypeReconciled, time.Now().UnixMilli())
	rec.Reconciled = &schemas.Reconciled{InputTokens: 1, OutputTokens: 1, HTTPStatus: 200}
	second := make(chan error, 1)
	rc.Send(rec, func(err error) { second <- err })
	if q := rc.Stats().RetryQueued; q != 2 {
		t.Errorf("%d reports queued after the reconcile, want 2 (it waits behind the reservation)", q)
	}
	other := make(chan error, 1)
	rc.Send(faultReserve("r-other", "gw-order"), func(err error) { other <- err })
	if q := rc.Stats().RetryQueued; q > 2 {
		t.Errorf("another request's report was held behind this one's (%d queued)", q)
	}
	for _, ch := range []chan error{first, second, other} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("not delivered: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a report was neither delivered nor given up")
		}
	}
	got := requestsOf(t, cluster, "r-order", 2)
	if len(got) != 2 || got[0].Type != schemas.TypeReserveRequested || got[1].Type != schemas.TypeReconciled {
		var types []schemas.Type
		for _, ev := range got {
			types = append(types, ev.Type)
		}
		t.Fatalf("log order %v, want ReserveRequested then Reconciled", types)
	}
}
