package gatewaybench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkHandlerChat is one small non-streaming chat completion through
// the gateway's handler, from the request body to the answer written, with
// the in-process stack of `sluice bench gateway` behind it (kfake, a
// ledger, the simulator over loopback). allocs/op and the profiles
// (-cpuprofile, -memprofile) cover the whole process, so they include the
// ledger, the broker and the simulator; the gateway's part is read from the
// profile (go tool pprof -focus 'services/gateway|admission').
func BenchmarkHandlerChat(b *testing.B) {
	env, err := startBenchEnv(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer env.close()
	benchHandler(b, env, []byte(`{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Say hello to Sluice in five words."}]}`))
}

// BenchmarkHandlerChatBenchPrompt is BenchmarkHandlerChat with the body
// `sluice bench gateway --process` sends (a 200-token message of 875
// bytes, the same on every request), so that what the process bench
// measures per request shows here in allocs/op and ns/op: the body read
// into one buffer of its Content-Length, and the prompt's count taken
// from the tokenizer's text cache from its second sighting on.
func BenchmarkHandlerChatBenchPrompt(b *testing.B) {
	env, err := startBenchEnv(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer env.close()
	benchHandler(b, env, []byte(`{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"`+
		strings.Repeat("Say hello to Sluice in five words. ", 25)+`"}]}`))
}

// BenchmarkHandlerChatTranslated is BenchmarkHandlerChat's chat completion
// with a system prompt, a tool call and its result, to a route whose one
// candidate translates it: Anthropic (Messages) and, without the tool
// turns, which it does not translate, Gemini (generateContent).
func BenchmarkHandlerChatTranslated(b *testing.B) {
	env, err := startBenchEnv(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer env.close()
	b.Run("claude", func(b *testing.B) {
		benchHandler(b, env, []byte(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"system","content":"You are a weather bot. Be brief."},
{"role":"user","content":"What is the weather in Oslo tomorrow?"},
{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
{"role":"tool","tool_call_id":"call_1","content":"{\"high\":4,\"sky\":\"snow\"}"}],
"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}`))
	})
	b.Run("gemini", func(b *testing.B) {
		benchHandler(b, env, []byte(`{"model":"gemini-2.0-flash","max_tokens":16,"temperature":0.5,"messages":[{"role":"system","content":"You are a weather bot. Be brief."},
{"role":"user","content":"What is the weather in Oslo tomorrow?"}]}`))
	})
}

// benchHandler measures body sent to the handler of env, after a warm-up.
func benchHandler(b *testing.B, env *benchEnv, body []byte) {
	one := func() {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+benchKey)
		w := httptest.NewRecorder()
		env.gw.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("HTTP %d: %s", w.Code, w.Body)
		}
	}
	for range 50 { // warm connections, tokenizer, ledger nodes
		one()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		one()
	}
}
