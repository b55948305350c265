package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestStatsMetricsAndReset(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { setLimits(c, OpenAI, Limits{RPM: 2}) })
	for range 3 {
		do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hello world!", 100), HeaderOutputTokens, "10")
	}
	do(t, s, "POST", pAnthropic, anthropicBody("claude-haiku-4-5", "hello world!", 100), HeaderOutputTokens, "7")
	do(t, s, "POST", "/openai/v1/embeddings", map[string]any{"model": "text-embedding-3-small", "input": []any{"abcdefgh", "abc"}})

	rec := do(t, s, "GET", "/sim/stats", nil)
	var st Stats
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	o := st.Providers[OpenAI]
	if o.Requests != 4 || o.OK != 3 || o.RateLimited != 1 || o.RateLimitedBy[DimRequests] != 1 {
		t.Fatalf("openai stats %+v", o)
	}
	// 2 chats × 11 input + embeddings 2 + 1 tokens.
	if o.Tokens.Input != 2*helloTokens+3 || o.Tokens.Output != 20 || o.Tokens.Total != 2*helloTokens+3+20 {
		t.Fatalf("openai tokens %+v", o.Tokens)
	}
	if st.Totals.Requests != 5 || st.Totals.Tokens.Output != 27 || st.Totals.RateLimited != 1 {
		t.Fatalf("totals %+v", st.Totals)
	}

	rec = do(t, s, "GET", "/metrics", nil)
	m := rec.Body.String()
	for _, want := range []string{
		`sluice_sim_requests_total{code="200",provider="openai"} 3`,
		`sluice_sim_requests_total{code="429",provider="openai"} 1`,
		`sluice_sim_rate_limited_total{limit="requests",provider="openai"} 1`,
		`sluice_sim_tokens_total{dimension="output",provider="anthropic"} 7`,
		`sluice_sim_storms_active 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	if rec := do(t, s, "POST", "/sim/reset", nil); rec.Code != 200 {
		t.Fatal(rec.Code)
	}
	if st := s.Stats(); st.Totals.Requests != 0 {
		t.Fatalf("after reset %+v", st.Totals)
	}
	if rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 10)); rec.Code != 200 {
		t.Fatalf("limits not reset: %d", rec.Code)
	}
}

func TestOutputSpread(t *testing.T) {
	draw := func() []float64 {
		s, _ := newSim(t, func(c *Config) { c.Output = OutputSpread{Min: 0.2, Max: 0.8}; c.Seed = 42 })
		var out []float64
		for range 40 {
			b := decode(t, do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 100)))
			out = append(out, path(t, b, "usage", "completion_tokens").(float64))
		}
		return out
	}
	a, b := draw(), draw()
	distinct := map[float64]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs between runs with the same seed: %v vs %v", i, a[i], b[i])
		}
		if a[i] < 20 || a[i] > 80 {
			t.Fatalf("draw %v outside [20, 80]", a[i])
		}
		distinct[a[i]] = true
	}
	if len(distinct) < 10 {
		t.Fatalf("spread too narrow: %v", a)
	}
}

func TestEmbeddingsAndModels(t *testing.T) {
	s, _ := newSim(t, nil)
	for _, p := range []string{"/openai/v1/embeddings", "/v1/embeddings", "/azure/openai/deployments/emb/embeddings?api-version=2024-10-21"} {
		rec := do(t, s, "POST", p, map[string]any{"model": "text-embedding-3-small", "input": "hello world!", "dimensions": 8})
		b := decode(t, rec)
		if rec.Code != 200 || b["object"] != "list" || len(path(t, b, "data", 0, "embedding").([]any)) != 8 ||
			path(t, b, "usage", "prompt_tokens") != 3.0 || path(t, b, "usage", "total_tokens") != 3.0 {
			t.Fatalf("%s: %d %v", p, rec.Code, b)
		}
	}
	rec := do(t, s, "POST", "/openai/v1/embeddings", map[string]any{"model": "e", "input": []any{1, 2, 3, 4, 5}, "encoding_format": "base64"})
	b := decode(t, rec)
	if _, ok := path(t, b, "data", 0, "embedding").(string); !ok || path(t, b, "usage", "prompt_tokens") != 5.0 {
		t.Fatalf("%v", b)
	}
	for _, p := range []string{"/openai/v1/models", "/v1/models"} {
		b := decode(t, do(t, s, "GET", p, nil))
		if b["object"] != "list" || path(t, b, "data", 0, "id") != "gpt-4o-mini" || path(t, b, "data", 0, "object") != "model" {
			t.Fatalf("%s: %v", p, b)
		}
	}
}

func TestParseConfig(t *testing.T) {
	cases := []struct {
		name, text string
		wantErr    string
		check      func(t *testing.T, c Config)
	}{
		{"empty file keeps defaults", "", "", func(t *testing.T, c Config) {
			if c.Providers[Anthropic].OTPM != DefaultConfig().Providers[Anthropic].OTPM {
				t.Fatal("defaults lost")
			}
		}},
		{"provider fields merge over defaults", `
providers:
  openai:
    rpm: 5
    window: 500ms
    window_mode: fixed
    acceleration: {window: 10s, factor: 2, floor: 3}
storms:
  - {kind: "503", start: 1m, end: 2m, every: 3}
latency: {ttft: 0s, per_output_token: 0s}
output: {min: 0.1, max: 0.9}
`, "", func(t *testing.T, c Config) {
			o := c.Providers[OpenAI]
			if o.RPM != 5 || o.TPM != 150000 || !o.ReserveMaxTokens || o.Window.D() != 500*time.Millisecond || o.WindowMode != WindowFixed || o.Acceleration.Floor != 3 {
				t.Fatalf("%+v", o)
			}
			if len(c.Storms) != 1 || c.Storms[0].End.D() != 2*time.Minute || c.Output.Min != 0.1 {
				t.Fatalf("%+v", c)
			}
			if c.Providers[Gemini].RPD != 10000 {
				t.Fatal("gemini defaults lost")
			}
		}},
		{"json works too", `{"providers":{"anthropic":{"itpm":10,"model_limits":{"claude-opus-4":{"rpm":1}}}},"seed":3}`, "", func(t *testing.T, c Config) {
			a := c.Providers[Anthropic]
			if a.ITPM != 10 || !a.RefundUnused || a.ModelLimits["claude-opus-4"].RPM != 1 || c.Seed != 3 {
				t.Fatalf("%+v", a)
			}
		}},
		{"unknown field", "providers:\n  openai:\n    rmp: 5\n", "rmp", nil},
		{"unknown provider", "providers:\n  mistral:\n    rpm: 5\n", "unknown provider", nil},
		{"bad window mode", "providers:\n  openai:\n    window_mode: sliding\n", "window_mode", nil},
		{"bad duration", "latency:\n  ttft: soon\n", "invalid duration", nil},
		{"bad daily reset", "providers:\n  gemini:\n    daily_reset: \"25:00\"\n", "daily_reset", nil},
		{"bad storm", "storms:\n  - kind: \"500\"\n", "storms[0]", nil},
		{"bad spread", "output: {min: 0.9, max: 0.1}\n", "output spread", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.text))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(bad, []byte("providers:\n  openai:\n    rpm: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte("providers:\n  openai:\n    rpm: 1\nlatency: {ttft: 0s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "flag provided but not defined"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{[]string{"--config", bad}, "limits must be >= 0"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--addr", "256.0.0.1:0"}, "listen"},
	} {
		err := Run(context.Background(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("Run(%v) = %v, want one-line error mentioning %q", tc.args, err, tc.want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, []string{"--addr", "127.0.0.1:0", "--config", good}, pw, io.Discard) }()
	url, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	url = strings.TrimSpace(url)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("printed %q", url)
	}
	body := `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5}`
	codes := []int{}
	for range 2 {
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Fatalf("codes %v (config not applied?)", codes)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	pw.Close()

	var help syncBuf
	if err := Run(context.Background(), []string{"-h"}, &help, io.Discard); err != nil || !strings.Contains(help.String(), "usage: sluice sim") {
		t.Fatalf("-h: %v %q", err, help.String())
	}
}

func TestDefaultConfigServesEveryProvider(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		body any
	}{
		{pOpenAI, openAIBody("gpt-4o-mini", "hello", 100)},
		{pAzure, openAIBody("", "hello", 100)},
		{pAnthropic, anthropicBody("claude-sonnet-4-5", "hello", 100)},
		{pGemini, geminiBody("hello", 100)},
	} {
		if rec := do(t, s, "POST", tc.path, tc.body); rec.Code != 200 {
			t.Fatalf("%s: %d %s", tc.path, rec.Code, rec.Body)
		}
	}
}

// TestConcurrentAdmissionIsAtomic: with the clock frozen, exactly RPM
// requests are admitted however many arrive at once.
func TestConcurrentAdmissionIsAtomic(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { setLimits(c, Anthropic, Limits{RPM: 50, OTPM: 100000}) })
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := anthropicBody("claude-haiku-4-5", "hi", 10)
			body["stream"] = true
			if do(t, s, "POST", pAnthropic, body).Code == 200 {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != 50 {
		t.Fatalf("%d admitted, want 50", ok)
	}
	if st := s.Stats().Providers[Anthropic]; st.Requests != 200 || st.RateLimited != 150 || st.OK != 50 {
		t.Fatalf("%+v", st)
	}
}

func TestExampleConfigParses(t *testing.T) {
	c, err := LoadConfig("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Providers[OpenAI].ModelLimits["gpt-4o"].RPM != 100 || len(c.Storms) != 2 {
		t.Fatalf("%+v", c)
	}
	if _, err := New(c); err != nil {
		t.Fatal(err)
	}
}
