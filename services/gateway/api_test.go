package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

var shared *stack

// TestMain starts one dev stack against the simulator, shared by the tests
// that only need the simulator (each uses its own request ids).
func TestMain(m *testing.M) {
	st, err := newStack(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dev stack:", err)
		os.Exit(1)
	}
	shared = st
	code := m.Run()
	st.Close()
	os.Exit(code)
}

func simStack(*testing.T) *stack { return shared }

func TestErrorContract(t *testing.T) {
	st := startStack(t, nil)
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	// small: the limited key's rows are about its one request an hour, not
	// about the deployment's token bucket, which the simulator's headers
	// set (learned capacity) and a 4,096-token default output would wait on.
	small := `{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name      string
		method    string
		path      string
		key       string
		body      string
		hdr       []string
		status    int
		code      string
		param     string
		anthropic bool
		decision  string
	}{
		{name: "no key", path: "/v1/chat/completions", body: chat, status: 401, code: "missing_api_key"},
		{name: "unknown key", path: "/v1/chat/completions", key: "sk-nope", body: chat, status: 401, code: "invalid_api_key"},
		{name: "lowercase bearer scheme", path: "/v1/chat/completions", body: chat, hdr: []string{"Authorization", "bearer " + keyDemo}, status: 0},
		{name: "other auth scheme", path: "/v1/chat/completions", body: chat, hdr: []string{"Authorization", "Basic " + keyDemo}, status: 401, code: "missing_api_key"},
		{name: "disabled key", path: "/v1/chat/completions", key: keyDisabled, body: chat, status: 401, code: "api_key_disabled"},
		{name: "paused key", path: "/v1/chat/completions", key: keyPaused, body: chat, status: 403, code: "paused", decision: "rejected_policy"},
		{name: "paused tenant", path: "/v1/chat/completions", key: keyPausedT, body: chat, status: 403, code: "paused", decision: "rejected_policy"},
		{name: "malformed JSON", path: "/v1/chat/completions", key: keyDemo, body: `{"model":`, status: 400, code: "invalid_json"},
		{name: "not an object", path: "/v1/chat/completions", key: keyDemo, body: `[1,2]`, status: 400, code: "invalid_type"},
		{name: "messages wrong type", path: "/v1/chat/completions", key: keyDemo, body: `{"model":"gpt-4o-mini","messages":"hi"}`, status: 400, code: "invalid_type", param: "messages"},
		{name: "model missing", path: "/v1/chat/completions", key: keyDemo, body: `{"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "missing_field", param: "model"},
		{name: "negative max_tokens", path: "/v1/chat/completions", key: keyDemo, body: `{"model":"gpt-4o-mini","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "invalid_value", param: "max_tokens"},
		{name: "absurd max_tokens", path: "/v1/chat/completions", key: keyDemo, body: `{"model":"gpt-4o-mini","max_tokens":1000000000,"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "invalid_value", param: "max_tokens"},
		{name: "string max_tokens", path: "/v1/chat/completions", key: keyDemo, body: `{"model":"gpt-4o-mini","max_tokens":"10","messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "invalid_type", param: "max_tokens"},
		{name: "body over limit", path: "/v1/chat/completions", key: keyDemo, body: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("x", 70_000) + `"}]}`, status: 413, code: "body_too_large"},
		{name: "unknown model", path: "/v1/chat/completions", key: keyDemo, body: `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`, status: 404, code: "model_not_found", param: "model"},
		{name: "unknown class", path: "/v1/chat/completions", key: keyDemo, body: chat, hdr: []string{"X-Sluice-Class", "vip"}, status: 400, code: "invalid_header", param: "X-Sluice-Class"},
		{name: "priority out of range", path: "/v1/chat/completions", key: keyDemo, body: chat, hdr: []string{"X-Sluice-Priority", "101"}, status: 400, code: "invalid_header", param: "X-Sluice-Priority"},
		{name: "deadline not a number", path: "/v1/chat/completions", key: keyDemo, body: chat, hdr: []string{"X-Sluice-Deadline-Ms", "soon"}, status: 400, code: "invalid_header", param: "X-Sluice-Deadline-Ms"},
		{name: "embeddings on an anthropic model", path: "/v1/embeddings", key: keyDemo, body: `{"model":"claude-sonnet-4-5","input":"hi"}`, status: 400, code: "unsupported_api", param: "model"},
		{name: "chat on an anthropic model asking for logprobs", path: "/v1/chat/completions", key: keyDemo, body: `{"model":"claude-sonnet-4-5","logprobs":true,"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "unsupported_api"},
		{name: "responses on an anthropic model continuing a stored response", path: "/v1/responses", key: keyDemo, body: `{"model":"claude-sonnet-4-5","input":"hi","previous_response_id":"resp_1"}`, status: 400, code: "unsupported_api"},
		{name: "responses input wrong type", path: "/v1/responses", key: keyDemo, body: `{"model":"gpt-4o-mini","input":5}`, status: 400, code: "invalid_type", param: "input"},
		{name: "responses bad max_output_tokens", path: "/v1/responses", key: keyDemo, body: `{"model":"gpt-4o-mini","input":"hi","max_output_tokens":0}`, status: 400, code: "invalid_value", param: "max_output_tokens"},
		{name: "completions without prompt", path: "/v1/completions", key: keyDemo, body: `{"model":"gpt-4o-mini"}`, status: 400, code: "missing_field", param: "prompt"},
		{name: "completions best_of below n", path: "/v1/completions", key: keyDemo, body: `{"model":"gpt-4o-mini","prompt":"x","n":2,"best_of":1}`, status: 400, code: "invalid_value", param: "best_of"},
		{name: "responses wrong method", method: http.MethodGet, path: "/v1/responses", key: keyDemo, status: 405, code: "method_not_allowed"},
		{name: "messages without max_tokens", path: "/v1/messages", key: keyDemo, body: `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "missing_field", param: "max_tokens", anthropic: true},
		{name: "messages unknown model", path: "/v1/messages", key: keyDemo, body: `{"model":"claude-9","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, status: 404, code: "model_not_found", anthropic: true},
		{name: "messages bad key", path: "/v1/messages", key: "sk-nope", body: `{}`, status: 401, code: "invalid_api_key", anthropic: true},
		{name: "wrong method", method: http.MethodGet, path: "/v1/chat/completions", key: keyDemo, status: 405, code: "method_not_allowed"},
		{name: "unknown path", method: http.MethodGet, path: "/v2/whatever", key: keyDemo, status: 404, code: "not_found"},
		// Entitlements (D6): the batch key's tenant allows batch and agent
		// at priority 10 at most, the key only gpt-4o-mini.
		{name: "class beyond the tenant's entitlement", path: "/v1/chat/completions", key: keyBatch, body: chat, hdr: []string{"X-Sluice-Class", "interactive"}, status: 403, code: "class_not_entitled", param: "X-Sluice-Class", decision: "rejected_policy"},
		{name: "priority above the tenant's maximum", path: "/v1/chat/completions", key: keyBatch, body: chat, hdr: []string{"X-Sluice-Priority", "100"}, status: 403, code: "priority_not_entitled", param: "X-Sluice-Priority"},
		{name: "class and priority within the entitlement", path: "/v1/chat/completions", key: keyBatch, body: chat, hdr: []string{"X-Sluice-Class", "agent", "X-Sluice-Priority", "10"}, status: 0},
		{name: "model outside the key's allowlist", path: "/v1/chat/completions", key: keyBatch, body: `{"model":"gemini-2.0-flash","messages":[{"role":"user","content":"hi"}]}`, status: 403, code: "model_not_allowed", param: "model"},
		{name: "model outside the allowlist, messages", path: "/v1/messages", key: keyBatch, body: `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, status: 403, code: "model_not_allowed", anthropic: true},
		{name: "count_tokens of a model outside the allowlist", path: "/v1/messages/count_tokens", key: keyBatch, body: `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`, status: 403, code: "model_not_allowed", anthropic: true},
		{name: "retrieve a model outside the allowlist", method: http.MethodGet, path: "/v1/models/gemini-2.0-flash", key: keyBatch, status: 403, code: "model_not_allowed"},
		{name: "expired key", path: "/v1/chat/completions", key: keyExpired, body: chat, status: 401, code: "invalid_api_key"},
		{name: "local limit", path: "/v1/chat/completions", key: keyLimited, body: small, status: 0}, // uses the key's only request
		{name: "local 429", path: "/v1/chat/completions", key: keyLimited, body: small, status: 429, code: "", decision: "rejected_locally|queued_then_expired"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.method
			if m == "" {
				m = http.MethodPost
			}
			resp, b := st.do(t, m, tc.path, tc.key, tc.body, tc.hdr...)
			if tc.status == 0 {
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				return
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			e := decodeError(t, b, tc.anthropic)
			// Every answer names its request, in the header and the body,
			// before routing too (D10).
			if id := resp.Header.Get("X-Sluice-Request-Id"); id == "" || id != e.Sluice.RequestID {
				t.Errorf("X-Sluice-Request-Id %q, sluice.request_id %q", id, e.Sluice.RequestID)
			}
			// A refusal no retry can fix says so to the SDKs (item 5), and
			// so does one whose Retry-After is over a minute (the limited
			// key's: an hour); one a retry may fix soon does not.
			final := tc.status != 408 && tc.status != 409 && tc.status != 429 && tc.status < 500 || e.Sluice.RetryAfterMs > 60_000
			if got := resp.Header.Get("x-should-retry") == "false"; got != final {
				t.Errorf("x-should-retry: false is %v, want %v (status %d)", got, final, tc.status)
			}
			if tc.code != "" && e.Code != tc.code {
				t.Errorf("code %q, want %q (%s)", e.Code, tc.code, b)
			}
			if tc.param != "" && e.Param != tc.param {
				t.Errorf("param %q, want %q", e.Param, tc.param)
			}
			if tc.decision != "" && !strings.Contains("|"+tc.decision+"|", "|"+e.Sluice.GatewayDecision+"|") {
				t.Errorf("gateway_decision %q, want %s", e.Sluice.GatewayDecision, tc.decision)
			}
			if e.Message == "" || e.Type == "" {
				t.Errorf("incomplete envelope: %s", b)
			}
			if tc.status == 429 {
				if resp.Header.Get("Retry-After") == "" && e.Code != "queue_timeout" {
					t.Errorf("429 without Retry-After: %v", resp.Header)
				}
				if e.Sluice.RequestID == "" || e.Sluice.Type != "local_limit" {
					t.Errorf("429 sluice object incomplete: %s", b)
				}
				// Nothing stays reserved: the ledger settled the attempt
				// (denied or expired), so no grant is waiting for a release.
				evs := st.events(t, e.Sluice.RequestID, func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeDecision)) })
				if has(evs, func(e schemas.Event) bool { return e.Decision != nil && e.Decision.Status == schemas.StatusGranted }) {
					t.Errorf("a refused request holds a grant: %s", describe(evs))
				}
			}
		})
	}
}

func TestChatCompletionPlainAndStreaming(t *testing.T) {
	st := simStack(t)
	resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}],"max_tokens":16}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out struct {
		Object string                                         `json:"object"`
		Usage  struct{ PromptTokens, CompletionTokens int64 } `json:"usage"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Object != "chat.completion" {
		t.Fatalf("not a chat completion: %s", b)
	}
	reqID := resp.Header.Get("X-Sluice-Request-Id")
	evs := st.events(t, reqID, func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeReconciled)) })
	for _, e := range evs {
		if e.Type == schemas.TypeReserveRequested && (e.ReserveRequested.InputTokens < 5 || e.ReserveRequested.OutputTokens != 16) {
			t.Errorf("estimate %+v: want tokenizer input and max_tokens output", e.ReserveRequested)
		}
	}
	// The reconciled tokens reach sluice_gateway_tokens_total, the
	// alerts' source for estimation drift and tenant token pressure.
	if m := st.metrics(t); !regexp.MustCompile(`(?m)^sluice_gateway_tokens_total\{dimension="output",source="estimated",tenant="[^"]+"\} 16$`).Match(m) ||
		!regexp.MustCompile(`(?m)^sluice_gateway_tokens_total\{dimension="input",source="actual",tenant="[^"]+"\} [1-9]`).Match(m) ||
		!regexp.MustCompile(`(?m)^sluice_gateway_tenant_requests_total\{outcome="success",tenant="[^"]+"\} [1-9]`).Match(m) ||
		!regexp.MustCompile(`(?m)^sluice_gateway_spend_micro_usd_total\{tenant="[^"]+"\} `).Match(m) {
		t.Errorf("tokens metric missing or wrong:\n%s", m)
	}

	tests := []struct {
		name      string
		body      string
		wantUsage bool
	}{
		{"usage not asked: the forced usage chunk is withheld", `{"model":"gpt-4o-mini","stream":true,"max_tokens":12,"messages":[{"role":"user","content":"hi"}]}`, false},
		{"usage asked: passed through", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"max_tokens":12,"messages":[{"role":"user","content":"hi"}]}`, true},
		{"azure adapter", `{"model":"azure-gpt-4o-mini","stream":true,"max_tokens":12,"messages":[{"role":"user","content":"hi"}]}`, false},
		{"gemini translated", `{"model":"gemini-2.0-flash","stream":true,"stream_options":{"include_usage":true},"max_tokens":12,"messages":[{"role":"user","content":"hi"}]}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, tc.body)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			s := string(b)
			if !strings.Contains(s, "chat.completion.chunk") || !strings.HasSuffix(strings.TrimSpace(s), "data: [DONE]") {
				t.Fatalf("not an OpenAI stream: %s", s)
			}
			if got := strings.Contains(s, `"choices":[]`); got != tc.wantUsage {
				t.Errorf("usage chunk present = %v, want %v:\n%s", got, tc.wantUsage, s)
			}
			reqID := resp.Header.Get("X-Sluice-Request-Id")
			evs := st.events(t, reqID, func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeReconciled)) })
			for _, e := range evs {
				if rc := e.Reconciled; rc != nil && (!rc.Streaming || rc.Partial || rc.OutputTokens == 0 || rc.InputTokens == 0) {
					t.Errorf("stream reconcile %+v: want complete streamed usage", rc)
				}
			}
		})
	}
}

