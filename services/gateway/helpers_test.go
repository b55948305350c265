package gateway_test

import (
	"bytes"
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

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/dev"
)

// Keys of the test tenants (only their hashes go into the config).
const (
	keyDemo     = "sk-test-demo"
	keyLimited  = "sk-test-limited"
	keyDisabled = "sk-test-disabled"
	keyPaused   = "sk-test-paused"
	keyPausedT  = "sk-test-paused-tenant"
	keyBatch    = "sk-test-batch"
	keyExpired  = "sk-test-expired"
)

// stack is a dev stack on an in-process kfake cluster plus a log buffer and
// a reader of every event it produced.
type stack struct {
	*dev.Stack
	names bus.Names
	logs  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testYAML is the gateway config of the tests: providers at base (the
// simulator, or a test upstream speaking the same paths), extra YAML for
// providers/routes, and tenants covering every identity case.
func testYAML(base, extraProviders, extraRoutes, top string) string {
	lc := ledger.DefaultDevConfig()
	lc.Scopes[0].Buckets = []ledger.BucketConfig{
		{Level: ledger.LevelKey, ID: "*", Dimension: schemas.DimRequests, Capacity: 100_000, PeriodMs: 60_000},
		{Level: ledger.LevelKey, ID: "limited-key", Dimension: schemas.DimRequests, Capacity: 1, PeriodMs: 3_600_000, WindowMs: 3_600_000},
	}
	for _, sc := range []string{"sim-azure", "sim-anthropic", "sim-gemini"} {
		c := lc.Scopes[0]
		c.Name = sc
		lc.Scopes = append(lc.Scopes, c)
	}
	led, err := json.Marshal(lc)
	if err != nil {
		panic(err) // a ledger.Config always marshals
	}
	return fmt.Sprintf(`node: gw-test
body_limit_bytes: 65536
%[6]s
providers:
  - {name: sim-openai, kind: openai, scope: sim-openai, base_url: %[1]s/openai/v1}
  - {name: sim-azure, kind: azure, scope: sim-azure, base_url: %[1]s/azure, deployment: gpt-4o-mini, api_version: 2024-10-21}
  - {name: sim-anthropic, kind: anthropic, scope: sim-anthropic, base_url: %[1]s/anthropic/v1}
  - {name: sim-gemini, kind: gemini, scope: sim-gemini, base_url: %[1]s/gemini/v1beta}
%[4]s
routes:
  - {model: gpt-4o-mini, provider: sim-openai}
  - {model: text-embedding-3-small, provider: sim-openai}
  - {model: azure-gpt-4o-mini, provider: sim-azure, upstream_model: gpt-4o-mini}
  - {model: claude-sonnet-4-5, provider: sim-anthropic}
  - {model: gemini-2.0-flash, provider: sim-gemini}
%[5]s
tenants:
  - id: demo
    org: demo-org
    keys:
      - {id: demo-key, sha256: %[2]s, team: demo-team}
      - {id: limited-key, sha256: %[7]s}
      - {id: disabled-key, sha256: %[8]s, disabled: true}
      - {id: paused-key, sha256: %[9]s, paused: true}
  - id: batchco
    allowed_classes: [batch, agent]
    max_priority: 10
    keys:
      - {id: batch-key, sha256: %[11]s, class: batch, priority: -5, allowed_models: [gpt-4o-mini]}
      - {id: expired-key, sha256: %[12]s, class: batch, expires_at: "2026-01-01T00:00:00Z"}
  - id: frozen
    paused: true
    keys:
      - {id: frozen-key, sha256: %[10]s}
ledger: %[3]s
`, base, config.HashKey(keyDemo), led, extraProviders, extraRoutes, top,
		config.HashKey(keyLimited), config.HashKey(keyDisabled), config.HashKey(keyPaused), config.HashKey(keyPausedT), config.HashKey(keyBatch), config.HashKey(keyExpired))
}

// startStack starts a dev stack whose gateway config comes from yamlFor
// (given the simulator's URL); nil = testYAML against the simulator.
func startStack(t *testing.T, yamlFor func(simURL string) string) *stack {
	t.Helper()
	st, err := newStack(yamlFor)
	if err != nil {
		t.Fatalf("dev stack: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

func newStack(yamlFor func(simURL string) string) (*stack, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if yamlFor == nil {
		yamlFor = func(u string) string { return testYAML(u, "", "", "") }
	}
	logs := &syncBuffer{}
	names := bus.NamesWithPrefix(fmt.Sprintf("gwtest%d.", time.Now().UnixNano()))
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Topics: names, APIKey: keyDemo,
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Config: func(u string) (*config.Config, error) {
			return config.Load(strings.NewReader(yamlFor(u)))
		}})
	if err != nil {
		return nil, err
	}
	return &stack{Stack: st, names: names, logs: logs}, nil
}

// do sends a request with the given API key and headers.
func (s *stack) do(t *testing.T, method, path, key, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.GatewayURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// metrics scrapes the gateway's metrics listener.
func (s *stack) metrics(t *testing.T) []byte {
	t.Helper()
	resp, err := http.Get(s.MetricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %d %v %s", resp.StatusCode, err, b)
	}
	return b
}

// events reads the stack's request and telemetry topics from the start
// until done reports true over the events of reqID seen so far, or the
// bound passes (then the test fails with what was seen).
func (s *stack) events(t *testing.T, reqID string, done func([]schemas.Event) bool) []schemas.Event {
	t.Helper()
	// Decisions as the gateway sees them: produced, not yet committed (the
	// ledger commits every 100 ms, so a committed reader could see the
	// gateway's Reconciled before the grant it followed).
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.ConsumeTopics(s.names.Requests, s.names.Telemetry, s.names.Decisions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []schemas.Event
	for !done(out) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("events of %s: condition not met; saw %s", reqID, describe(out))
		}
		fs.EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && (reqID == "" || ev.RequestID == reqID) {
				out = append(out, ev)
			}
		})
	}
	return out
}

// allRaw returns every record value on the stack's topics so far.
func (s *stack) allRaw(t *testing.T) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.ConsumeTopics(s.names.All()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var sb strings.Builder
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { n++; sb.Write(r.Value); sb.WriteByte('\n') })
		if n == 0 {
			return sb.String()
		}
	}
}

func has(evs []schemas.Event, match func(schemas.Event) bool) bool {
	for _, e := range evs {
		if match(e) {
			return true
		}
	}
	return false
}

func ofType(t schemas.Type) func(schemas.Event) bool {
	return func(e schemas.Event) bool { return e.Type == t }
}

func describe(evs []schemas.Event) string {
	var parts []string
	for _, e := range evs {
		s := fmt.Sprintf("%s#%d", e.Type, e.Attempt)
		if e.Decision != nil {
			s += "(" + string(e.Decision.Status) + ")"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// apiError decodes the OpenAI envelope (or Anthropic's when anthropic).
type apiError struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Param   string `json:"param"`
	Message string `json:"message"`
	Sluice  struct {
		Type            string `json:"type"`
		GatewayDecision string `json:"gateway_decision"`
		RequestID       string `json:"request_id"`
		RetryAfterMs    int64  `json:"retry_after_ms"`
		Tenant          string `json:"tenant"`
	} `json:"sluice"`
}

func decodeError(t *testing.T, b []byte, anthropic bool) apiError {
	t.Helper()
	var env struct {
		Type  string   `json:"type"`
		Error apiError `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("error body is not JSON: %s", b)
	}
	if anthropic && env.Type != "error" {
		t.Fatalf("not an Anthropic error envelope: %s", b)
	}
	return env.Error
}
