//go:build integration

package reserve_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
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
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), names.All()...); cl.Close() })
	return names, brokers
}

func reserveEvent(id string) *schemas.Event {
	ev := schemas.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
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

// TestEmergencyCap: configured to admit locally, the client grants up to
// the cap per second, flags the grants, and fails closed beyond it.
func TestEmergencyCap(t *testing.T) {
	names, brokers := topics(t)
	ctx := context.Background()
	rc, err := reserve.New(ctx, reserve.Config{Brokers: brokers, Topics: names, Node: "gw-test",
		AnswerTimeout: 100 * time.Millisecond, EmergencyCapPerSec: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ev := reserveEvent("r-em")
	d, err := rc.Reserve(ctx, ev)
	if err != nil || d.Status != schemas.StatusGranted || d.GatewayDecision != schemas.GDEmergencyAdmitted {
		t.Fatalf("Reserve = %+v, %v; want an emergency grant", d, err)
	}
	if !ev.ReserveRequested.EmergencyAdmitted {
		t.Error("emergency grant not flagged on the event")
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Requests), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for ctx.Err() == nil {
		var reason string
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.RequestID == id && ev.Released != nil {
				reason = ev.Released.Reason
			}
		})
		if reason != "" {
			return reason
		}
	}
	return ""
}
