//go:build integration

package dev_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configsig"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
	"github.com/sluice-dev/sluice/services/dev"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// chatStatus sends one chat completion and returns the status and the
// error code of a refusal ("" on success).
func chatStatus(ctx context.Context, t *testing.T, st *dev.Stack, deadlineMs int) (int, string) {
	t.Helper()
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.GatewayURL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+st.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Sluice-Deadline-Ms", fmt.Sprint(deadlineMs))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error.Code
}

// untilServed sends chats until one is served: right after start the
// ledger group may still be assigning the partition (503).
func untilServed(ctx context.Context, t *testing.T, st *dev.Stack) {
	t.Helper()
	for ctx.Err() == nil {
		if code, _ := chatStatus(ctx, t, st, 3000); code == http.StatusOK {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("no chat served before the test's deadline")
}

// oneRPMLedger is the dev stack's ledger document with its key bucket cut
// to one request a minute: applied, it refuses the second request of a
// burst that the dev config (60 a minute, 10 a 10 s window) serves whole.
func oneRPMLedger(t *testing.T) []byte {
	t.Helper()
	c := ledger.DefaultDevConfig()
	c.Scopes[0].Buckets[0].Capacity = 1
	c.Scopes[0].Buckets[0].WindowMs = 60_000
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lines is a log sink the test can read while the stack writes to it.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count is how many lines hold every one of subs.
func (l *lines) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range strings.Split(l.b.String(), "\n") {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		n++
	}
	return n
}

// TestForgedConfigRefusedRealBroker is issue 19's forged config on the real
// broker: ConfigChanged records written straight to the requests topic —
// unsigned, signed by a key the ledger does not trust, and another key's
// signature under the admin writer's key id — are not applied, and the old
// config keeps deciding (a burst it serves whole is served whole). The same
// document signed by the admin writer (the dev stack's ephemeral key) then
// applies. The history lists every attempt with why it was refused, and
// replay --verify re-derives the same decisions.
func TestForgedConfigRefusedRealBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	brokers := bus.SplitBrokers(testenv.KafkaBrokers(t))
	names := bus.NamesWithPrefix(fmt.Sprintf("test%d.cfgauth.", time.Now().UnixNano()))
	var logged lines
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: brokers, Topics: names, Partitions: 1,
		Log: slog.New(slog.NewTextHandler(io.MultiWriter(&logged, t.Output()), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatalf("dev stack on the real broker: %v", err)
	}
	defer st.Close()
	writer := configsig.Process().Signer
	if writer == nil {
		t.Fatal("the dev stack installed no signing key")
	}
	untilServed(ctx, t, st) // 1 of the window's 10

	// The forgeries, produced as any principal that can write the topic.
	stranger, err := configsig.Generate()
	if err != nil {
		t.Fatal(err)
	}
	doc := oneRPMLedger(t)
	unsigned := schemas.ConfigChanged{ConfigVersion: "forged-1", Source: "mallory", Ledger: doc}
	foreign := schemas.ConfigChanged{ConfigVersion: "forged-2", Source: "mallory", Ledger: doc}
	stranger.Sign(&foreign)
	posing := schemas.ConfigChanged{ConfigVersion: "forged-3", Source: "mallory", Ledger: doc}
	stranger.Sign(&posing)
	posing.KeyID = writer.KeyID()
	pc, err := bus.NewClient(ctx, brokers, 10*time.Second, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for _, cc := range []schemas.ConfigChanged{unsigned, foreign, posing} {
		ev := eventid.New(schemas.TypeConfigChanged, time.Now().UnixMilli())
		ev.ConfigChanged = &cc
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := pc.ProduceSync(ctx, &kgo.Record{Topic: names.Requests, Partition: 0, Value: b}).FirstErr(); err != nil {
			t.Fatalf("produce the forged config: %v", err)
		}
	}

	// The requests follow the forgeries in the partition, so the ledger
	// decides them after it has seen all three.
	for i := range 4 {
		if code, ec := chatStatus(ctx, t, st, 3000); code != http.StatusOK {
			t.Fatalf("request %d after the forged configs: %d %s; the old config (10 a window) serves it: was a forgery applied?", i+1, code, ec)
		}
	}
	// The ledger says why, once per forgery (its metric,
	// sluice_ledger_config_refused_total, counts them by reason).
	for _, c := range []struct{ ver, why string }{{"forged-1", "not signed"}, {"forged-2", "does not trust"}, {"forged-3", "does not verify"}} {
		if n := logged.count("ConfigChanged refused", c.ver, c.why); n != 1 {
			t.Errorf("%d log lines refusing %s (%s), want 1", n, c.ver, c.why)
		}
	}

	// The admin writer's signed change applies.
	if err := ledgerd.PublishConfigChange(ctx, brokers, names, schemas.ConfigChanged{Ledger: doc, Source: "test", Actor: "operator", Reason: "one a minute"}); err != nil {
		t.Fatalf("signed publish: %v", err)
	}
	served, limited := 0, 0
	for range 4 {
		switch code, ec := chatStatus(ctx, t, st, 1500); {
		case code == http.StatusOK:
			served++
		case code == http.StatusTooManyRequests:
			limited++
		default:
			t.Errorf("after the signed change: %d %s", code, ec)
		}
	}
	t.Logf("after the signed one-a-minute config: %d served, %d limited", served, limited)
	if served > 1 || limited < 3 {
		t.Errorf("after the signed change %d of 4 served and %d limited, want at most 1 served (burst 1): not applied?", served, limited)
	}

	// A rollback: the start-up change (ten a window), validly signed by
	// the writer, appended again verbatim by a principal that can write
	// the topic. Its sequence is below the one-a-minute change's, so the
	// ledger refuses it and the requests stay limited.
	hist, err := ledgerd.ConfigHistory(ctx, brokers, names, 0)
	if err != nil {
		t.Fatal(err)
	}
	var startup *schemas.ConfigChanged
	for i := range hist {
		if hist[i].Refused == "" {
			startup = &hist[i].Change
			break
		}
	}
	if startup == nil || startup.Seq == 0 {
		t.Fatalf("no signed start-up change with a sequence in the history: %+v", hist)
	}
	old := eventid.New(schemas.TypeConfigChanged, time.Now().UnixMilli())
	old.ConfigChanged = startup
	b, err := schemas.Encode(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.ProduceSync(ctx, &kgo.Record{Topic: names.Requests, Partition: 0, Value: b}).FirstErr(); err != nil {
		t.Fatalf("re-append the start-up change: %v", err)
	}
	for i := range 3 {
		if code, ec := chatStatus(ctx, t, st, 1500); code != http.StatusTooManyRequests {
			t.Errorf("request %d after the old change was re-appended: %d %s, want 429 (one a minute stays in force): rolled back?", i+1, code, ec)
		}
	}
	if n := logged.count("ConfigChanged refused by the ledger", "rollback", startup.ConfigVersion); n != 1 {
		t.Errorf("%d log lines refusing the re-appended %s as a rollback, want 1", n, startup.ConfigVersion)
	}

	if hist, err = ledgerd.ConfigHistory(ctx, brokers, names, 0); err != nil {
		t.Fatal(err)
	}
	refused := map[string]string{}
	applied := 0
	for _, h := range hist {
		if h.Refused != "" {
			refused[h.Change.ConfigVersion] = h.Refused
		} else {
			applied++
		}
	}
	for _, c := range []struct{ ver, why string }{{"forged-1", "not signed"}, {"forged-2", "does not trust"}, {"forged-3", "does not verify"},
		{startup.ConfigVersion, "older than the config in force"}} {
		if !strings.Contains(refused[c.ver], c.why) {
			t.Errorf("history of %s: refused %q, want it to say %q", c.ver, refused[c.ver], c.why)
		}
	}
	if applied != 2 || len(refused) != 4 {
		t.Errorf("history: %d applied, %d refused, want 2 (start-up, signed) and 4 (3 forged, 1 rollback): %+v", applied, len(refused), hist)
	}

	// Replay refuses the same records: no divergence. The ledger commits
	// once a second; wait until every input is under its committed offset.
	// (Before its first commit Verify says there is nothing to verify.)
	var rep *ledgerd.ReplayReport
	for {
		rep, err = ledgerd.Verify(ctx, ledgerd.ReplayOptions{Brokers: brokers, Topics: names, Group: st.LedgerGroup})
		if err == nil && (len(rep.Divergences) > 0 || rep.Decisions >= 12) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("replay --verify never covered the run's 12 decisions: %v, %+v", err, rep)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(rep.Divergences) > 0 {
		t.Fatalf("replay diverged: %v", rep.Divergences[0])
	}
	t.Logf("replay --verify: %d inputs, %d decisions, 0 divergences", rep.Inputs, rep.Decisions)
}

// TestUnknownDeploymentRealBroker is issue 19's D5 on the real broker: the
// ledger's document (signed, so it applies) requires the deployment level
// and knows only "sim-openai-east", while the gateway's provider is still
// called "sim-openai" — a name that drifted. Every request is then refused
// with 403 path_unknown_id instead of running ungoverned.
func TestUnknownDeploymentRealBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	brokers := bus.SplitBrokers(testenv.KafkaBrokers(t))
	names := bus.NamesWithPrefix(fmt.Sprintf("test%d.unknowndep.", time.Now().UnixNano()))
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: brokers, Topics: names, Partitions: 1})
	if err != nil {
		t.Fatalf("dev stack on the real broker: %v", err)
	}
	defer st.Close()
	untilServed(ctx, t, st)

	c := ledger.DefaultDevConfig()
	c.Scopes[0].RequiredLevels = []string{ledger.LevelKey, ledger.LevelDeployment}
	c.Scopes[0].Buckets = append(c.Scopes[0].Buckets,
		ledger.BucketConfig{Level: ledger.LevelDeployment, ID: "sim-openai-east", Dimension: schemas.DimRequests, Capacity: 600, PeriodMs: 60_000, WindowMs: 10_000})
	doc, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.ParseConfig(doc); err != nil {
		t.Fatalf("the drifted document itself is invalid: %v", err)
	}
	if err := ledgerd.PublishConfigChange(ctx, brokers, names, schemas.ConfigChanged{Ledger: doc, Source: "test", Reason: "deployment renamed"}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		code, ec := chatStatus(ctx, t, st, 3000)
		if code != http.StatusForbidden || ec != apierr.CodePathUnknownID {
			t.Fatalf("request %d with the drifted deployment: %d %q, want 403 %s", i+1, code, ec, apierr.CodePathUnknownID)
		}
	}
}
