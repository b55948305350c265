package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/gateway"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// degradedYAML is a gateway whose one deployment allows 20 requests an
// hour, all at once (window = period), so that its share is a plain count:
// refill adds nothing a test can see.
func degradedYAML(base, top string) string {
	lc := ledger.DefaultDevConfig()
	lc.Scopes = lc.Scopes[:1]
	lc.Scopes[0].Buckets = []ledger.BucketConfig{
		{Level: ledger.LevelDeployment, ID: "sim-openai", Dimension: schemas.DimRequests, Capacity: 20, PeriodMs: 3_600_000, WindowMs: 3_600_000,
			// A reserve abandoned during the freeze reaches the log at the
			// thaw, is granted and then released unsent: refunded, so the
			// count left is the degraded admissions' alone.
			RefundUnsent: true},
	}
	led, err := json.Marshal(lc)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf(`node: gw-degraded
ledger_timeout_ms: 300
%s
providers:
  - {name: sim-openai, kind: openai, scope: sim-openai, base_url: %s/openai/v1}
routes:
  - {model: gpt-4o-mini, provider: sim-openai}
tenants:
  - id: demo
    keys:
      - {id: demo-key, sha256: %s}
ledger: %s
`, top, base, config.HashKey(keyDemo), led)
}

// plainOK answers like okHandler without rate-limit headers (their
// ProviderObserved would move the deployment's bucket).
func plainOK(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, okCompletion)
}

// Broker faults of the degraded-mode test.
const (
	brokerServes  int32 = iota
	brokerRefuses       // every produce refused: reserves fail at once, reports wait in the retry queue
	brokerFrozen        // every produce held unanswered (SIGSTOP): reserves abandoned at their bound, reports buffered by the producer
)

// faultProduce makes the cluster's produces follow mode; thaw ends a
// freeze.
func faultProduce(cluster *kfake.Cluster, mode *atomic.Int32, thaw <-chan struct{}) {
	cluster.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		switch mode.Load() {
		case brokerServes:
			return nil, nil, false
		case brokerFrozen:
			cluster.SleepControl(func() { <-thaw })
			return nil, nil, false
		}
		return testenv.RefuseProduce(kreq.(*kmsg.ProduceRequest), kerr.InvalidRecord.Code), nil, true
	})
}

// deploymentLeft is what the newest snapshot says the deployment has left,
// and how many gateways it counted alive (-1, 0 while no snapshot has it).
func deploymentLeft(lv *gateway.SnapshotLevels) (int64, int) {
	now := time.Now().UnixMilli()
	obs, _, known := lv.Levels("sim-openai", ledger.LevelDeployment, "sim-openai", now)
	if !known || len(obs) == 0 {
		return -1, 0
	}
	return obs[0].Remaining, lv.LiveGateways("sim-openai", "", now)
}

// metric reads one sample of the gateway's metrics ("" when absent), from
// the handler its metrics listener serves (the API listener serves
// /metrics only to the operator token).
func metric(t *testing.T, h http.Handler, sample string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return v
		}
	}
	return ""
}

// TestDegradedModeWhileNoLedgerAnswers (issue 19, item 3): with the ledger
// gone and the broker refusing writes, or frozen, a gateway admits locally, within
// its share of what the ledger's last snapshot left — 0.5 × 18 requests ÷
// 1 live gateway = 9 of 12 at once, the other 3 answered 503 — and none
// after degraded.max_ms. Its degraded ReserveRequested and Reconciled wait
// in the retry queue (or the producer's buffer), in order; when the broker and a ledger are back the
// ledger grants each as degraded_admitted and charges it: the deployment
// has 18 − 9 left.
func TestDegradedModeWhileNoLedgerAnswers(t *testing.T) {
	for _, fault := range []struct {
		name string
		mode int32
	}{{"refused", brokerRefuses}, {"frozen", brokerFrozen}} {
		t.Run(fault.name, func(t *testing.T) { degradedRun(t, fault.mode) })
	}
}

