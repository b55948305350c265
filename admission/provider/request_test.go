package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
)

const testKey = "sk-test-SECRET-0123456789abcdef"

// testProviders loads one provider of every kind, all with testKey.
func testProviders(tb testing.TB) *config.Config {
	tb.Helper()
	tb.Setenv("SLUICE_PROVIDER_TEST_KEY", testKey)
	return loadProviders(tb,
		`{name: oa, kind: openai, scope: s, base_url: "https://api.openai.com/v1/", api_key_env: SLUICE_PROVIDER_TEST_KEY}`,
		`{name: cp, kind: openai_compatible, scope: s, base_url: "http://127.0.0.1:8000/v1", api_key_env: SLUICE_PROVIDER_TEST_KEY}`,
		`{name: az, kind: azure, scope: s, base_url: "https://x.openai.azure.com", deployment: "gpt 4o", api_version: "2024-10-21", api_key_env: SLUICE_PROVIDER_TEST_KEY}`,
		`{name: an, kind: anthropic, scope: s, base_url: "https://api.anthropic.com/v1", api_key_env: SLUICE_PROVIDER_TEST_KEY}`,
		`{name: ge, kind: gemini, scope: s, base_url: "https://generativelanguage.googleapis.com/v1beta", api_key_env: SLUICE_PROVIDER_TEST_KEY}`,
		`{name: bad, kind: openai, scope: s, base_url: "http://[::1", api_key_env: SLUICE_PROVIDER_TEST_KEY}`)
}

