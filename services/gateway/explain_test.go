package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestExplainShowsOnlyTheCallersTenant: tenants demo and batchco share the
// scope sim-openai, whose concurrency of 1 makes batchco's request queue
// behind three of demo's. batchco's explanation of its own request names nothing of demo
// (no request id, key, team, org or tenant name): demo's waiters appear
// only as a count. A request of the other tenant is answered like one that
// does not exist.
func TestExplainShowsOnlyTheCallersTenant(t *testing.T) {
	st := startStack(t, func(u string) string {
		y := testYAML(u, "", "", "")
		lc := ledger.DefaultDevConfig()
		lc.Scopes[0].Buckets = append(lc.Scopes[0].Buckets,
			ledger.BucketConfig{Level: ledger.LevelScope, ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
		b, _ := json.Marshal(lc)
		i := strings.Index(y, "ledger: ")
		return y[:i] + "ledger: " + string(b) + "\n"
	})
	// demo holds the scope's one slot and has three agent requests waiting
	// (produced as a gateway would); batchco's batch request queues
	// behind them.
	prod, err := kgo.NewClient(kgo.SeedBrokers(st.Brokers...), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(ev *schemas.Event) {
		t.Helper()
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(context.Background(), &kgo.Record{Topic: st.names.Requests, Key: []byte("sim-openai"), Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var demoIDs []string
	for i := range 4 {
		ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = fmt.Sprintf("demo-held-%d", i), 1, "gw-other", "sim-openai", "demo", "demo-key", "agent"
		ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "org", ID: "demo-org"}, {Level: "tenant", ID: "demo"},
			{Level: "team", ID: "demo-team"}, {Level: "key", ID: "demo-key"}}, InputTokens: 10, OutputTokens: 10}
		produce(ev)
		demoIDs = append(demoIDs, ev.RequestID)
	}
	const body = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}],"max_tokens":16}`
	type answer struct {
		resp *http.Response
		body []byte
	}
	done := make(chan answer, 1)
	go func() {
		resp, b := st.do(t, "POST", "/v1/chat/completions", keyBatch, body)
		done <- answer{resp, b}
	}()
	st.events(t, "", func(evs []schemas.Event) bool {
		return has(evs, func(e schemas.Event) bool {
			return e.Decision != nil && e.Tenant == "batchco" && e.Decision.Status == schemas.StatusQueued
		})
	})
	for _, id := range demoIDs { // the grant released, the waiters withdrawn
		ev := eventid.New(schemas.TypeReleased, time.Now().UnixMilli())
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID = id, 1, "gw-other", "sim-openai", "demo", "demo-key"
		ev.Released = &schemas.Released{Reason: "cancel"}
		produce(ev)
	}
	a := <-done
	resp, b := a.resp, a.body
	batchID := resp.Header.Get("X-Sluice-Request-Id")
	if resp.StatusCode != 200 || batchID == "" {
		t.Fatalf("batchco's request: %d %s", resp.StatusCode, b)
	}
	st.events(t, batchID, func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeReconciled)) })

	resp, b = st.do(t, "GET", "/v1/sluice/requests/"+batchID, keyBatch, "")
	if resp.StatusCode != 200 {
		t.Fatalf("own explanation: %d %s", resp.StatusCode, b)
	}
	var x ledger.Explanation
	if err := json.Unmarshal(b, &x); err != nil || x.RequestID != batchID || x.Tenant != "batchco" || len(x.Steps) == 0 {
		t.Fatalf("explanation %v: %s", err, b)
	}
	for _, leak := range append([]string{"demo"}, demoIDs...) {
		if leak != "" && strings.Contains(string(b), leak) {
			t.Fatalf("batchco's explanation mentions %q:\n%s", leak, b)
		}
	}
	others := 0
	for _, s := range x.Steps {
		if s.Queue != nil {
			others = max(others, s.Queue.OtherTenantsAhead)
			for _, a := range s.Queue.Ahead {
				if a.Tenant != "batchco" {
					t.Fatalf("queue entry of another tenant: %+v", a)
				}
			}
		}
	}
	if others != 3 {
		t.Fatalf("at most %d requests of other tenants ahead, want demo's 3 waiters:\n%s", others, b)
	}
	t.Logf("batchco's request: %d steps, outcome %s, %d requests of other tenants ahead", len(x.Steps), x.Outcome, others)

	for _, c := range []struct{ id, key string }{{demoIDs[0], keyBatch}, {batchID, keyDemo}, {"no-such-id", keyBatch}} {
		resp, b := st.do(t, "GET", "/v1/sluice/requests/"+c.id, c.key, "")
		if resp.StatusCode != 404 || !strings.Contains(string(b), `"not_found"`) || strings.Contains(string(b), "demo-key") {
			t.Fatalf("explain %s with another tenant's key: %d %s", c.id, resp.StatusCode, b)
		}
	}
	if resp, _ := st.do(t, "GET", "/v1/sluice/requests/"+batchID, "", ""); resp.StatusCode != 401 {
		t.Fatalf("explain without a key: %d", resp.StatusCode)
	}
}
