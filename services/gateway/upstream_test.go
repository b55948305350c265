package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/gateway"
)

const upstreamSecret = "sk-upstream-SECRET-0123456789abcdef"

// fakeUpstream is a provider whose behaviour each test scripts per model.
type fakeUpstream struct {
	*httptest.Server
	calls atomic.Int32
	mu    sync.Mutex
	by    map[string]http.HandlerFunc // model → handler
	auth  []string                    // Authorization / api-key seen
}

func newFakeUpstream(t *testing.T) *fakeUpstream {
	f := &fakeUpstream{by: map[string]http.HandlerFunc{}}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		var m struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(b, &m)
		if strings.Contains(r.URL.Path, "/azure/") {
			m.Model = "azure"
		}
		f.mu.Lock()
		f.auth = append(f.auth, r.Header.Get("Authorization")+r.Header.Get("api-key"))
		h := f.by[m.Model]
		f.mu.Unlock()
		if h == nil {
			http.Error(w, "no script for "+m.Model, 500)
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		h(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeUpstream) script(model string, h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.by[model] = h
}

const okCompletion = `{"id":"chatcmpl-x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`

// okHandler answers a completion with OpenAI's rate-limit headers. The
// ledger learns the reported limit (ledger/learn.go: nothing is configured
// for the fake's deployment, so the headers alone set its requests
// bucket); 100,000 RPM keeps it out of the way of the tests' retries.
func okHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-ratelimit-remaining-requests", "99999")
	w.Header().Set("x-ratelimit-limit-requests", "100000")
	_, _ = io.WriteString(w, okCompletion)
}

// rateLimited answers OpenAI's 429 without naming the limited dimension,
// with a tiny Retry-After.
func rateLimited(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("retry-after-ms", "5")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached. Please try again in 5ms.","type":"rate_limit_error","code":"rate_limit_exceeded"}}`)
}

// upstreamStack starts a dev stack whose extra models go to f.
func upstreamStack(t *testing.T, f *fakeUpstream) *stack {
	t.Setenv("SLUICE_TEST_UPSTREAM_KEY", upstreamSecret)
	return startStack(t, func(simURL string) string {
		return testYAML(simURL, fmt.Sprintf(`  - {name: fake, kind: openai, scope: sim-openai, base_url: %[1]s/openai/v1, api_key_env: SLUICE_TEST_UPSTREAM_KEY}
  - {name: fake-azure, kind: azure, scope: sim-azure, base_url: %[1]s/azure, deployment: d1, api_version: 2024-10-21, api_key_env: SLUICE_TEST_UPSTREAM_KEY}
  - {name: dead, kind: openai, scope: sim-openai, base_url: "http://127.0.0.1:1/v1?token=%[2]s"}`, f.URL, upstreamSecret),
			`  - {model: fake-model, provider: fake}
  - {model: fake-429, provider: fake}
  - {model: fake-400, provider: fake}
  - {model: fake-401, provider: fake}
  - {model: fake-stream, provider: fake}
  - {model: fake-slow, provider: fake}
  - {model: dead-model, provider: dead}
  - model: fallback-model
    contract: {min_context_tokens: 100000, residency: [eu]}
    candidates:
      - {provider: fake, upstream_model: fake-always-429, context_tokens: 128000, residency: eu}
      - {provider: fake-azure, upstream_model: gpt-4o-mini, context_tokens: 128000, residency: eu}`, "")
	})
}

// TestDisconnectMidStreamCancelsUpstream: a client that goes away after the
// first chunk cancels the provider call, and the attempt is reconciled with
// the partial usage streamed so far — nothing stays reserved.
func TestDisconnectMidStreamCancelsUpstream(t *testing.T) {
	f := newFakeUpstream(t)
	upstreamGone := make(chan struct{})
	f.script("fake-stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello there, this is the first chunk"},"finish_reason":null}]}`+"\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // block until the gateway cancels the call
		close(upstreamGone)
	})
	st := upstreamStack(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", st.GatewayURL+"/v1/chat/completions",
		strings.NewReader(`{"model":"fake-stream","stream":true,"max_tokens":500,"messages":[{"role":"user","content":"tell me a long story"}]}`))
	req.Header.Set("Authorization", "Bearer "+keyDemo)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	reqID := resp.Header.Get("X-Sluice-Request-Id")
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel() // the client disconnects mid-stream
	resp.Body.Close()
	select {
	case <-upstreamGone:
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream call was not cancelled after the client disconnected")
	}
	evs := st.events(t, reqID, func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeReconciled)) })
	for _, e := range evs {
		if rc := e.Reconciled; rc != nil {
			if !rc.Partial || !rc.Streaming || rc.OutputTokens == 0 || rc.InputTokens == 0 || rc.HTTPStatus != 499 {
				t.Errorf("reconcile after disconnect %+v: want partial streamed usage, status 499", rc)
			}
		}
	}
}

// TestProviderRejectionRetriedThroughTheLedger: a 429 before any byte
// reached the client becomes ProviderRejected + RetryRequested, and the
// ledger's next-attempt grant is followed (streaming or not).
func TestProviderRejectionRetriedThroughTheLedger(t *testing.T) {
	f := newFakeUpstream(t)
	var n atomic.Int32
	f.script("fake-429", func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 1 {
			rateLimited(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
			return
		}
		okHandler(w, r)
	})
	st := upstreamStack(t, f)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, fmt.Sprintf(`{"model":"fake-429","stream":%v,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, stream))
			if resp.StatusCode != 200 || strings.Contains(string(b), "rate_limit") {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			evs := st.events(t, resp.Header.Get("X-Sluice-Request-Id"), func(evs []schemas.Event) bool {
				return has(evs, func(e schemas.Event) bool { return e.Type == schemas.TypeReconciled && e.Attempt == 2 })
			})
			for _, want := range []func(schemas.Event) bool{
				func(e schemas.Event) bool {
					return e.Type == schemas.TypeProviderRejected && e.Attempt == 1 && e.ProviderRejected.HTTPStatus == 429
				},
				func(e schemas.Event) bool {
					return e.Type == schemas.TypeRetryRequested && e.Attempt == 2 && e.RetryRequested.PreviousAttempt == 1 && e.RetryRequested.Reason == "retryable_capacity"
				},
				func(e schemas.Event) bool {
					return e.Decision != nil && e.Attempt == 2 && e.Decision.Status == schemas.StatusGranted
				},
			} {
				if !has(evs, want) {
					t.Errorf("missing event in %s", describe(evs))
				}
			}
		})
	}
}

