package ledgerd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/analytics/whatif"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// whatIfRecordedConfig is the config the recorded run enforces: 6 requests
// per second per key, and a scope (provider) limit of 600 per minute with a
// 1 s window (10 at once).
const whatIfRecordedConfig = `{"scopes":[{"name":"*","buckets":[
 {"level":"scope","id":"*","dimension":"requests","capacity":600,"window_ms":1000},
 {"level":"key","id":"*","dimension":"requests","refill":"fixed","capacity":6,"period_ms":1000}]}]}`

// whatIfTightConfig halves the key limit.
const whatIfTightConfig = `{"scopes":[{"name":"*","buckets":[
 {"level":"scope","id":"*","dimension":"requests","capacity":600,"window_ms":1000},
 {"level":"key","id":"*","dimension":"requests","refill":"fixed","capacity":3,"period_ms":1000}]}]}`

// recordedRun is a run recorded on a broker: a ledger member (in this
// process) decided bursts of requests of two tenants on four scopes over
// two partitions.
type recordedRun struct {
	names bus.Names
	group string
	start int64                    // log time before the first request
	last  map[string]schemas.Event // each request's terminal decision
}

func recordRun(t *testing.T, ctx context.Context, brokers []string, prefix string) *recordedRun {
	t.Helper()
	run := &recordedRun{names: bus.NamesWithPrefix(prefix), group: prefix + "ledger"}
	names := run.names
	cl, err := bus.NewClient(ctx, brokers, 20*time.Second)
	if err != nil {
		t.Fatalf("Kafka broker required: %v", err)
	}
	t.Cleanup(cl.Close)
	tc := bus.DefaultTopics()
	tc.RequestPartitions, tc.Names = 2, names
	if _, err := bus.Ensure(ctx, kadm.NewClient(cl), tc.Specs()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kadm.NewClient(cl).DeleteTopics(context.Background(), names.Created()...) })
	// A topic just created may not be in the metadata of every broker
	// connection yet: retry until it is (bounded by ctx).
	for {
		err := PublishConfig(ctx, brokers, names, []byte(whatIfRecordedConfig), "test")
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	svc, err := New(ctx, Config{Brokers: brokers, Topics: names, Node: prefix + "a", Group: run.group,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	loopDone := make(chan error, 1)
	lctx, stopLoop := context.WithCancel(ctx)
	go func() { loopDone <- svc.Loop(lctx) }()
	t.Cleanup(func() {
		stopLoop()
		<-loopDone
		svc.Close()
	})

	prod, err := kgo.NewClient(bus.Opts(brokers, kgo.ProducerLinger(0))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const requests = 240
	run.start = time.Now().UnixMilli() - 1000
	var recs []*kgo.Record
	for i := range requests {
		scope := fmt.Sprintf("scope-%d", i%4)
		tn := []string{"acme", "globex", "acme"}[i%3]
		ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = fmt.Sprintf("req-%03d", i), 1, "gw", scope, tn, "k-"+tn, "interactive"
		ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "tenant", ID: tn}, {Level: "key", ID: "k-" + tn}}, InputTokens: 10, OutputTokens: 10}
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: names.Requests, Key: []byte(scope), Value: b})
		if len(recs) == 60 { // bursts of 60, beyond the limits of one window
			if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	run.last = awaitDecided(t, ctx, brokers, names, requests)
	return run
}

