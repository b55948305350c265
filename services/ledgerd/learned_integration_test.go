//go:build integration

package ledgerd_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// TestLearnedCapacityWrittenAndReplayed: on the real broker, a provider's
// headers reporting 120 RPM against dep1's configured 600 make the ledger
// write a CapacityLearned record to sluice.decisions (committed, next to
// the decisions), and `sluice replay --verify` re-derives it: no
// divergence.
func TestLearnedCapacityWrittenAndReplayed(t *testing.T) {
	r := newRig(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := ledgerd.PublishConfig(ctx, r.brokers, r.names, []byte(deploymentLedgerConfig), "test"); err != nil {
		t.Fatal(err)
	}
	r.ledger("ledger-l")
	actx, stopAudit := context.WithCancel(context.Background())
	defer stopAudit()
	go r.audit(actx)

	ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
	ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = "learn-a", 1, "gw-learn", "scope-l", "t", "k-l", "interactive"
	ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "key", ID: "k-l"}, {Level: "deployment", ID: "dep1"}},
		InputTokens: 10, OutputTokens: 10}
	if err := r.produce(ctx, ev); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.sent["learn-a"] = true
	r.mu.Unlock()
	r.settle(60 * time.Second)
	obs := eventid.Derive(ev, schemas.TypeProviderObserved, time.Now().UnixMilli())
	obs.ProviderObserved = &schemas.ProviderObserved{Deployment: "dep1", Observations: []schemas.Observation{
		{Dimension: schemas.DimRequests, Limit: 120, Remaining: 110}}}
	if err := r.produce(ctx, obs); err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.ConsumeTopics(r.names.Decisions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got *schemas.CapacityLearned
	for got == nil && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(rec *kgo.Record) {
			var e schemas.Event
			if schemas.Decode(rec.Value, &e) == nil && e.CapacityLearned != nil {
				got = e.CapacityLearned
			}
		})
	}
	stopAudit()
	if got == nil {
		t.Fatal("no CapacityLearned record on sluice.decisions")
	}
	if got.Level != "deployment" || got.ID != "dep1" || got.ConfiguredCapacity != 600 || got.LearnedCapacity != 116 || got.ReportedLimit != 120 || got.Source != schemas.LearnedHeaders {
		t.Errorf("learned %+v, want deployment:dep1 600 → 116 (97 %% of the reported 120) from headers", *got)
	}
	r.verifyReplay()
}
