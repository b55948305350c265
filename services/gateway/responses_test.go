package gateway_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestResponsesAndCompletions: the Responses API and legacy completions
// are estimated, reserved and reconciled like chat — plain and streamed,
// on OpenAI and Azure — and the client gets the provider's answer as it
// came (no forced usage chunk it did not ask for).
func TestResponsesAndCompletions(t *testing.T) {
	st := simStack(t)
	tests := []struct {
		name, path, body string
		stream           bool
		reserveOut       int64    // the reservation's output tokens
		want             []string // patterns in the client's answer
		absent           []string // not in it
	}{
		{name: "responses", path: "/v1/responses", body: `{"model":"gpt-4o-mini","instructions":"be brief","input":"hi","max_output_tokens":40,"reasoning":{"effort":"low"}}`,
			reserveOut: 40, want: []string{`"object":"response"`, `"reasoning_tokens":[1-9]`, `"output_tokens":[1-9]`}},
		{name: "responses items stream", path: "/v1/responses", stream: true,
			body:       `{"model":"gpt-4o-mini","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":24,"stream":true}`,
			reserveOut: 24, want: []string{"event: response.created", "event: response.output_text.delta", "event: response.(completed|incomplete)", `"output_tokens":[1-9]`}},
		{name: "responses on azure's v1 surface", path: "/v1/responses", body: `{"model":"azure-gpt-4o-mini","input":"hi","max_output_tokens":8}`,
			reserveOut: 8, want: []string{`"object":"response"`, `"model":"gpt-4o-mini"`}},
		{name: "completions n=2", path: "/v1/completions", body: `{"model":"gpt-4o-mini","prompt":"Say this is a test","max_tokens":10,"n":2}`,
			reserveOut: 20, want: []string{`"object":"text_completion"`, `"index":1`}},
		{name: "completions stream, usage withheld", path: "/v1/completions", stream: true, body: `{"model":"gpt-4o-mini","prompt":["a","b"],"stream":true}`,
			reserveOut: 32, want: []string{`"text_completion"`, `data: \[DONE\]`}, absent: []string{`"choices":[]`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := st.do(t, "POST", tc.path, keyDemo, tc.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			for _, w := range tc.want {
				if !regexp.MustCompile(w).Match(b) {
					t.Errorf("answer lacks %s:\n%s", w, b)
				}
			}
			for _, w := range tc.absent {
				if strings.Contains(string(b), w) {
					t.Errorf("answer has %s:\n%s", w, b)
				}
			}
			evs := st.events(t, resp.Header.Get("X-Sluice-Request-Id"), func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeReconciled)) })
			for _, e := range evs {
				if rr := e.ReserveRequested; rr != nil && (rr.OutputTokens != tc.reserveOut || rr.InputTokens == 0) {
					t.Errorf("reserve %+v, want %d output tokens", rr, tc.reserveOut)
				}
				if rc := e.Reconciled; rc != nil && (rc.Partial || rc.Streaming != tc.stream || rc.InputTokens == 0 || rc.OutputTokens == 0) {
					t.Errorf("reconcile %+v: want the provider's complete usage", rc)
				}
			}
		})
	}
}

// TestResponsesInputTokens: the estimator's input count, no upstream call;
// more input counts more.
func TestResponsesInputTokens(t *testing.T) {
	st := simStack(t)
	count := func(body string) int64 {
		resp, b := st.do(t, "POST", "/v1/responses/input_tokens", keyDemo, body)
		var out struct {
			Object      string `json:"object"`
			InputTokens int64  `json:"input_tokens"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil || out.Object != "response.input_tokens" || out.InputTokens <= 0 {
			t.Fatalf("input_tokens: %d %s", resp.StatusCode, b)
		}
		return out.InputTokens
	}
	if short, long := count(`{"model":"gpt-4o-mini","input":"hi"}`), count(`{"model":"gpt-4o-mini","instructions":"be brief","input":"hi there, how are you?"}`); long <= short {
		t.Errorf("input_tokens %d for more input than %d", long, short)
	}
	if resp, b := st.do(t, "POST", "/v1/responses/input_tokens", keyDemo, `{"model":"gpt-9","input":"hi"}`); resp.StatusCode != 404 {
		t.Errorf("unknown model: %d %s", resp.StatusCode, b)
	}
	if resp, _ := st.do(t, "POST", "/v1/responses/input_tokens", "", `{"model":"gpt-4o-mini","input":"hi"}`); resp.StatusCode != 401 {
		t.Errorf("no key: %d", resp.StatusCode)
	}
}

// TestGeminiSaysWhatItCannotTranslate: a Gemini route refuses what its
// translation does not carry with a message naming each field, and keeps
// serving plain text.
func TestGeminiSaysWhatItCannotTranslate(t *testing.T) {
	st := simStack(t)
	resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, `{"model":"gemini-2.0-flash","n":2,"max_tokens":5,
		"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"hi"}]}`)
	e := decodeError(t, b, false)
	if resp.StatusCode != 400 || e.Code != "unsupported_api" ||
		!strings.Contains(e.Message, "tools (1 given)") || !strings.Contains(e.Message, "n > 1 (n = 2)") || !strings.Contains(e.Message, "provider sim-gemini") {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	resp, b = st.do(t, "POST", "/v1/responses", keyDemo, `{"model":"gemini-2.0-flash","input":"hi"}`)
	if e := decodeError(t, b, false); resp.StatusCode != 400 || !strings.Contains(e.Message, "/v1/responses is not translated") {
		t.Fatalf("responses on gemini: %d %s", resp.StatusCode, b)
	}
	resp, b = st.do(t, "POST", "/v1/chat/completions", keyDemo, `{"model":"gemini-2.0-flash","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	var ok struct {
		Object string `json:"object"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &ok) != nil || ok.Object != "chat.completion" {
		t.Fatalf("plain text on gemini: %d %s", resp.StatusCode, b)
	}
}
