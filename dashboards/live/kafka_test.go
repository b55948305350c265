package live

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
)

func record(t *testing.T, topic string, ev *schemas.Event) *kgo.Record {
	t.Helper()
	b, err := schemas.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(ev.Scope), Value: b}
}

// TestViewConsumesKafka runs the view against franz-go's in-process Kafka:
// events produced before the view started are not shown (it starts at the
// end), events of an aborted transaction are not shown (read_committed),
// and committed events on all three topics reach /api/snapshot.
func TestViewConsumesKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := testenv.Kfake(t, ctx, "livetest.", 2)
	brokers, names := k.Brokers, k.Names

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(ctx, record(t, names.Requests, reserve("acme", "k1", "before"))).FirstErr(); err != nil {
		t.Fatal(err)
	}

	url, stop, err := Listen(ctx, Config{Brokers: brokers, Topics: names, Addr: "127.0.0.1:0", Lookup: lookup})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	// An aborted transaction: read_committed must never show it.
	txp, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("livetest-tx"), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer txp.Close()
	if err := txp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txp.ProduceSync(ctx, record(t, names.Requests, reserve("acme", "k1", "aborted"))).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txp.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	rej := rejected("acme", "k1", "r2", 503)
	dis := env(schemas.TypeDispatched, "acme", "k1", "r1")
	dis.Dispatched = &schemas.Dispatched{Provider: "openai", Deployment: "sim-openai", Model: "gpt-4o-mini"}
	recs := []*kgo.Record{
		record(t, names.Requests, reserve("acme", "k1", "r1")),
		record(t, names.Requests, reserve("acme", "k1", "r2")),
		record(t, names.Requests, reserve("globex", "k2", "g1")),
		record(t, names.Decisions, granted("acme", "k1", "r1")),
		record(t, names.Decisions, granted("acme", "k1", "r2")),
		record(t, names.Decisions, decision("globex", "k2", "g1", schemas.Decision{
			Status: schemas.StatusDenied, LimitPath: "tenant:globex", LimitDimension: schemas.DimRequests,
			Needed: 1, Available: 0, RetryAfterMs: 900, GatewayDecision: schemas.GDRejectedLocally})),
		record(t, names.Telemetry, dis),
		record(t, names.Requests, rej),
		{Topic: names.Telemetry, Value: []byte("garbage")},
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var s Snapshot
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/snapshot", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		s = Snapshot{}
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if s.Stream != nil && s.Stream.Events+s.Stream.InvalidRecords >= int64(len(recs)) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("events never reached the view: %+v", s.Stream)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if s.Stream.Events != int64(len(recs)-1) || s.Stream.InvalidRecords != 1 {
		t.Fatalf("stream %+v", s.Stream)
	}
	acme := tenantRow(t, s, "acme")
	if acme.Received != 2 || acme.Granted != 2 || acme.Dispatched != 1 || acme.Provider503 != 1 || acme.InFlight != 1 {
		t.Fatalf("acme %+v (the pre-start and aborted requests must not count)", acme)
	}
	globex := tenantRow(t, s, "globex")
	if globex.Denied != 1 || globex.DeniedByDimension["requests"] != 1 {
		t.Fatalf("globex %+v", globex)
	}
	if len(s.RecentDecisions) != 3 {
		t.Fatalf("recent %+v", s.RecentDecisions)
	}

	// The same stream, seen with globex's key, holds only globex.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/snapshot", nil)
	req.Header.Set("Authorization", "Bearer sk-globex")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ts Snapshot
	err = json.NewDecoder(resp.Body).Decode(&ts)
	resp.Body.Close()
	if err != nil || ts.View != "tenant" || len(ts.Tenants) != 1 || ts.Tenants[0].Tenant != "globex" || len(ts.RecentDecisions) != 1 {
		t.Fatalf("globex view %v %+v", err, ts)
	}
}
