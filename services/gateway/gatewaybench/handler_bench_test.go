package gatewaybench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	body := []byte(`{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Say hello to Sluice in five words."}]}`)
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
