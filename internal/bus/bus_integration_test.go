//go:build integration

package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
)

func client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := bus.NewClient(ctx, bus.SplitBrokers(testenv.KafkaBrokers(t)), 20*time.Second, opts...)
	if err != nil {
		t.Fatalf("real Kafka broker required (make up): %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestTransactionReadCommitted: records of a committed transaction are seen
// by a read_committed consumer, records of an aborted one never are.
func TestTransactionReadCommitted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := fmt.Sprintf("sluice-test-txn-%d", time.Now().UnixNano())
	adm := kadm.NewClient(client(t))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopic(context.Background(), topic)

	prod := client(t, kgo.TransactionalID("sluice-test-"+topic), kgo.DefaultProduceTopic(topic))
	for i, commit := range []bool{false, true} {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		val := fmt.Sprintf("aborted-%d", i)
		if commit {
			val = fmt.Sprintf("committed-%d", i)
		}
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte(val)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	cons := client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var got []string
	for len(got) < 1 && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if len(got) != 1 || got[0] != "committed-1" {
		t.Fatalf("read_committed saw %q, want only [committed-1]", got)
	}
}

// TestEnsureTwice: the first run creates every topic, the second is a no-op,
// and a topic that differs from its spec is reported, not altered.
func TestEnsureTwice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(client(t))
	tc := bus.DefaultTopics()
	tc.Names = bus.NamesWithPrefix(fmt.Sprintf("test%d.", time.Now().UnixNano()))
	specs := tc.Specs()
	for i := range specs {
		defer adm.DeleteTopic(context.Background(), specs[i].Name)
	}
	for run, want := range []string{"created", "ok"} {
		res, err := bus.Ensure(ctx, adm, specs)
		if err != nil {
			t.Fatalf("run %d: %v", run+1, err)
		}
		if len(res) != len(specs) {
			t.Fatalf("run %d: %d results for %d topics", run+1, len(res), len(specs))
		}
		for _, r := range res {
			if r.Action != want {
				t.Errorf("run %d: %s %s, want %s", run+1, r.Topic, r.Action, want)
			}
		}
	}
	rc, err := adm.DescribeTopicConfigs(ctx, specs[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := rc.On(specs[0].Name, nil)
	found := false
	for _, c := range r.Configs {
		if c.Key == "message.timestamp.type" && c.Value != nil && *c.Value == "LogAppendTime" {
			found = true
		}
	}
	if !found {
		t.Errorf("%s is not LogAppendTime", specs[0].Name)
	}

	bad := append([]bus.TopicSpec(nil), specs...)
	bad[0].Partitions++
	_, err = bus.Ensure(ctx, adm, bad)
	var mm *bus.MismatchError
	if !errors.As(err, &mm) || len(mm.Problems) != 1 {
		t.Fatalf("mismatch not reported: %v", err)
	}
}

// TestUnreachableBrokerIsOneClearError: a dead address fails fast with a
// message that says what to do.
func TestUnreachableBrokerIsOneClearError(t *testing.T) {
	ctx := context.Background()
	_, err := bus.NewClient(ctx, []string{"127.0.0.1:1"}, time.Second)
	if err == nil {
		t.Fatal("no error for an unreachable broker")
	}
	if want := "make up"; !contains(err.Error(), want) {
		t.Fatalf("error %q does not say how to fix it (%q)", err, want)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
