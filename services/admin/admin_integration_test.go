//go:build integration

package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/admin"
	"github.com/sluice-dev/sluice/services/gateway"
	"github.com/sluice-dev/sluice/services/ledgerd"
	"github.com/sluice-dev/sluice/services/sim"
)

const opToken = "integration-operator-token"

// eventually bounds every "takes effect on the other gateway" wait. The
// issue asks for 1 s; the test measures and logs the time instead of
// asserting it (no timing assertions in tests), and fails only past this.
const eventually = 20 * time.Second

// cluster is one ledger member and two gateways on the real broker, sharing
// one set of topics: what two replicas of a deployment share.
type cluster struct {
	t       *testing.T
	brokers []string
	names   bus.Names
	gw      [2]*httptest.Server
	closers []func()
}

func (c *cluster) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
}

func gatewayYAML(node, simURL string) string {
	lc := ledger.DefaultDevConfig()
	led, _ := json.Marshal(lc)
	return fmt.Sprintf(`node: %s
providers:
  - {name: sim-openai, kind: openai, scope: sim-openai, base_url: %s/openai/v1}
routes:
  - {model: gpt-4o-mini, provider: sim-openai}
tenants: []
ledger: %s
`, node, simURL, led)
}

func startCluster(t *testing.T, ctx context.Context) *cluster {
	t.Helper()
	c := &cluster{t: t, brokers: bus.SplitBrokers(testenv.KafkaBrokers(t)),
		names: bus.NamesWithPrefix(fmt.Sprintf("admintest%d.", time.Now().UnixNano()))}
	t.Cleanup(c.close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	adm, err := bus.NewClient(ctx, c.brokers, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.closers = append(c.closers, adm.Close)
	tc := bus.DefaultTopics()
	tc.RequestPartitions, tc.Names = 2, c.names
	if _, err := bus.Ensure(ctx, kadm.NewClient(adm), tc.Specs()); err != nil {
		t.Fatal(err)
	}
	c.closers = append(c.closers, func() {
		_, _ = kadm.NewClient(adm).DeleteTopics(context.Background(), append(c.names.All(), c.names.Admin)...)
	})

	simSrv, err := sim.New(sim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	simHTTP := httptest.NewServer(simSrv)
	c.closers = append(c.closers, simHTTP.Close)

	first, err := config.Load(strings.NewReader(gatewayYAML("gw-a", simHTTP.URL)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgerd.PublishConfig(ctx, c.brokers, c.names, first.LedgerJSON(), "test"); err != nil {
		t.Fatal(err)
	}
	led, err := ledgerd.New(ctx, ledgerd.Config{Brokers: c.brokers, Topics: c.names, Group: c.names.Requests + ".ledger",
		Node: "ledger-" + c.names.Requests, Log: log, Registerer: prometheus.NewRegistry(), SnapshotEvery: 2, SnapshotInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = led.Loop(runCtx) }()
	c.closers = append(c.closers, func() { cancel(); <-done; led.Close() })

	for i, node := range []string{"gw-a", "gw-b"} {
		cfg, err := config.Load(strings.NewReader(gatewayYAML(node, simHTTP.URL)))
		if err != nil {
			t.Fatal(err)
		}
		rc, err := reserve.New(ctx, reserve.Config{Brokers: c.brokers, Topics: c.names, Node: node, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		c.closers = append(c.closers, rc.Close)
		levels, err := gateway.FollowSnapshots(ctx, c.brokers, c.names, log)
		if err != nil {
			t.Fatal(err)
		}
		c.closers = append(c.closers, levels.Close)
		gw := gateway.New(cfg, rc, log, gateway.WithLevels(levels))
		run, err := admin.Start(ctx, gw, cfg, c.brokers, c.names, opToken, log)
		if err != nil {
			t.Fatal(err)
		}
		c.closers = append(c.closers, run.Close)
		c.gw[i] = httptest.NewServer(gw)
		c.closers = append(c.closers, c.gw[i].Close)
	}
	return c
}

func call(t *testing.T, ctx context.Context, method, url, token string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(ctx, method, url, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	if out == nil {
		out = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, out
}

func version(t *testing.T, ctx context.Context, base, token string) int64 {
	t.Helper()
	code, out := call(t, ctx, "GET", base+"/admin/v1/tenants", token, nil)
	if code != 200 {
		t.Fatalf("list tenants: %d %v", code, out)
	}
	return int64(out["version"].(float64))
}

func mustChange(t *testing.T, ctx context.Context, want int, method, url, token string, body map[string]any) map[string]any {
	t.Helper()
	code, out := call(t, ctx, method, url, token, body)
	if code != want {
		t.Fatalf("%s %s: %d, want %d: %v", method, url, code, want, out)
	}
	return out
}

func chat(t *testing.T, ctx context.Context, base, key string) (int, map[string]any) {
	t.Helper()
	return call(t, ctx, "POST", base+"/v1/chat/completions", key,
		map[string]any{"model": "gpt-4o-mini", "max_tokens": 16, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
}

// until polls f until it returns true or eventually passes, and returns
// how long it took.
func until(t *testing.T, what string, f func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !f() {
		if time.Since(start) > eventually {
			t.Fatalf("%s: not within %s", what, eventually)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d := time.Since(start)
	t.Logf("%s: %s", what, d.Round(time.Millisecond))
	return d
}

// TestAdminAcrossGateways is the acceptance test on the real broker:
// a key created on one gateway works on the other; a paused key gets 403
// there; concurrent writes on both gateways give one winner and one 409;
// every change is a ConfigChanged on sluice.requests with actor and reason.
func TestAdminAcrossGateways(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCluster(t, ctx)
	a, b := c.gw[0].URL, c.gw[1].URL

	v := version(t, ctx, a, opToken)
	mustChange(t, ctx, 201, "POST", a+"/admin/v1/tenants", opToken, map[string]any{"base_version": v, "reason": "onboard", "id": "shop",
		"limits": []map[string]any{{"dimension": "requests", "capacity": 600}, {"dimension": "requests_per_day", "capacity": 1000}}})
	out := mustChange(t, ctx, 201, "POST", a+"/admin/v1/tenants/shop/keys", opToken, map[string]any{"base_version": v + 1, "reason": "first key", "id": "shop-key"})
	key := out["api_key"].(string)
	created := time.Now()
	var first map[string]any
	until(t, "key created on gateway A works on gateway B", func() bool {
		code, out := chat(t, ctx, b, key)
		first = out
		return code == 200
	})
	t.Logf("propagation measured from the create response: %s", time.Since(created).Round(time.Millisecond))
	if first["object"] != "chat.completion" {
		t.Fatalf("chat on B: %v", first)
	}

	// Usage on B: the tenant's own limits; remaining once a ledger
	// snapshot holds the bucket.
	until(t, "usage on B shows remaining quota from a ledger snapshot", func() bool {
		code, out := call(t, ctx, "GET", b+"/v1/sluice/usage", key, nil)
		if code != 200 || out["tenant"] != "shop" {
			t.Fatalf("usage: %d %v", code, out)
		}
		for _, l := range out["limits"].([]any) {
			l := l.(map[string]any)
			if !(l["level"] == "tenant" && l["id"] == "shop" || l["level"] == "key" && l["id"] == "shop-key") {
				t.Fatalf("usage shows a bucket that is not the tenant's: %v", l)
			}
			if l["dimension"] == "requests_per_day" && l["source"] == "ledger_snapshot" {
				if rem := l["remaining"].(float64); rem >= 1000 || rem < 0 {
					t.Fatalf("remaining %v of 1000 after one request", rem)
				}
				return len(out["daily_headroom"].([]any)) == 1
			}
		}
		_, _ = chat(t, ctx, a, key) // more traffic makes the ledger snapshot
		return false
	})

	// The ledgers follow the same changes: a daily limit set through B
	// refuses A's requests once it is spent.
	v = version(t, ctx, b, opToken)
	mustChange(t, ctx, 200, "PUT", b+"/admin/v1/tenants/shop/keys/shop-key/limits", opToken, map[string]any{"base_version": v, "reason": "trial",
		"limits": []map[string]any{{"dimension": "requests_per_day", "capacity": 3}}})
	until(t, "a key limit set on B is enforced by the ledger for A's requests", func() bool {
		code, out := chat(t, ctx, a, key)
		if code == 429 {
			// The tenant's own per-minute request limit can refuse first
			// (the traffic above made snapshots), at once or after a
			// wait in the queue: retryable, so wait it out and go on
			// until the daily limit is what refuses.
			if e := out["error"].(map[string]any); e["code"] == "rate_limit_exceeded" || e["code"] == "queue_timeout" {
				time.Sleep(200 * time.Millisecond)
				return false
			}
		}
		if code == 429 { // a spent daily quota: 429 insufficient_quota, x-should-retry: false
			if e := out["error"].(map[string]any); e["code"] != "insufficient_quota" {
				t.Fatalf("over the daily key limit: %v", out)
			}
			return true
		}
		if code != 200 {
			t.Fatalf("chat: %d %v", code, out)
		}
		return false
	})

	v = version(t, ctx, b, opToken)
	mustChange(t, ctx, 200, "POST", b+"/admin/v1/tenants/shop/keys/shop-key/pause", opToken, map[string]any{"base_version": v, "reason": "incident 42"})
	until(t, "key paused on gateway B gets 403 on gateway A", func() bool {
		code, out := chat(t, ctx, a, key)
		if code == 429 {
			return false // the spent daily limit, from the ledger: A has not applied the pause yet
		}
		if code == 403 {
			e := out["error"].(map[string]any)
			if e["code"] != "paused" {
				t.Fatalf("paused key: %v", out)
			}
			return true
		}
		return false
	})

	// Two operators change the same version at once, one per gateway.
	v = version(t, ctx, a, opToken)
	until(t, "gateway B has the version gateway A has", func() bool { return version(t, ctx, b, opToken) == v })
	var wg sync.WaitGroup
	codes, outs := make([]int, 2), make([]map[string]any, 2)
	for i, base := range []string{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], outs[i] = call(t, ctx, "POST", base+"/admin/v1/tenants/shop/teams", opToken,
				map[string]any{"base_version": v, "reason": "race", "id": fmt.Sprintf("team-%d", i)})
		}()
	}
	wg.Wait()
	if !(codes[0] == 201 && codes[1] == 409 || codes[0] == 409 && codes[1] == 201) {
		t.Fatalf("concurrent writes at one base version: %v, want one 201 and one 409 (%v)", codes, outs)
	}

	// The audit trail: every change reached every partition of
	// sluice.requests as a ConfigChanged with actor, reason and change.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.ConsumeTopics(c.names.Requests),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[string]int{}
	until(t, "the audit trail is on sluice.requests", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer pcancel()
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.ConfigChanged != nil && ev.ConfigChanged.Source == admin.Source {
				cc := ev.ConfigChanged
				if cc.Actor != "operator" || cc.Reason == "" || cc.Change == "" || len(cc.Admission) != 0 {
					t.Fatalf("ConfigChanged %+v", cc)
				}
				seen[cc.Change]++
			}
		})
		return seen["key.pause tenant=shop key=shop-key"] == 2 && seen["key.create tenant=shop key=shop-key"] == 2 &&
			seen["key.limits tenant=shop key=shop-key"] == 2
	})
}

// TestPartnersAcrossGateways: a partner manages its own tenant on one
// gateway; another partner, on the other gateway, can neither see nor change
// it (404, as for a tenant that does not exist).
func TestPartnersAcrossGateways(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCluster(t, ctx)
	a, b := c.gw[0].URL, c.gw[1].URL
	tok := map[string]string{}
	for _, p := range []string{"p1", "p2"} {
		v := version(t, ctx, a, opToken)
		out := mustChange(t, ctx, 201, "POST", a+"/admin/v1/partners", opToken, map[string]any{"base_version": v, "reason": "contract", "id": p,
			"limits": []map[string]any{{"dimension": "requests", "capacity": 1200}}})
		tok[p] = out["partner_token"].(string)
	}
	until(t, "both partners' tokens work on gateway B", func() bool {
		c1, _ := call(t, ctx, "GET", b+"/admin/v1/tenants", tok["p1"], nil)
		c2, _ := call(t, ctx, "GET", b+"/admin/v1/tenants", tok["p2"], nil)
		return c1 == 200 && c2 == 200
	})
	v := version(t, ctx, b, tok["p1"])
	mustChange(t, ctx, 201, "POST", b+"/admin/v1/tenants", tok["p1"], map[string]any{"base_version": v, "reason": "new customer", "id": "p1.shop",
		"limits": []map[string]any{{"dimension": "requests", "capacity": 600}}})
	until(t, "p1's tenant is visible to p1 on gateway A", func() bool {
		code, _ := call(t, ctx, "GET", a+"/admin/v1/tenants/p1.shop", tok["p1"], nil)
		return code == 200
	})
	v = version(t, ctx, a, tok["p2"])
	for _, tc := range []struct{ method, path string }{
		{"GET", "/admin/v1/tenants/p1.shop"},
		{"PUT", "/admin/v1/tenants/p1.shop/limits"},
		{"POST", "/admin/v1/tenants/p1.shop/pause"},
		{"POST", "/admin/v1/tenants/p1.shop/keys"},
	} {
		var body map[string]any
		if tc.method != "GET" {
			body = map[string]any{"base_version": v, "reason": "snooping", "limits": []map[string]any{{"dimension": "requests", "capacity": 60}}}
			if strings.HasSuffix(tc.path, "/keys") || strings.HasSuffix(tc.path, "/pause") {
				delete(body, "limits")
			}
		}
		code, out := call(t, ctx, tc.method, a+tc.path, tok["p2"], body)
		if code != 404 {
			t.Errorf("p2 %s %s: %d %v, want 404", tc.method, tc.path, code, out)
		}
	}
	code, out := call(t, ctx, "GET", a+"/admin/v1/tenants", tok["p2"], nil)
	if code != 200 || len(out["tenants"].([]any)) != 0 {
		t.Errorf("p2's tenant list: %d %v, want empty", code, out)
	}
	code, out = call(t, ctx, "PUT", b+"/admin/v1/tenants/p1.shop/limits", tok["p1"], map[string]any{"base_version": version(t, ctx, b, opToken),
		"reason": "more", "limits": []map[string]any{{"dimension": "requests", "capacity": 1260}}})
	if code != 400 || out["error"].(map[string]any)["code"] != "allotment_exceeded" {
		t.Errorf("p1 above its allotment: %d %v", code, out)
	}
}