func degradedRun(t *testing.T, fault int32) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	var mode atomic.Int32
	thaw := make(chan struct{})
	var thawOnce sync.Once
	defer thawOnce.Do(func() { close(thaw) })
	faultProduce(cluster, &mode, thaw)
	ctx := context.Background()
	brokers := cluster.ListenAddrs()
	names := bus.NamesWithPrefix(fmt.Sprintf("gwdegraded%d.", time.Now().UnixNano()))
	adm, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	tc := bus.DefaultTopics()
	tc.Names = names
	if _, err := bus.Ensure(ctx, kadm.NewClient(adm), tc.Specs()); err != nil {
		t.Fatal(err)
	}
	f := newFakeUpstream(t)
	f.script("gpt-4o-mini", plainOK)
	const maxMs = 4000
	cfg, err := config.Load(strings.NewReader(degradedYAML(f.URL, fmt.Sprintf("degraded: {max_ms: %d}", maxMs))))
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgerd.PublishConfig(ctx, brokers, names, cfg.LedgerJSON(), "test"); err != nil {
		t.Fatal(err)
	}
	stopFirst := memberSnapshotting(t, brokers, names, "ledger-a")
	rc, err := reserve.New(ctx, reserve.Config{Brokers: brokers, Topics: names, Node: cfg.Node, AnswerTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	levels, err := gateway.FollowSnapshots(ctx, brokers, names, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer levels.Close()
	gw := gateway.New(cfg, rc, slog.New(slog.NewTextHandler(io.Discard, nil)), gateway.WithLevels(levels))
	srv := httptest.NewServer(gw)
	defer srv.Close()
	do := func() (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+keyDemo)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(gateway.HeaderRequestID) + " " + string(b)
	}

	// Two requests served by the ledger (retried while the group forms),
	// then a snapshot that says 18 are left and this gateway is alive.
	for served, try := 0, 0; served < 2; try++ {
		if st, b := do(); st == 200 {
			served++
		} else if try == 100 {
			t.Fatalf("never served by the ledger: %d %s", st, b)
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	for try := 0; ; try++ {
		left, alive := deploymentLeft(levels)
		if left == 18 && alive == 1 {
			break
		}
		if try == 200 {
			t.Fatalf("no snapshot of 18 left with 1 gateway alive (last: %d left, %d alive)", left, alive)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The ledger goes, and the broker refuses writes.
	stopFirst()
	mode.Store(fault)
	const burst = 12
	codes := make([]int, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = do()
		}()
	}
	wg.Wait()
	ok, unavailable := 0, 0
	for _, c := range codes {
		switch c {
		case 200:
			ok++
		case 503:
			unavailable++
		}
	}
	if ok != 9 || unavailable != 3 {
		t.Errorf("while no ledger answered: %d served, %d 503 of %d (codes %v), want 9 and 3", ok, unavailable, burst, codes)
	}
	if v := metric(t, gw.MetricsHandler(), `sluice_gateway_degraded_total{class="interactive",verdict="admitted"}`); v != "9" {
		t.Errorf("degraded admissions counted: %q, want 9", v)
	}
	if v := metric(t, gw.MetricsHandler(), `sluice_gateway_degraded_total{class="interactive",verdict="over_share"}`); v != "3" {
		t.Errorf("refusals over the share counted: %q, want 3", v)
	}
	// Past max_ms of silence: no more local admissions.
	time.Sleep(maxMs * time.Millisecond)
	if st, b := do(); st != 503 || !strings.Contains(b, "ledger_unavailable") {
		t.Errorf("after max_ms: %d %s, want 503 ledger_unavailable", st, b)
	}
	if v := metric(t, gw.MetricsHandler(), `sluice_gateway_degraded_total{class="interactive",verdict="expired"}`); v != "1" {
		t.Errorf("refusals past max_ms counted: %q, want 1", v)
	}

	// The broker takes writes again and a ledger is back: it reads the
	// degraded admissions and charges them.
	mode.Store(brokerServes)
	thawOnce.Do(func() { close(thaw) })
	memberSnapshotting(t, brokers, names, "ledger-b")
	degraded := map[string]bool{}
	for _, d := range readDecisions(t, brokers, names, func(ds []*schemas.Event) bool {
		n := 0
		for _, d := range ds {
			if d.Decision.GatewayDecision == schemas.GDDegradedAdmitted && d.Decision.Status == schemas.StatusGranted {
				n++
			}
		}
		return n >= 9
	}) {
		if d.Decision.GatewayDecision == schemas.GDDegradedAdmitted && d.Decision.Status == schemas.StatusGranted {
			if d.Decision.Reason != schemas.ReasonDegradedMode {
				t.Errorf("degraded grant %s/%d has reason %q", d.RequestID, d.Attempt, d.Decision.Reason)
			}
			degraded[d.RequestID] = true
		}
	}
	if len(degraded) != 9 {
		t.Errorf("the ledger granted %d degraded admissions, want 9", len(degraded))
	}
	for try := 0; ; try++ {
		left, _ := deploymentLeft(levels)
		if left == 9 {
			break
		}
		if try == 400 {
			t.Fatalf("after the ledger came back the deployment has %d left, want 18 - 9 = 9", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, b := do(); st != 200 {
		t.Errorf("after the ledger came back: %d %s", st, b)
	}
	// The reports waited (in the retry queue when refused), and each
	// degraded reservation reached the log ahead of its Reconciled.
	if s := rc.Stats(); fault == brokerRefuses && s.Retried < 2*9 {
		t.Errorf("stats %+v: want the 9 degraded reservations and their reconciles retried", s)
	}
	seen := map[string]int{} // request id → 1 reservation seen, 2 then its reconcile
	for _, ev := range readRequests(t, brokers, names, degraded) {
		switch {
		case ev.ReserveRequested != nil && ev.ReserveRequested.Degraded:
			if !ev.ReserveRequested.EmergencyAdmitted {
				t.Errorf("degraded reservation %s without emergency_admitted", ev.RequestID)
			}
			seen[ev.RequestID] = 1
		case ev.Reconciled != nil && degraded[ev.RequestID]:
			if seen[ev.RequestID] != 1 {
				t.Errorf("the Reconciled of %s reached the log before its degraded reservation", ev.RequestID)
			}
			seen[ev.RequestID] = 2
		}
	}
	for id := range degraded {
		if seen[id] != 2 {
			t.Errorf("request %s: degraded reservation and Reconciled not both on the log in order", id)
		}
	}
}

// readRequests reads sluice.requests from the start until it holds a
// degraded reservation and a Reconciled of every request in ids (or 30 s
// pass).
func readRequests(t *testing.T, brokers []string, names bus.Names, ids map[string]bool) []*schemas.Event {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Requests),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*schemas.Event
	n := 0
	for ctx.Err() == nil && n < 2*len(ids) {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil {
				got = append(got, &ev)
				if ids[ev.RequestID] && ((ev.ReserveRequested != nil && ev.ReserveRequested.Degraded) || ev.Reconciled != nil) {
					n++
				}
			}
		})
	}
	return got
}

// readDecisions reads sluice.decisions from the start until done says so
// (or 30 s pass).
func readDecisions(t *testing.T, brokers []string, names bus.Names, done func([]*schemas.Event) bool) []*schemas.Event {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Decisions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*schemas.Event
	for ctx.Err() == nil && !done(got) {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.Decision != nil {
				got = append(got, &ev)
			}
		})
	}
	return got
}

// memberSnapshotting is member with a snapshot every 100 ms of applied
// events, so that a gateway soon knows what the ledger left.
func memberSnapshotting(t *testing.T, brokers []string, names bus.Names, node string) (stop func()) {
	t.Helper()
	return memberWith(t, brokers, names, node, 100*time.Millisecond)
}