func TestEmbeddingsMessagesModels(t *testing.T) {
	st := simStack(t)
	tests := []struct {
		name, path, body, want string
		stream                 bool
	}{
		{"embeddings", "/v1/embeddings", `{"model":"text-embedding-3-small","input":["a","b"]}`, `"embedding"`, false},
		{"messages", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, `"type":"message"`, false},
		{"messages stream", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "event: message_stop", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := st.do(t, "POST", tc.path, keyDemo, tc.body)
			if resp.StatusCode != 200 || !strings.Contains(string(b), tc.want) {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			reqID := resp.Header.Get("X-Sluice-Request-Id")
			evs := st.events(t, reqID, func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeReconciled)) })
			for _, e := range evs {
				if rc := e.Reconciled; rc != nil && (rc.InputTokens == 0 || rc.Streaming != tc.stream || rc.Partial) {
					t.Errorf("reconcile %+v", rc)
				}
			}
		})
	}
	resp, b := st.do(t, "GET", "/v1/models", keyDemo, "")
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"id":"claude-sonnet-4-5"`) || !strings.Contains(string(b), `"object":"list"`) {
		t.Fatalf("models: %d %s", resp.StatusCode, b)
	}
	// count_tokens: the estimator's input count, no max_tokens needed.
	if resp, b := st.do(t, "POST", "/v1/messages/count_tokens", keyDemo, `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 || !regexp.MustCompile(`^\{"input_tokens":[1-9][0-9]*\}\n$`).Match(b) {
		t.Fatalf("count_tokens: %d %s", resp.StatusCode, b)
	}
	if resp, b := st.do(t, "POST", "/v1/messages/count_tokens", keyDemo, `{"model":"claude-9","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 404 || !strings.Contains(string(b), `"type":"not_found_error"`) {
		t.Fatalf("count_tokens of an unknown model: %d %s", resp.StatusCode, b)
	}
	// models.retrieve: a routed model, and model_not_found for another.
	if resp, b := st.do(t, "GET", "/v1/models/claude-sonnet-4-5", keyDemo, ""); resp.StatusCode != 200 || !strings.Contains(string(b), `"id":"claude-sonnet-4-5"`) || !strings.Contains(string(b), `"object":"model"`) {
		t.Fatalf("model: %d %s", resp.StatusCode, b)
	}
	if resp, b := st.do(t, "GET", "/v1/models/gpt-9", keyDemo, ""); resp.StatusCode != 404 || !strings.Contains(string(b), `"code":"model_not_found"`) {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, b)
	}
	if resp, _ := st.do(t, "GET", "/v1/models/claude-sonnet-4-5", "", ""); resp.StatusCode != 401 {
		t.Fatalf("model without a key: %d", resp.StatusCode)
	}
	if resp, _ := st.do(t, "GET", "/v1/models", "", ""); resp.StatusCode != 401 {
		t.Fatalf("models without a key: %d", resp.StatusCode)
	}
}

// TestProviderObserved checks that each adapter's rate-limit headers (as
// the simulator sends them in each provider's format) reach the ledger as
// ProviderObserved with the provider's dimensions.
func TestProviderObserved(t *testing.T) {
	st := simStack(t)
	tests := []struct {
		name, path, body string
		dim              schemas.Dimension
	}{
		{"openai", "/v1/chat/completions", `{"model":"gpt-4o-mini","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, schemas.DimTotalTokens},
		{"azure", "/v1/chat/completions", `{"model":"azure-gpt-4o-mini","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, schemas.DimTotalTokens},
		{"anthropic", "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, schemas.DimOutputTokens},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := st.do(t, "POST", tc.path, keyDemo, tc.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			st.events(t, resp.Header.Get("X-Sluice-Request-Id"), func(evs []schemas.Event) bool {
				return has(evs, func(e schemas.Event) bool {
					if e.ProviderObserved == nil {
						return false
					}
					for _, o := range e.ProviderObserved.Observations {
						if o.Dimension == tc.dim {
							return true
						}
					}
					return false
				})
			})
		})
	}
}

func TestClassPriorityDeadlineReachTheLedger(t *testing.T) {
	st := simStack(t)
	tests := []struct {
		name     string
		key      string
		hdr      []string
		class    string
		priority int32
		deadline bool
		retries  int32 // client_retry_count
	}{
		{"key defaults", keyBatch, nil, "batch", -5, false, 0},
		{"headers override", keyBatch, []string{"X-Sluice-Class", "agent", "X-Sluice-Priority", "7", "X-Sluice-Deadline-Ms", "30000"}, "agent", 7, true, 0},
		{"demo key default class", keyDemo, nil, "interactive", 0, false, 0},
		// What the official SDKs send on their second retry.
		{"SDK read timeout and retry count", keyDemo, []string{"X-Stainless-Read-Timeout", "600.0", "X-Stainless-Retry-Count", "2"}, "interactive", 0, true, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := st.do(t, "POST", "/v1/chat/completions", tc.key, `{"model":"gpt-4o-mini","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, tc.hdr...)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			evs := st.events(t, resp.Header.Get("X-Sluice-Request-Id"), func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeReserveRequested)) })
			for _, e := range evs {
				if rr := e.ReserveRequested; rr != nil {
					if e.Class != tc.class || rr.Priority != tc.priority || (rr.DeadlineMs > 0) != tc.deadline || rr.ClientRetryCount != tc.retries {
						t.Errorf("class %q priority %d deadline %d retries %d; want %q %d deadline=%v retries %d", e.Class, rr.Priority, rr.DeadlineMs, rr.ClientRetryCount, tc.class, tc.priority, tc.deadline, tc.retries)
					}
				}
			}
		})
	}
}

