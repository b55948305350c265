package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestWrongMethod: every routed path answers a method it does not serve
// with 405 method_not_allowed and an Allow header naming the methods it
// does (read from the route table), in the Anthropic shape under
// /v1/messages; an unrouted path stays 404.
func TestWrongMethod(t *testing.T) {
	st := simStack(t)
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/v1/chat/completions", 405, "POST"},
		{"GET", "/v1/embeddings", 405, "POST"},
		{"GET", "/v1/messages", 405, "POST"},
		{"GET", "/v1/messages/count_tokens", 405, "POST"},
		{"PUT", "/v1/responses", 405, "POST"},
		{"GET", "/v1/responses/input_tokens", 405, "POST"},
		{"GET", "/v1/completions", 405, "POST"},
		{"POST", "/v1/models", 405, "GET, HEAD"},
		{"DELETE", "/v1/models/gpt-4o-mini", 405, "GET, HEAD"},
		{"POST", "/v1/sluice/usage", 405, "GET, HEAD"},
		{"POST", "/v1/sluice/requests/req-1", 405, "GET, HEAD"},
		{"POST", "/healthz", 405, "GET, HEAD"},
		{"POST", "/metrics", 405, "GET, HEAD"},
		{"GET", "/v1/nothing", 404, ""},
		{"GET", "/v1/messages/nothing", 404, ""},
	} {
		req, _ := http.NewRequest(c.method, st.GatewayURL+c.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Type  string `json:"type"`
			Error struct {
				Type string `json:"type"`
				Code string `json:"code"`
			} `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q, want %d Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.status, c.allow)
		}
		if resp.Header.Get("Retry-After") != "" {
			t.Errorf("%s %s: Retry-After on an error that never succeeds", c.method, c.path)
		}
		anth := strings.HasPrefix(c.path, "/v1/messages")
		if got := body.Type == "error"; got != anth {
			t.Errorf("%s %s: Anthropic envelope %v, want %v (%+v)", c.method, c.path, got, anth, body)
		}
		if c.status == 405 && !anth && body.Error.Code != "method_not_allowed" {
			t.Errorf("%s %s: code %q", c.method, c.path, body.Error.Code)
		}
	}
}