// loadProviders loads a config of providers (one YAML flow map each, all
// of scope s), a route of model m to the first, one tenant with one key
// and a ledger scope s: what the provider tests need around the
// providers they test.
func loadProviders(tb testing.TB, providers ...string) *config.Config {
	tb.Helper()
	var y strings.Builder
	y.WriteString("providers:\n")
	for _, p := range providers {
		y.WriteString("  - " + p + "\n")
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(providers[0], "{name: "), ",")
	y.WriteString(`routes:
  - {model: m, provider: ` + first + `}
tenants:
  - id: t
    keys:
      - {id: k, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
ledger:
  scopes:
    - {name: s, buckets: [{level: key, id: "*", dimension: requests, capacity: 600}]}
`)
	cfg, err := config.Load(strings.NewReader(y.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// TestNewRequest: every provider kind's URL, credential header, other
// headers (canonical keys, one value each, as Set stores them) and body
// rewrite, per API.
func TestNewRequest(t *testing.T) {
	cfg := testProviders(t)
	chat := `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0.5,"stop":"END"}`
	chatStream := `{"model":"m","stream":true,"stream_options":{"include_obfuscation":false},"messages":[{"role":"user","content":"hi"}]}`
	messages := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	embeddings := `{"model":"m","input":"hi"}`
	responses := `{"model":"m","input":"hi","stream":true}`
	completions := `{"model":"m","prompt":"hi","stream":true}`
	tests := []struct {
		name, provider string
		api            API
		body, upstream string
		beta           string
		url            string
		header         map[string]string // "" = must be absent
		bodyHas        []string
		forced         bool
	}{
		{name: "openai chat, model kept", provider: "oa", api: APIChat, body: chat, upstream: "m",
			url: "https://api.openai.com/v1/chat/completions", header: map[string]string{"Authorization": "Bearer " + testKey, "Accept": ""},
			bodyHas: []string{`"model":"m"`}},
		{name: "openai stream, usage forced, options kept", provider: "oa", api: APIChat, body: chatStream, upstream: "gpt-4o",
			url: "https://api.openai.com/v1/chat/completions", header: map[string]string{"Accept": "text/event-stream"},
			bodyHas: []string{`"model":"gpt-4o"`, `"include_usage":true`, `"include_obfuscation":false`}, forced: true},
		{name: "compatible embeddings", provider: "cp", api: APIEmbeddings, body: embeddings, upstream: "e5",
			url: "http://127.0.0.1:8000/v1/embeddings", header: map[string]string{"Authorization": "Bearer " + testKey}, bodyHas: []string{`"model":"e5"`}},
		{name: "azure chat deployment path", provider: "az", api: APIChat, body: chat, upstream: "m",
			url:    "https://x.openai.azure.com/openai/deployments/gpt%204o/chat/completions?api-version=2024-10-21",
			header: map[string]string{"api-key": testKey, "Authorization": ""}},
		{name: "azure embeddings", provider: "az", api: APIEmbeddings, body: embeddings, upstream: "m",
			url: "https://x.openai.azure.com/openai/deployments/gpt%204o/embeddings?api-version=2024-10-21"},
		{name: "openai responses stream, usage not forced", provider: "oa", api: APIResponses, body: responses, upstream: "o4-mini",
			url: "https://api.openai.com/v1/responses", header: map[string]string{"Accept": "text/event-stream"}, bodyHas: []string{`"model":"o4-mini"`}},
		{name: "openai completions stream, usage forced", provider: "oa", api: APICompletions, body: completions, upstream: "m",
			url: "https://api.openai.com/v1/completions", bodyHas: []string{`"include_usage":true`}, forced: true},
		{name: "azure responses on the v1 surface, deployment as model", provider: "az", api: APIResponses, body: responses, upstream: "m",
			url: "https://x.openai.azure.com/openai/v1/responses", header: map[string]string{"api-key": testKey}, bodyHas: []string{`"model":"gpt 4o"`}},
		{name: "azure completions", provider: "az", api: APICompletions, body: completions, upstream: "m",
			url: "https://x.openai.azure.com/openai/deployments/gpt%204o/completions?api-version=2024-10-21", forced: true},
		{name: "anthropic messages, beta forwarded", provider: "an", api: APIMessages, body: messages, upstream: "claude", beta: "tools-2024",
			url:     "https://api.anthropic.com/v1/messages",
			header:  map[string]string{"x-api-key": testKey, "anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024", "Authorization": ""},
			bodyHas: []string{`"model":"claude"`}},
		{name: "anthropic without beta", provider: "an", api: APIMessages, body: messages, upstream: "m",
			url: "https://api.anthropic.com/v1/messages", header: map[string]string{"anthropic-beta": ""}},
		{name: "anthropic behind chat, translated", provider: "an", api: APIChat, body: chat, upstream: "claude-sonnet-4-5",
			url:     "https://api.anthropic.com/v1/messages",
			header:  map[string]string{"x-api-key": testKey, "anthropic-version": "2023-06-01", "Authorization": "", "Accept": ""},
			bodyHas: []string{`"model":"claude-sonnet-4-5"`, `"system":[{"type":"text","text":"be brief"}]`, `"max_tokens":8`, `"stop_sequences":["END"]`}},
		{name: "anthropic behind a chat stream: no stream_options, default max_tokens", provider: "an", api: APIChat, body: chatStream, upstream: "claude-opus-4-1",
			url: "https://api.anthropic.com/v1/messages", header: map[string]string{"Accept": "text/event-stream"},
			bodyHas: []string{`"stream":true`, `"max_tokens":4096`}},
		{name: "gemini translated", provider: "ge", api: APIChat, body: chat, upstream: "gemini-2.0-flash",
			url:     "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent",
			header:  map[string]string{"x-goog-api-key": testKey, "Authorization": ""},
			bodyHas: []string{`"systemInstruction":{"parts":[{"text":"be brief"}]}`, `"maxOutputTokens":8`, `"stopSequences":["END"]`, `"temperature":0.5`}},
		{name: "gemini stream", provider: "ge", api: APIChat, body: chatStream, upstream: "g",
			url: "https://generativelanguage.googleapis.com/v1beta/models/g:streamGenerateContent?alt=sse"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := parseFor(tc.api, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			up, forced, err := NewRequest(context.Background(), cfg.Provider(tc.provider),
				Attempt{API: tc.api, Request: req, Body: []byte(tc.body), UpstreamModel: tc.upstream, AnthropicBeta: tc.beta})
			if err != nil {
				t.Fatal(err)
			}
			if got := up.URL.String(); got != tc.url {
				t.Errorf("url %s, want %s", got, tc.url)
			}
			if up.Method != "POST" || up.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s with Content-Type %q", up.Method, up.Header.Get("Content-Type"))
			}
			for k, want := range tc.header {
				if got := up.Header.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			for k, v := range up.Header { // stored as Header.Set stores them
				if k != http.CanonicalHeaderKey(k) || len(v) != 1 || cap(v) != 1 {
					t.Errorf("header %q = %q (cap %d): not as Set would store it", k, v, cap(v))
				}
			}
			if forced.ForcedUsage != tc.forced {
				t.Errorf("forcedUsage %v, want %v", forced, tc.forced)
			}
			b, _ := io.ReadAll(up.Body)
			if !json.Valid(b) {
				t.Fatalf("body is not JSON: %s", b)
			}
			for _, s := range tc.bodyHas {
				if !strings.Contains(string(b), s) {
					t.Errorf("body %s lacks %s", b, s)
				}
			}
			if strings.Contains(string(b), testKey) || strings.Contains(up.URL.String(), testKey) {
				t.Errorf("the credential is in the body or URL")
			}
		})
	}
}

// TestNewRequestErrorHoldsNoSecret: a bad base_url is reported by the
// provider's name, never by its URL or credential.
func TestNewRequestErrorHoldsNoSecret(t *testing.T) {
	cfg := testProviders(t)
	req, _ := parseFor(APIChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	_, _, err := NewRequest(context.Background(), cfg.Provider("bad"), Attempt{API: APIChat, Request: req, Body: []byte(`{"model":"m"}`), UpstreamModel: "m"})
	if err == nil || !strings.Contains(err.Error(), "provider bad") || strings.Contains(err.Error(), testKey) || strings.Contains(err.Error(), "::1") {
		t.Fatalf("error %v", err)
	}
}

func TestCanServe(t *testing.T) {
	const text = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	const tools = `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`
	const logprobs = `{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":true}`
	tests := []struct {
		api  API
		kind Kind
		body string
		want bool
	}{
		{APIChat, "openai", text, true},
		{APIChat, "azure", tools, true},
		{APIChat, "anthropic", text, true},
		{APIChat, "anthropic", tools, true},
		{APIChat, "anthropic", logprobs, false},
		{APIChat, "openai", logprobs, true},
		{APIChat, "gemini", text, true},
		{APIChat, "gemini", tools, false},
		{APIEmbeddings, "openai_compatible", text, true},
		{APIEmbeddings, "gemini", text, false},
		{APIMessages, "anthropic", text, true},
		{APIMessages, "openai", text, false},
		{APIResponses, "azure", text, true},
		{APIResponses, "gemini", text, false},
		{APIResponses, "anthropic", text, false}, // a chat body: messages is no Responses field
		{APIResponses, "anthropic", `{"model":"m","input":"hi","max_output_tokens":8}`, true},
		{APIResponses, "anthropic", `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, false},
		{APICompletions, "anthropic", text, false},
		{APICompletions, "openai_compatible", text, true},
	}
	for _, tc := range tests {
		req, _ := estimate.ParseOpenAIChat([]byte(tc.body)) // only Gemini's check reads it
		if got := (&Parsed{API: tc.api, Request: req, Body: []byte(tc.body)}).CanServe(tc.kind); got != tc.want {
			t.Errorf("CanServe(%s, %s, %s) = %v, want %v", tc.api, tc.kind, tc.body, got, tc.want)
		}
	}
}

func parseFor(a API, body string) (estimate.Request, error) {
	switch a {
	case APIEmbeddings:
		return estimate.ParseEmbeddings([]byte(body))
	case APIMessages:
		return estimate.ParseAnthropicMessages([]byte(body))
	case APIResponses:
		return estimate.ParseOpenAIResponses([]byte(body))
	case APICompletions:
		return estimate.ParseOpenAICompletions([]byte(body))
	}
	return estimate.ParseOpenAIChat([]byte(body))
}

// TestUnsupported: the unsupported_api error names exactly what keeps a
// provider from a request.
func TestUnsupported(t *testing.T) {
	text := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	all := `{"model":"m","n":2,"tools":[{"type":"function","function":{"name":"f"}}],"response_format":{"type":"json_object"},
		"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c","content":"1"}]}`
	tests := []struct {
		api  API
		kind Kind
		body string
		want string
	}{
		{APIChat, "gemini", text, ""},
		{APIChat, "gemini", all, "the translation to Gemini generateContent does not support tools (1 given); n > 1 (n = 2); " +
			`response_format of type "json_object"; image content (messages[0].content[1]); tool calls in messages[1]; a tool message (messages[2])`},
		{APIResponses, "gemini", text, "a gemini provider is reached only through POST /v1/chat/completions (translated to generateContent); /v1/responses is not translated"},
		{APIMessages, "openai", text, "a provider of kind openai does not speak /v1/messages"},
		{APICompletions, "openai", text, ""},
		{APIChat, "anthropic", all, "the translation to Anthropic Messages does not support n > 1 (n = 2; Anthropic returns one message); " +
			`response_format "json_object" together with tools (the translation forces a tool to honour response_format)`},
		{APICompletions, "anthropic", text, "an anthropic provider is reached through POST /v1/messages, or POST /v1/chat/completions and POST /v1/responses (translated to Messages); /v1/completions is not translated"},
	}
	for _, tc := range tests {
		req, err := estimate.ParseOpenAIChat([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := (&Parsed{API: tc.api, Request: req, Body: []byte(tc.body)}).Unsupported(tc.kind); got != tc.want {
			t.Errorf("Unsupported(%s, %s) =\n %q\nwant\n %q", tc.api, tc.kind, got, tc.want)
		}
	}
}

// TestPassthroughFromMembers: a passthrough body rebuilt from the
// parser's members (estimate.Request.Members) is byte for byte the body
// rebuilt by decoding it again, for a model rewritten, a stream's usage
// forced on, or both, with repeated, case-folded and null members.
func TestPassthroughFromMembers(t *testing.T) {
	for _, body := range []string{
		`{"model":"alias","messages":[{"role":"user","content":"hi <b>"}]}`,
		`{"model":"alias","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"x":1}}`,
		`{"model":"alias","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"a":1},"STREAM_OPTIONS":{"b": [1, 2]}}`,
		`{"model":"alias","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"a":1},"stream_options":null}`,
		`{"model":"alias","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":null,"Stream_Options":{"c":true}}`,
		`{ "model" : "a", "model":"alias", "messages":[{"role":"user","content":"x"}], "extra": {"k": [ 1 , 2 ]}, "extra":3 }`,
	} {
		req, err := estimate.ParseOpenAIChat([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if req.Members == nil {
			t.Fatalf("%s: the one-scan parser did not take it", body)
		}
		for _, a := range []API{APIChat, APICompletions} {
			for _, model := range []string{req.Model, "gpt-4o-mini-2024-07-18"} {
				at := Attempt{API: a, Request: req, Body: []byte(body)}
				got, err := passthroughBody("u", at, model)
				if err != nil {
					t.Fatalf("%s: %v", body, err)
				}
				at.Request.Members = nil
				want, err := passthroughBody("u", at, model)
				if err != nil {
					t.Fatalf("%s: %v", body, err)
				}
				if !bytes.Equal(got.body, want.body) || got.forcedUsage != want.forcedUsage {
					t.Errorf("%s, model %s:\n from members %s (forced %v)\n decoded      %s (forced %v)", body, model, got.body, got.forcedUsage, want.body, want.forcedUsage)
				}
			}
		}
	}
}
