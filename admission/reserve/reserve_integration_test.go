//go:build integration

package reserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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

// topics creates an isolated set of topics with no ledger behind them.
func topics(t *testing.T) (bus.Names, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokers := bus.SplitBrokers(testenv.KafkaBrokers(t))
	cl, err := bus.NewClient(ctx, brokers, 20*time.Second)
	if err != nil {
		t.Fatalf("real Kafka broker required (make up): %v", err)
	}
	names := bus.NamesWithPrefix(fmt.Sprintf("test%d.", time.Now().UnixNano()))
	tc := bus.DefaultTopics()
	tc.RequestPartitions, tc.Names = 2, names
	adm := kadm.NewClient(cl)
	if _, err := bus.Ensure(ctx, adm, tc.Specs()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), names.Created()...); cl.Close() })
	return names, brokers
}

func reserveEvent(id string) *schemas.Event {
	ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
	ev.RequestID, ev.Attempt, ev.Node, ev.Scope = id, 1, "gw-test", "scope-a"
	ev.ReserveRequested = &schemas.ReserveRequested{InputTokens: 1, OutputTokens: 1}
	return ev
}

// TestFailsClosedWithoutLedger: no ledger answers, so Reserve fails with
// ErrLedgerUnavailable after the bound, and tells the ledger (when it comes
// back) to release the abandoned request.
func TestFailsClosedWithoutLedger(t *testing.T) {
	names, brokers := topics(t)
	ctx := context.Background()
	rc, err := reserve.New(ctx, reserve.Config{Brokers: brokers, Topics: names, Node: "gw-test", AnswerTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_, err = rc.Reserve(ctx, reserveEvent("r-closed"))
	if !errors.Is(err, reserve.ErrLedgerUnavailable) {
		t.Fatalf("Reserve = %v, want ErrLedgerUnavailable", err)
	}
	if got := released(t, brokers, names, "r-closed"); got != "ledger_timeout" {
		t.Fatalf("released reason %q, want ledger_timeout", got)
	}
}

// TestCancelledWaitReleases: a caller that gives up while waiting makes
// the client produce a Released event for that request.
func TestCancelledWaitReleases(t *testing.T) {
	names, brokers := topics(t)
	rc, err := reserve.New(context.Background(), reserve.Config{Brokers: brokers, Topics: names, Node: "gw-test", AnswerTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := rc.Reserve(ctx, reserveEvent("r-cancel")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve = %v, want the caller's deadline", err)
	}
	if got := released(t, brokers, names, "r-cancel"); got != "cancel" {
		t.Fatalf("released reason %q, want cancel", got)
	}
}

// released reads the requests topic for the Released event of id.
func released(t *testing.T, brokers []string, names bus.Names, id string) string {
	t.Helper()
	ev := find(t, brokers, names.Requests, func(ev *schemas.Event) bool { return ev.RequestID == id && ev.Released != nil })
	if ev == nil {
		return ""
	}
	return string(ev.Released.Reason)
}

// find reads topic from its start (read_committed) for the first event
// match accepts, or nil when none arrives within the bound.
func find(t *testing.T, brokers []string, topic string, match func(*schemas.Event) bool) *schemas.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for ctx.Err() == nil {
		var found *schemas.Event
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if found == nil && schemas.Decode(r.Value, &ev) == nil && match(&ev) {
				found = &ev
			}
		})
		if found != nil {
			return found
		}
	}
	return nil
}

// TestRetryAttemptReleaseReachesLedger: a caller that gives up while its
// retry attempt waits makes the client produce a Released for that attempt
// (not a copy of the RetryRequested carrying two payloads, which the codec
// refuses), and the real ledger drops the queued retry.
func TestRetryAttemptReleaseReachesLedger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	brokers := bus.SplitBrokers(testenv.KafkaBrokers(t))
	names := bus.NamesWithPrefix(fmt.Sprintf("test%d.", time.Now().UnixNano()))
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: brokers, Topics: names, Partitions: 2})
	if err != nil {
		t.Fatalf("dev stack on the real broker: %v", err)
	}
	defer st.Close()
	lc := ledger.DefaultDevConfig()
	lc.Scopes = append(lc.Scopes, ledger.ScopeConfig{Name: "scope-a", Buckets: []ledger.BucketConfig{
		{Level: ledger.LevelScope, ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1},
	}})
	lj, err := json.Marshal(lc)
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgerd.PublishConfig(ctx, brokers, names, lj, "reserve integration test"); err != nil {
		t.Fatal(err)
	}
	// A generous answer bound: the ledger member may still be joining its
	// group when the stack is up, and that is not what is tested here.
	rc, err := reserve.New(ctx, reserve.Config{Brokers: brokers, Topics: names, Node: "gw-retry", AnswerTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()

	first := reserveEvent("r-retry")
	first.Node = "gw-retry"
	if d, err := rc.Reserve(ctx, first); err != nil || d.Status != schemas.StatusGranted {
		t.Fatalf("attempt 1: %+v, %v; want granted", d, err)
	}
	// The ledger releases attempt 1 and queues attempt 2 behind the
	// provider's Retry-After; the caller gives up before that passes.
	retry := eventid.Derive(first, schemas.TypeRetryRequested, time.Now().UnixMilli())
	retry.Attempt = 2
	retry.RetryRequested = &schemas.RetryRequested{PreviousAttempt: 1, Reason: schemas.RetryCapacity, RetryAfterMs: 60_000}
	wait, stop := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer stop()
	if _, err := rc.Reserve(wait, retry); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("attempt 2: %v, want the caller's deadline", err)
	}
	rel := find(t, brokers, names.Requests, func(ev *schemas.Event) bool {
		return ev.RequestID == "r-retry" && ev.Released != nil
	})
	if rel == nil || rel.Attempt != 2 || rel.Released.Reason != "cancel" {
		t.Fatalf("Released for attempt 2 not on %s (got %+v)", names.Requests, rel)
	}
	dec := find(t, brokers, names.Decisions, func(ev *schemas.Event) bool {
		return ev.RequestID == "r-retry" && ev.Attempt == 2 && ev.Decision != nil && ev.Decision.Status == schemas.StatusCancelled
	})
	if dec == nil {
		t.Fatalf("the ledger did not drop the queued attempt 2 (no cancelled decision on %s)", names.Decisions)
	}
	t.Logf("attempt 2 %s: %s", dec.Decision.Status, dec.Decision.Reason)
}