// TestProviderErrorsAndCredentials: non-retryable provider errors are
// final and normalised; a provider credential never appears in a response,
// an event or a log line — even when the provider echoes it.
func TestProviderErrorsAndCredentials(t *testing.T) {
	f := newFakeUpstream(t)
	f.script("fake-model", okHandler)
	f.script("fake-400", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"error":{"message":"Invalid value for 'temperature'.","type":"invalid_request_error","param":"temperature","code":null}}`)
	})
	f.script("fake-401", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(401)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided: `+upstreamSecret+`. Bearer `+upstreamSecret+`","type":"invalid_request_error","code":"invalid_api_key"}}`)
	})
	st := upstreamStack(t, f)
	tests := []struct {
		model  string
		status int
		code   string
	}{
		{"fake-model", 200, ""},
		{"fake-400", 400, "upstream_request_error"},
		{"fake-401", 502, "upstream_auth_error"},
		{"dead-model", 502, "upstream_error"},
	}
	for _, tc := range tests {
		t.Run(tc.model, func(t *testing.T) {
			before := f.calls.Load()
			resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, `{"model":"`+tc.model+`","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if strings.Contains(string(b), upstreamSecret) || strings.Contains(string(b), "SECRET") {
				t.Fatalf("response leaks the provider credential: %s", b)
			}
			if tc.status != 200 {
				if e := decodeError(t, b, false); e.Code != tc.code {
					t.Errorf("code %q, want %q", e.Code, tc.code)
				}
				// The official SDKs obey x-should-retry before their status
				// rules: a refused provider credential is a 502 they must not
				// retry, and the provider's 4xx (the request's fault) says so too.
				if got := resp.Header.Get("x-should-retry"); (tc.model == "fake-401" || tc.status < 500) != (got == "false") {
					t.Errorf("x-should-retry %q", got)
				}
				if tc.model != "dead-model" && f.calls.Load()-before != 1 {
					t.Errorf("a non-retryable error was retried (%d calls)", f.calls.Load()-before)
				}
			}
			// The grant is settled: Reconciled (provider answered) or
			// Released (it never did).
			st.events(t, resp.Header.Get("X-Sluice-Request-Id"), func(evs []schemas.Event) bool {
				return has(evs, ofType(schemas.TypeReconciled)) || has(evs, ofType(schemas.TypeReleased))
			})
		})
	}
	f.mu.Lock()
	sawKey := len(f.auth) > 0 && f.auth[0] == "Bearer "+upstreamSecret
	f.mu.Unlock()
	if !sawKey {
		t.Errorf("the provider did not receive the credential from the environment")
	}
	if strings.Contains(st.logs.String(), "SECRET") {
		t.Errorf("a log line holds the provider credential:\n%s", st.logs.String())
	}
	if strings.Contains(st.allRaw(t), "SECRET") {
		t.Errorf("an event holds the provider credential")
	}
}

// TestFallbackKeepsTheContract: when the primary keeps answering 429 and
// the ledger refuses a further retry, the request goes to the candidate
// whose contract the route allows, as a new reservation in its scope.
func TestFallbackKeepsTheContract(t *testing.T) {
	f := newFakeUpstream(t)
	f.script("fake-always-429", rateLimited)
	f.script("azure", okHandler)
	st := upstreamStack(t, f)
	resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, `{"model":"fallback-model","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	// Dispatched travels on sluice.telemetry, whose producer lingers: it
	// may land after the Reconciled that followed it. Wait for it (a
	// missing one fails the wait, with what was seen).
	st.events(t, resp.Header.Get("X-Sluice-Request-Id"), func(evs []schemas.Event) bool {
		return has(evs, func(e schemas.Event) bool {
			return e.Dispatched != nil && e.Dispatched.Fallback && e.Scope == "sim-azure"
		})
	})
	// Without permission (X-Sluice-Fallback: false) the same request fails
	// with a 429: the provider's, or the ledger's own while the scope cools
	// down after the provider's refusals — never a dispatch elsewhere.
	resp, b = st.do(t, "POST", "/v1/chat/completions", keyDemo, `{"model":"fallback-model","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, "X-Sluice-Fallback", "false")
	if resp.StatusCode != 429 {
		t.Fatalf("without fallback: status %d: %s", resp.StatusCode, b)
	}
	e := decodeError(t, b, false)
	if e.Sluice.GatewayDecision != "admitted_then_provider_rejected" && e.Sluice.GatewayDecision != "rejected_locally" {
		t.Errorf("error %+v", e)
	}
	// Every event of the request is in: its Outcome, and a Dispatched for
	// every granted attempt that was not released undispatched (a late
	// grant, on a loaded machine) (the telemetry producer's order is not
	// the ledger topics').
	evs := st.events(t, e.Sluice.RequestID, func(evs []schemas.Event) bool {
		granted, settled := map[int32]bool{}, map[int32]bool{}
		for _, e := range evs {
			if e.Decision != nil && e.Decision.Status == schemas.StatusGranted {
				granted[e.Attempt] = true
			}
			if e.Dispatched != nil || e.Type == schemas.TypeReleased {
				settled[e.Attempt] = true
			}
		}
		for a := range granted {
			if !settled[a] {
				return false
			}
		}
		return has(evs, ofType(schemas.TypeOutcome))
	})
	if has(evs, func(e schemas.Event) bool { return e.Dispatched != nil && e.Dispatched.Fallback }) {
		t.Errorf("fallback without permission: %s", describe(evs))
	}
}

// TestIdempotencyInFlight: a repeat while the first request is still
// running is refused with 409; after it finishes the repeat replays.
func TestIdempotencyInFlight(t *testing.T) {
	f := newFakeUpstream(t)
	arrived, release := make(chan struct{}), make(chan struct{})
	f.script("fake-slow", func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		okHandler(w, r)
	})
	st := upstreamStack(t, f)
	body := `{"model":"fake-slow","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	first := make(chan int, 1)
	go func() {
		resp, _ := st.do(t, "POST", "/v1/chat/completions", keyDemo, body, "Idempotency-Key", "k-1")
		first <- resp.StatusCode
	}()
	<-arrived
	resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, body, "Idempotency-Key", "k-1")
	if resp.StatusCode != 409 || decodeError(t, b, false).Code != "idempotency_in_flight" {
		t.Fatalf("repeat in flight: %d %s", resp.StatusCode, b)
	}
	close(release)
	if code := <-first; code != 200 {
		t.Fatalf("first: %d", code)
	}
	resp, _ = st.do(t, "POST", "/v1/chat/completions", keyDemo, body, "Idempotency-Key", "k-1")
	if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "true" || f.calls.Load() != 1 {
		t.Fatalf("replay: %d %v, upstream calls %d", resp.StatusCode, resp.Header, f.calls.Load())
	}
}

// TestLedgerUnavailable: with no ledger consuming, the gateway fails closed
// with 503 and the abandoned reservation is released.
func TestLedgerUnavailable(t *testing.T) {
	ctx := context.Background()
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	names := bus.DefaultNames()
	adm, err := bus.NewClient(ctx, cl.ListenAddrs(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	tc := bus.DefaultTopics()
	if _, err := bus.Ensure(ctx, kadm.NewClient(adm), tc.Specs()); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(strings.NewReader(testYAML("http://127.0.0.1:1", "", "", "ledger_timeout_ms: 200")))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := reserve.New(ctx, reserve.Config{Brokers: cl.ListenAddrs(), Topics: names, Node: cfg.Node, AnswerTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	srv := httptest.NewServer(gateway.New(cfg, rc, nil))
	defer srv.Close()
	st := &stack{names: names}
	resp, b := st.doURL(t, srv.URL)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d %v: %s", resp.StatusCode, resp.Header, b)
	}
	if e := decodeError(t, b, false); e.Code != "ledger_unavailable" || e.Sluice.GatewayDecision != "ledger_unavailable" {
		t.Errorf("error %+v", e)
	}
}

func (s *stack) doURL(t *testing.T, base string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+keyDemo)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}