// whatIfScenario: on a recorded run, `sluice whatif`'s engine must
// reproduce it exactly under the recorded config, and under a tightened one
// find the denials a direct replay with that config finds.
func whatIfScenario(t *testing.T, brokers []string, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run := recordRun(t, ctx, brokers, prefix)
	names, group, start := run.names, run.group, run.start

	o := WhatIfOptions{Brokers: brokers, Topics: names, Group: group, FromMs: start}
	same, err := WhatIf(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if same.Differences != 0 || same.Recorded.Decisions == 0 || same.WhatIf.Grants != same.Recorded.Grants {
		t.Fatalf("what-if under the recorded config: %d differences (first %v), %d recorded decisions, grants %d vs %d",
			same.Differences, same.First, same.Recorded.Decisions, same.WhatIf.Grants, same.Recorded.Grants)
	}
	if same.Recorded.Denied == 0 {
		t.Fatal("the recorded run denied nothing: the scenario does not exercise the limits")
	}
	o.Ledger = []byte(whatIfRecordedConfig)
	if rep, err := WhatIf(ctx, o); err != nil || rep.Differences != 0 {
		t.Fatalf("what-if with the recorded document as the new config: %v, %+v", err, rep)
	}

	o.Ledger = []byte(whatIfTightConfig)
	tight, err := WhatIf(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	direct := directReplay(t, ctx, brokers, names, tight.Ranges, []byte(whatIfTightConfig), o.FromMs)
	if !maps.Equal(tight.WhatIf.Denials, direct.Denials) || tight.WhatIf.Grants != direct.Grants {
		t.Fatalf("what-if denials %v (grants %d), direct replay %v (grants %d)", tight.WhatIf.Denials, tight.WhatIf.Grants, direct.Denials, direct.Grants)
	}
	// A halved limit must bite: more denials, more queueing or fewer grants.
	// Which of them depends on how the bursts fell into the 1 s windows of
	// log time (a slow machine spreads them, and queued requests are then
	// granted in the next window), so any one of them will do.
	w, r := tight.WhatIf, tight.Recorded
	if tight.Differences == 0 || (w.Denied <= r.Denied && w.Queued <= r.Queued && w.Grants >= r.Grants) {
		t.Fatalf("a halved key limit: %d differences, denied %d queued %d grants %d (recorded %d, %d, %d)",
			tight.Differences, w.Denied, w.Queued, w.Grants, r.Denied, r.Queued, r.Grants)
	}
	t.Logf("recorded: %d grants %v; what-if (halved key limit): %d grants %v, %d differences; %d inputs at %.0f events/s",
		tight.Recorded.Grants, tight.Recorded.Denials, tight.WhatIf.Grants, tight.WhatIf.Denials, tight.Differences, tight.Inputs, tight.EventsPerSec)
}

// awaitDecided reads committed decisions until every request has a
// terminal one, and returns them.
func awaitDecided(t *testing.T, ctx context.Context, brokers []string, names bus.Names, requests int) map[string]schemas.Event {
	t.Helper()
	cons, err := kgo.NewClient(bus.Opts(brokers, kgo.ConsumeTopics(names.Decisions),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	decided := map[string]schemas.Event{}
	for len(decided) < requests && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.Decision != nil && ev.Decision.Status != schemas.StatusQueued {
				decided[ev.RequestID] = ev
			}
		})
	}
	if len(decided) < requests {
		t.Fatalf("%d of %d requests decided", len(decided), requests)
	}
	return decided
}

// directReplay re-runs each partition's inputs of ranges with every
// ConfigChanged document replaced by doc (as `sluice replay
// --ledger-config` does) and tallies the decisions from fromMs on.
func directReplay(t *testing.T, ctx context.Context, brokers []string, names bus.Names, ranges []PartitionRange, doc []byte, fromMs int64) whatif.Summary {
	t.Helper()
	tally := whatif.NewTally()
	for _, pr := range ranges {
		l := ledger.New(pr.Partition, ledger.Config{})
		var outs []ledger.Output
		var ev schemas.Event
		err := ReadPartition(ctx, brokers, names.Requests, pr.Partition, kgo.NewOffset().At(pr.From), pr.To, func(r *kgo.Record) error {
			_ = decodeInput(r.Value, &ev)
			if ev.ConfigChanged != nil {
				ev.ConfigChanged.Ledger = doc
			}
			outs = l.Apply(r.Timestamp.UnixMilli(), r.Offset, &ev, outs[:0])
			for i := range outs {
				if outs[i].Decision.LogTimeMs >= fromMs {
					tally.Decision(outs[i].RequestID, outs[i].Attempt, outs[i].Tenant, outs[i].Class, &outs[i].Decision)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return tally.Summary()
}

// TestWhatIfKfake runs the what-if scenario on the embedded broker.
func TestWhatIfKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	whatIfScenario(t, c.ListenAddrs(), "whatiftest.")
}
