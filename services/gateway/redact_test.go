package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// plainSecret is a provider key of no shape provider.ScrubMessage knows
// (32 letters and digits, no sk- prefix, not hex): only the literal
// redaction of the keys the gateway holds catches it.
const plainSecret = "Q7wErTy2UiOp9AsDfGh3JkLzXcVbNm4q"

// TestProviderEchoOfAPlainKey: a provider that echoes the gateway's key
// in a refusal (its message and its request id), a 429 or an error event
// inside a 200 stream reaches neither the client, nor an event, nor a log
// with it (issue 19, D4).
func TestProviderEchoOfAPlainKey(t *testing.T) {
	f := newFakeUpstream(t)
	echo := "Incorrect API key provided: " + plainSecret + "."
	f.script("plain-400", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("x-request-id", "req-"+plainSecret)
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"error":{"message":"`+echo+`","type":"invalid_request_error","code":null}}`)
	})
	f.script("plain-429", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("retry-after-ms", "5")
		w.WriteHeader(429)
		_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached for key `+plainSecret+`.","type":"requests","code":"rate_limit_exceeded"}}`)
	})
	f.script("plain-stream", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`+"\n\n")
		_, _ = io.WriteString(w, `data: {"error":{"message":"`+echo+`","type":"server_error"}}`+"\n\n")
	})
	t.Setenv("SLUICE_TEST_PLAIN_KEY", plainSecret)
	st := startStack(t, func(simURL string) string {
		return testYAML(simURL, fmt.Sprintf(`  - {name: plain, kind: openai, scope: sim-openai, base_url: %s/openai/v1, api_key_env: SLUICE_TEST_PLAIN_KEY}`, f.URL),
			`  - {model: plain-400, provider: plain}
  - {model: plain-429, provider: plain}
  - {model: plain-stream, provider: plain}`, "")
	})
	tests := []struct {
		model  string
		stream bool
		status int
	}{
		{"plain-400", false, 400},
		{"plain-429", false, 429},
		{"plain-stream", true, 200},
	}
	for _, tc := range tests {
		body := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, tc.model, tc.stream)
		resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, body, "X-Sluice-Deadline-Ms", "2000")
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.model, resp.StatusCode, tc.status, b)
		}
		if strings.Contains(string(b), plainSecret) {
			t.Errorf("%s: the answer holds the provider key: %s", tc.model, b)
		}
		if !strings.Contains(string(b), "[REDACTED]") {
			t.Errorf("%s: nothing redacted, so the echo never reached the client: %s", tc.model, b)
		}
		// Every event of the request is on the bus once its Outcome is.
		st.events(t, resp.Header.Get("X-Sluice-Request-Id"), func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeOutcome)) })
	}
	if strings.Contains(st.allRaw(t), plainSecret) {
		t.Errorf("an event holds the provider key")
	}
	if strings.Contains(st.logs.String(), plainSecret) {
		t.Errorf("a log line holds the provider key:\n%s", st.logs.String())
	}
}
