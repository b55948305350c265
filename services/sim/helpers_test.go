package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 7, 0, 0, 0, time.UTC)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// bare returns a config with no limits on any provider, a fixed clock at t0
// and no latency.
func bare(clk *fakeClock) Config {
	return Config{
		Providers: map[string]ProviderConfig{
			OpenAI:    {DefaultMaxTokens: 1024, ReserveMaxTokens: true, Models: []string{"gpt-4o-mini"}},
			Azure:     {DefaultMaxTokens: 1024, ReserveMaxTokens: true},
			Anthropic: {DefaultMaxTokens: 1024, ReserveMaxTokens: true, RefundUnused: true},
			Gemini:    {DefaultMaxTokens: 1024, GeminiTier: "FreeTier"},
		},
		Output:                   OutputSpread{Min: 0.5, Max: 0.5},
		Seed:                     7,
		StreamChunkTokens:        4,
		PromptOverheadTokens:     3,
		PerMessageOverheadTokens: 4,
		Now:                      clk.Now,
		Sleep:                    func(ctx context.Context, d time.Duration) error { return ctx.Err() },
	}
}

func newSim(t *testing.T, mutate func(*Config)) (*Server, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: t0}
	cfg := bare(clk)
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, clk
}

func setLimits(cfg *Config, provider string, l Limits) {
	p := cfg.Providers[provider]
	p.Limits = l
	cfg.Providers[provider] = p
}

func do(t *testing.T, s *Server, method, path string, body any, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(method, path, rd)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

func decode(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, rec.Body.String())
	}
	return m
}

// path walks a decoded JSON value: keys for objects, ints for arrays.
func path(t *testing.T, v any, keys ...any) any {
	t.Helper()
	for _, k := range keys {
		switch kk := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %q: not an object: %v", kk, v)
			}
			v = m[kk]
		case int:
			a, ok := v.([]any)
			if !ok || kk >= len(a) {
				t.Fatalf("at [%d]: not an array of enough length: %v", kk, v)
			}
			v = a[kk]
		}
	}
	return v
}

// Request builders. Each chat body's input estimate is stated where tests
// depend on it.

func openAIBody(model, content string, maxTokens int) map[string]any {
	b := map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": content}}}
	if maxTokens > 0 {
		b["max_tokens"] = maxTokens
	}
	return b
}

func anthropicBody(model, content string, maxTokens int) map[string]any {
	return map[string]any{"model": model, "max_tokens": maxTokens,
		"messages": []any{map[string]any{"role": "user", "content": content}}}
}

func geminiBody(content string, maxTokens int) map[string]any {
	b := map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": content}}}}}
	if maxTokens > 0 {
		b["generationConfig"] = map[string]any{"maxOutputTokens": maxTokens}
	}
	return b
}

const (
	pOpenAI    = "/openai/v1/chat/completions"
	pAzure     = "/azure/openai/deployments/dep1/chat/completions?api-version=2024-10-21"
	pAnthropic = "/anthropic/v1/messages"
	pGemini    = "/gemini/v1beta/models/gemini-2.0-flash:generateContent"
)

// sseEvents splits an SSE body into (event, data) pairs.
func sseEvents(t *testing.T, body string) [][2]string {
	t.Helper()
	var out [][2]string
	for _, block := range strings.Split(body, "\n\n") {
		if strings.TrimSpace(block) == "" {
			continue
		}
		var ev, data string
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("unexpected SSE line %q", line)
			}
		}
		out = append(out, [2]string{ev, data})
	}
	return out
}

func statusOf(t *testing.T, rec *httptest.ResponseRecorder) int {
	t.Helper()
	if rec.Code != http.StatusOK && rec.Code != http.StatusTooManyRequests && rec.Code != http.StatusServiceUnavailable {
		t.Logf("status %d body %s", rec.Code, rec.Body.String())
	}
	return rec.Code
}