func TestIdempotencyKeyReplays(t *testing.T) {
	st := simStack(t)
	body := `{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"once"}]}`
	r1, b1 := st.do(t, "POST", "/v1/chat/completions", keyDemo, body, "Idempotency-Key", "idem-1")
	if r1.StatusCode != 200 {
		t.Fatalf("first: %d %s", r1.StatusCode, b1)
	}
	r2, b2 := st.do(t, "POST", "/v1/chat/completions", keyDemo, body, "Idempotency-Key", "idem-1")
	if r2.StatusCode != 200 || string(b1) != string(b2) || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v\n%s\nvs\n%s", r2.StatusCode, r2.Header, b2, b1)
	}
	if r2.Header.Get("X-Sluice-Request-Id") != r1.Header.Get("X-Sluice-Request-Id") {
		t.Errorf("replay carries another request id")
	}
	r3, b3 := st.do(t, "POST", "/v1/chat/completions", keyDemo, strings.Replace(body, "once", "twice", 1), "Idempotency-Key", "idem-1")
	if r3.StatusCode != 409 || decodeError(t, b3, false).Code != "idempotency_key_reused" {
		t.Fatalf("reuse with another body: %d %s", r3.StatusCode, b3)
	}
	// It can never succeed: the SDKs, which retry 409, must not (D5).
	if r3.Header.Get("x-should-retry") != "false" {
		t.Errorf("409 idempotency_key_reused without x-should-retry: false: %v", r3.Header)
	}
	// Another tenant's key space is separate: the same key runs afresh.
	r4, _ := st.do(t, "POST", "/v1/chat/completions", keyBatch, body, "Idempotency-Key", "idem-1")
	if r4.StatusCode != 200 || r4.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("other tenant: %d %v", r4.StatusCode, r4.Header)
	}
}
