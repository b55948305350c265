package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// claudeOK answers a Messages request with Anthropic's rate-limit headers
// (a large requests limit, so that the ledger's learned capacity stays
// out of the way), after checking the request is Messages, not chat.
func claudeOK(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var m struct {
		MaxTokens int64            `json:"max_tokens"`
		Messages  []map[string]any `json:"messages"`
	}
	if !strings.HasSuffix(r.URL.Path, "/messages") || json.Unmarshal(b, &m) != nil || m.MaxTokens < 1 || r.Header.Get("anthropic-version") == "" {
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"not a Messages request"}}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("anthropic-ratelimit-requests-limit", "100000")
	w.Header().Set("anthropic-ratelimit-requests-remaining", "99999")
	w.Header().Set("anthropic-ratelimit-requests-reset", "2030-01-01T00:00:00Z")
	_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-ok","content":[{"type":"text","text":"from Claude"}],
		"stop_reason":"end_turn","usage":{"input_tokens":9,"output_tokens":3}}`)
}

func claudeOverloaded(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(529)
	_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}`)
}

// claudeStack is upstreamStack's fake behind an OpenAI and an Anthropic
// provider, each in its own scope, with routes that fall back from one
// kind to the other.
func claudeStack(t *testing.T, f *fakeUpstream) *stack {
	t.Setenv("SLUICE_TEST_UPSTREAM_KEY", upstreamSecret)
	return startStack(t, func(simURL string) string {
		return testYAML(simURL, fmt.Sprintf(`  - {name: fake, kind: openai, scope: sim-openai, base_url: %[1]s/openai/v1, api_key_env: SLUICE_TEST_UPSTREAM_KEY}
  - {name: fake-claude, kind: anthropic, scope: sim-anthropic, base_url: %[1]s/anthropic/v1, api_key_env: SLUICE_TEST_UPSTREAM_KEY}`, f.URL),
			`  - model: gpt-then-claude
    candidates:
      - {provider: fake, upstream_model: fake-always-429, context_tokens: 200000}
      - {provider: fake-claude, upstream_model: claude-ok, context_tokens: 200000}
  - model: claude-then-gpt
    candidates:
      - {provider: fake-claude, upstream_model: claude-overloaded, context_tokens: 200000}
      - {provider: fake, upstream_model: gpt-ok, context_tokens: 200000}
  - {model: claude-overloaded, provider: fake-claude}
  - {model: claude-invalid, provider: fake-claude}`, "")
	})
}

// TestChatFallsBackAcrossKinds: a chat completion whose OpenAI primary
// keeps answering 429 is served by the Anthropic fallback (translated
// both ways), and one whose Anthropic primary is overloaded (529) by the
// OpenAI fallback; each attempt is a reservation in its own provider's
// scope. Without a fallback the 529 is an OpenAI-style 503 the SDKs retry,
// and Anthropic's invalid_request_error the caller's 400 with its message.
func TestChatFallsBackAcrossKinds(t *testing.T) {
	f := newFakeUpstream(t)
	f.script("fake-always-429", rateLimited)
	f.script("claude-ok", claudeOK)
	f.script("claude-overloaded", claudeOverloaded)
	f.script("gpt-ok", okHandler)
	f.script("claude-invalid", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content: text content blocks must be non-empty"}}`)
	})
	st := claudeStack(t, f)
	body := func(model string) string {
		return `{"model":"` + model + `","max_tokens":8,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`
	}
	for _, tc := range []struct {
		model, content, fallbackScope string
	}{
		{"gpt-then-claude", "from Claude", "sim-anthropic"},
		{"claude-then-gpt", "ok", "sim-openai"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, body(tc.model))
			var cc struct {
				Object  string `json:"object"`
				Choices []struct {
					Message struct {
						Content string `json:"content"`
					} `json:"message"`
				} `json:"choices"`
			}
			if resp.StatusCode != 200 || json.Unmarshal(b, &cc) != nil || cc.Object != "chat.completion" || len(cc.Choices) != 1 || cc.Choices[0].Message.Content != tc.content {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			evs := st.events(t, resp.Header.Get("X-Sluice-Request-Id"), func(evs []schemas.Event) bool {
				return has(evs, func(e schemas.Event) bool {
					return e.Dispatched != nil && e.Dispatched.Fallback && e.Scope == tc.fallbackScope
				}) &&
					has(evs, ofType(schemas.TypeReconciled))
			})
			scopes := map[string]bool{}
			for _, e := range evs {
				if e.ReserveRequested != nil {
					scopes[e.Scope] = true
				}
				if rc := e.Reconciled; rc != nil && (e.Scope != tc.fallbackScope || rc.InputTokens == 0) {
					t.Errorf("reconciled %+v in scope %s", rc, e.Scope)
				}
			}
			if !scopes[tc.fallbackScope] {
				t.Errorf("no reservation in the fallback's scope %s: %s", tc.fallbackScope, describe(evs))
			}
		})
	}
	resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, body("claude-overloaded"))
	e := decodeError(t, b, false)
	if resp.StatusCode != 503 || e.Code != "upstream_overloaded" {
		t.Fatalf("529 without a fallback: %d %s", resp.StatusCode, b)
	}
	// Anthropic's invalid_request_error: the caller's 400, in OpenAI's
	// envelope, with Anthropic's message.
	resp, b = st.do(t, "POST", "/v1/chat/completions", keyDemo, body("claude-invalid"))
	e = decodeError(t, b, false)
	if resp.StatusCode != 400 || e.Code != "upstream_request_error" || !strings.Contains(e.Message, "text content blocks must be non-empty") {
		t.Fatalf("anthropic 400: %d %s", resp.StatusCode, b)
	}
}
