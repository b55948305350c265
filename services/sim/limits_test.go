package sim

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// "hi" from role "user": 6 text bytes → ceil(6/4)=2 + 3 (request) + 4 (one
// message) = 9 input tokens.
const hiTokens = 9

func TestRPMEnforcedOverSubMinuteWindows(t *testing.T) {
	type step struct {
		advance time.Duration
		send    int
		wantOK  int
	}
	cases := []struct {
		name   string
		limits Limits
		steps  []step
	}{
		{"minute bucket only: 60 RPM", Limits{RPM: 60},
			[]step{{0, 70, 60}, {time.Second, 3, 1}, {30 * time.Second, 40, 30}}},
		{"600 RPM as a 1s continuous bucket of 10", Limits{RPM: 600, Window: Duration(time.Second), WindowMode: WindowBucket},
			[]step{{0, 15, 10}, {100 * time.Millisecond, 3, 1}, {time.Second, 20, 10}}},
		{"600 RPM as fixed 1s windows of 10", Limits{RPM: 600, Window: Duration(time.Second), WindowMode: WindowFixed},
			[]step{{0, 15, 10}, {500 * time.Millisecond, 5, 0}, {500 * time.Millisecond, 12, 10}}},
		{"burst fails while the minute average is safe: 600 RPM as fixed 10s windows", Limits{RPM: 600, Window: Duration(10 * time.Second), WindowMode: WindowFixed},
			[]step{{0, 150, 100}, {10 * time.Second, 150, 100}}},
		{"30 RPM over 1s: capacity 0.5, one request each 2s", Limits{RPM: 30, Window: Duration(time.Second)},
			[]step{{0, 3, 1}, {time.Second, 2, 0}, {time.Second, 2, 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newSim(t, func(c *Config) { setLimits(c, OpenAI, tc.limits) })
			for i, st := range tc.steps {
				clk.Advance(st.advance)
				ok := 0
				for range st.send {
					rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 0))
					switch statusOf(t, rec) {
					case http.StatusOK:
						ok++
					case http.StatusTooManyRequests:
						if typ := path(t, decode(t, rec), "error", "type"); typ != "requests" {
							t.Fatalf("429 error.type = %v, want requests", typ)
						}
					default:
						t.Fatalf("unexpected status %d", rec.Code)
					}
				}
				if ok != st.wantOK {
					t.Fatalf("step %d: %d admitted, want %d", i, ok, st.wantOK)
				}
			}
			st := s.Stats().Providers[OpenAI]
			if st.RateLimited != st.RateLimitedBy[DimRequests] || st.RateLimited+st.OK != st.Requests {
				t.Fatalf("stats inconsistent: %+v", st)
			}
		})
	}
}

func TestTPM(t *testing.T) {
	t.Run("max_tokens reserved at admission", func(t *testing.T) {
		s, clk := newSim(t, func(c *Config) { setLimits(c, OpenAI, Limits{TPM: 1200}) })
		// 9 input + 391 max_tokens = 400 tokens each.
		for i := range 3 {
			if rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 400-hiTokens)); rec.Code != 200 {
				t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
			}
		}
		rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 400-hiTokens))
		if rec.Code != 429 {
			t.Fatalf("4th: %d", rec.Code)
		}
		body := decode(t, rec)
		if path(t, body, "error", "type") != "tokens" || path(t, body, "error", "code") != "rate_limit_exceeded" ||
			!strings.Contains(path(t, body, "error", "message").(string), "tokens per min (TPM)") {
			t.Fatalf("429 body: %s", rec.Body)
		}
		if got := rec.Header().Get("retry-after"); got != "20" { // 400 tokens at 20 tokens/s
			t.Fatalf("Retry-After = %q, want 20", got)
		}
		clk.Advance(20 * time.Second)
		if rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 400-hiTokens)); rec.Code != 200 {
			t.Fatalf("after refill: %d", rec.Code)
		}
	})
	t.Run("without max_tokens the actual output is charged afterwards (debt)", func(t *testing.T) {
		s, _ := newSim(t, func(c *Config) { setLimits(c, OpenAI, Limits{TPM: 1000}) })
		// Output = 0.5 × DefaultMaxTokens 1024 = 512: 9+512 = 521 per request.
		want := []int{200, 200, 429}
		for i, w := range want {
			rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 0))
			if rec.Code != w {
				t.Fatalf("request %d: %d, want %d", i, rec.Code, w)
			}
		}
		if st := s.Stats().Providers[OpenAI]; st.Tokens.Output != 1024 || st.Tokens.Input != 2*hiTokens || st.RateLimitedBy[DimTokens] != 1 {
			t.Fatalf("stats: %+v", st)
		}
	})
	t.Run("request larger than the minute limit", func(t *testing.T) {
		s, _ := newSim(t, func(c *Config) { setLimits(c, OpenAI, Limits{TPM: 100}) })
		rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 200))
		if rec.Code != 429 || !strings.HasPrefix(path(t, decode(t, rec), "error", "message").(string), "Request too large") {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		if s.Stats().Providers[OpenAI].RateLimitedBy[DimTooLarge] != 1 {
			t.Fatal("not counted as request_too_large")
		}
	})
}

func TestSeparateInputOutputLimits(t *testing.T) {
	long := strings.Repeat("x", 200) // 204 bytes with "user" → 51 + 7 = 58 input tokens
	cases := []struct {
		name    string
		limits  Limits
		refund  bool
		content string
		maxTok  int
		output  string // x-sim-output-tokens
		want    []int
		wantDim string
	}{
		{"ITPM binds", Limits{ITPM: 100, OTPM: 100000}, true, long, 10, "5", []int{200, 429}, DimInputTokens},
		{"OTPM binds on the max_tokens reservation, no refund", Limits{ITPM: 100000, OTPM: 300}, false, "hi", 100, "10", []int{200, 200, 200, 429}, DimOutputTokens},
		{"OTPM refunds unused output (Anthropic)", Limits{ITPM: 100000, OTPM: 300}, true, "hi", 100, "10", []int{200, 200, 200, 200, 200, 200, 200, 200, 200, 200}, ""},
		{"input larger than ITPM is never admitted", Limits{ITPM: 50}, true, long, 10, "5", []int{429}, DimTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSim(t, func(c *Config) {
				p := c.Providers[Anthropic]
				p.Limits, p.RefundUnused = tc.limits, tc.refund
				c.Providers[Anthropic] = p
			})
			for i, w := range tc.want {
				rec := do(t, s, "POST", pAnthropic, anthropicBody("claude-sonnet-4-5", tc.content, tc.maxTok), HeaderOutputTokens, tc.output)
				if rec.Code != w {
					t.Fatalf("request %d: %d, want %d: %s", i, rec.Code, w, rec.Body)
				}
				if w == 429 {
					body := decode(t, rec)
					if path(t, body, "type") != "error" || path(t, body, "error", "type") != "rate_limit_error" {
						t.Fatalf("429 body: %s", rec.Body)
					}
				}
			}
			if tc.wantDim != "" && s.Stats().Providers[Anthropic].RateLimitedBy[tc.wantDim] != 1 {
				t.Fatalf("want one 429 by %s: %+v", tc.wantDim, s.Stats().Providers[Anthropic].RateLimitedBy)
			}
		})
	}
}

func TestAnthropicCacheReadsNotCounted(t *testing.T) {
	// System block: "text"(4) + 800 + "ephemeral"(9) = 813 bytes; message
	// "user"+"hi" = 6. Total ceil(819/4)=205 + 3 + 4 = 212; cached prefix
	// ceil(813/4) = 204; uncached input 8.
	body := map[string]any{
		"model": "claude-sonnet-4-5", "max_tokens": 10,
		"system": []any{map[string]any{"type": "text", "text": strings.Repeat("a", 800),
			"cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": []any{map[string]any{"role": "user", "content": "hi"}},
	}
	for _, countReads := range []bool{false, true} {
		name := "cache reads excluded from ITPM"
		if countReads {
			name = "cache reads counted (other providers)"
		}
		t.Run(name, func(t *testing.T) {
			s, clk := newSim(t, func(c *Config) {
				p := c.Providers[Anthropic]
				p.Limits = Limits{ITPM: 300}
				p.CountCacheReads = countReads
				c.Providers[Anthropic] = p
			})
			rec := do(t, s, "POST", pAnthropic, body)
			if rec.Code != 200 {
				t.Fatalf("first: %d %s", rec.Code, rec.Body)
			}
			u := path(t, decode(t, rec), "usage").(map[string]any)
			if u["cache_creation_input_tokens"] != 204.0 || u["cache_read_input_tokens"] != 0.0 || u["input_tokens"] != 8.0 {
				t.Fatalf("first usage: %v", u)
			}
			if got := rec.Header().Get("anthropic-ratelimit-input-tokens-remaining"); got != "88" {
				t.Fatalf("ITPM remaining after cache write = %s, want 88", got)
			}
			rec = do(t, s, "POST", pAnthropic, body)
			if countReads {
				if rec.Code != 429 {
					t.Fatalf("second with cache reads counted: %d", rec.Code)
				}
				return
			}
			if rec.Code != 200 {
				t.Fatalf("second: %d %s", rec.Code, rec.Body)
			}
			u = path(t, decode(t, rec), "usage").(map[string]any)
			if u["cache_creation_input_tokens"] != 0.0 || u["cache_read_input_tokens"] != 204.0 || u["input_tokens"] != 8.0 {
				t.Fatalf("second usage: %v", u)
			}
			if got := rec.Header().Get("anthropic-ratelimit-input-tokens-remaining"); got != "80" {
				t.Fatalf("ITPM remaining after cache read = %s, want 80", got)
			}
			// The entry expires 5 minutes after its last use.
			clk.Advance(5*time.Minute + time.Second)
			rec = do(t, s, "POST", pAnthropic, body)
			if u := path(t, decode(t, rec), "usage").(map[string]any); u["cache_creation_input_tokens"] != 204.0 {
				t.Fatalf("after TTL: %v", u)
			}
			st := s.Stats().Providers[Anthropic]
			if st.Tokens.CacheRead != 204 || st.Tokens.CacheWrite != 408 || st.Tokens.Input != 3*8+408 {
				t.Fatalf("token stats: %+v", st.Tokens)
			}
		})
	}
}

func TestDailyLimitAndReset(t *testing.T) {
	cases := []struct {
		provider, path string
		body           any
	}{
		{OpenAI, pOpenAI, openAIBody("gpt-4o-mini", "hi", 10)},
		{Azure, pAzure, openAIBody("", "hi", 10)},
		{Anthropic, pAnthropic, anthropicBody("claude-haiku-4-5", "hi", 10)},
		{Gemini, pGemini, geminiBody("hi", 10)},
	}
	for _, tc := range cases {
		t.Run(tc.provider, func(t *testing.T) {
			// t0 is 07:00 UTC; the day resets at 08:00 UTC.
			s, clk := newSim(t, func(c *Config) { setLimits(c, tc.provider, Limits{RPD: 3, DailyReset: "08:00"}) })
			for i := range 3 {
				if rec := do(t, s, "POST", tc.path, tc.body); rec.Code != 200 {
					t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
				}
			}
			rec := do(t, s, "POST", tc.path, tc.body)
			if rec.Code != 429 {
				t.Fatalf("4th: %d", rec.Code)
			}
			if tc.provider == Gemini {
				if rec.Header().Get("retry-after") != "" {
					t.Fatal("Gemini must not send Retry-After")
				}
				d := path(t, decode(t, rec), "error", "details").([]any)
				if got := path(t, d, 0, "violations", 0, "quotaId"); got != "GenerateRequestsPerDayPerProjectPerModel-FreeTier" {
					t.Fatalf("quotaId %v", got)
				}
				if got := path(t, d, 2, "retryDelay"); got != "3600s" {
					t.Fatalf("retryDelay %v", got)
				}
			} else if got := rec.Header().Get("retry-after"); got != "3600" {
				t.Fatalf("Retry-After %q, want 3600", got)
			}
			clk.Advance(time.Hour - time.Second)
			if rec := do(t, s, "POST", tc.path, tc.body); rec.Code != 429 {
				t.Fatalf("07:59:59: %d", rec.Code)
			}
			clk.Advance(time.Second)
			if rec := do(t, s, "POST", tc.path, tc.body); rec.Code != 200 {
				t.Fatalf("08:00: %d %s", rec.Code, rec.Body)
			}
			if n := s.Stats().Providers[tc.provider].RateLimitedBy[DimDaily]; n != 2 {
				t.Fatalf("daily 429s = %d", n)
			}
		})
	}
}

func TestAccelerationLimit(t *testing.T) {
	s, clk := newSim(t, func(c *Config) {
		setLimits(c, OpenAI, Limits{Acceleration: &Acceleration{Window: Duration(10 * time.Second), Factor: 2, Floor: 5}})
	})
	steps := []struct {
		advance      time.Duration
		send, wantOK int
	}{
		{0, 7, 5},                  // floor
		{10 * time.Second, 12, 10}, // may double: 2×5
		{10 * time.Second, 25, 20}, // 2×10
		{30 * time.Second, 8, 5},   // idle windows reset the ramp to the floor
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		ok := 0
		for range st.send {
			rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 10))
			if rec.Code == 200 {
				ok++
			} else if rec.Code != 429 || rec.Header().Get("retry-after") == "" {
				t.Fatalf("step %d: %d retry-after %q", i, rec.Code, rec.Header().Get("retry-after"))
			}
		}
		if ok != st.wantOK {
			t.Fatalf("step %d: %d admitted, want %d", i, ok, st.wantOK)
		}
	}
	if n := s.Stats().Providers[OpenAI].RateLimitedBy[DimAcceleration]; n != 2+2+5+3 {
		t.Fatalf("acceleration 429s = %d", n)
	}
}

func TestStorms(t *testing.T) {
	t.Run("scheduled 429 storm for one provider", func(t *testing.T) {
		s, clk := newSim(t, func(c *Config) {
			c.Storms = []Storm{{Kind: "429", Provider: OpenAI, Start: Duration(10 * time.Second), End: Duration(20 * time.Second), RetryAfter: Duration(3 * time.Second)}}
		})
		if rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 10)); rec.Code != 200 {
			t.Fatalf("before: %d", rec.Code)
		}
		clk.Advance(10 * time.Second)
		rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 10))
		if rec.Code != 429 || rec.Header().Get("retry-after") != "3" || path(t, decode(t, rec), "error", "code") != "rate_limit_exceeded" {
			t.Fatalf("during: %d %v %s", rec.Code, rec.Header(), rec.Body)
		}
		if rec := do(t, s, "POST", pAnthropic, anthropicBody("claude-haiku-4-5", "hi", 10)); rec.Code != 200 {
			t.Fatalf("other provider during storm: %d", rec.Code)
		}
		clk.Advance(10 * time.Second)
		if rec := do(t, s, "POST", pOpenAI, openAIBody("gpt-4o-mini", "hi", 10)); rec.Code != 200 {
			t.Fatalf("after: %d", rec.Code)
		}
		if st := s.Stats().Providers[OpenAI]; st.RateLimitedBy[DimStorm] != 1 || st.OK != 2 {
			t.Fatalf("stats %+v", st)
		}
	})

	cases := []struct {
		provider, path string
		body           any
		status         int
		check          func(t *testing.T, body map[string]any)
	}{
		{OpenAI, pOpenAI, openAIBody("gpt-4o-mini", "hi", 10), 0, func(t *testing.T, b map[string]any) {
			if path(t, b, "error", "type") != "server_error" {
				t.Fatalf("%v", b)
			}
		}},
		{Azure, pAzure, openAIBody("", "hi", 10), 0, func(t *testing.T, b map[string]any) {
			if path(t, b, "error", "code") != "503" {
				t.Fatalf("%v", b)
			}
		}},
		{Anthropic, pAnthropic, anthropicBody("claude-haiku-4-5", "hi", 10), 529, func(t *testing.T, b map[string]any) {
			if path(t, b, "error", "type") != "overloaded_error" {
				t.Fatalf("%v", b)
			}
		}},
		{Gemini, pGemini, geminiBody("hi", 10), 0, func(t *testing.T, b map[string]any) {
			if path(t, b, "error", "status") != "UNAVAILABLE" {
				t.Fatalf("%v", b)
			}
		}},
	}
	for _, tc := range cases {
		t.Run("503 storm toggled at run time/"+tc.provider, func(t *testing.T) {
			s, _ := newSim(t, nil)
			want := tc.status
			if want == 0 {
				want = 503
			}
			start := map[string]any{"kind": "503", "provider": tc.provider, "active": true, "every": 2, "retry_after": "2s"}
			if tc.status != 0 {
				start["status"] = tc.status
			}
			if rec := do(t, s, "POST", "/sim/storm", start); rec.Code != 200 {
				t.Fatalf("storm start: %d %s", rec.Code, rec.Body)
			}
			for i, w := range []int{want, 200, want, 200} {
				rec := do(t, s, "POST", tc.path, tc.body)
				if rec.Code != w {
					t.Fatalf("request %d: %d, want %d", i, rec.Code, w)
				}
				if w != 200 {
					tc.check(t, decode(t, rec))
					if tc.provider != Gemini && rec.Header().Get("retry-after") != "2" {
						t.Fatalf("retry-after %q", rec.Header().Get("retry-after"))
					}
				}
			}
			if rec := do(t, s, "POST", "/sim/storm", map[string]any{"kind": "503", "active": false}); rec.Code != 200 {
				t.Fatalf("storm stop: %d", rec.Code)
			}
			for i := range 3 {
				if rec := do(t, s, "POST", tc.path, tc.body); rec.Code != 200 {
					t.Fatalf("after stop %d: %d", i, rec.Code)
				}
			}
			if st := s.Stats().Providers[tc.provider]; st.Overloaded != 2 || st.OK != 5 {
				t.Fatalf("stats %+v", st)
			}
		})
	}

	t.Run("bad storm request", func(t *testing.T) {
		s, _ := newSim(t, nil)
		if rec := do(t, s, "POST", "/sim/storm", map[string]any{"kind": "500", "active": true}); rec.Code != 400 {
			t.Fatalf("%d", rec.Code)
		}
	})
}

func TestScopesArePerModel(t *testing.T) {
	s, _ := newSim(t, func(c *Config) {
		p := c.Providers[OpenAI]
		p.Limits = Limits{RPM: 1}
		p.ModelLimits = map[string]Limits{"big": {RPM: 2}}
		c.Providers[OpenAI] = p
	})
	want := map[string][]int{"a": {200, 429}, "b": {200, 429}, "big": {200, 200, 429}}
	for _, m := range []string{"a", "b", "big"} {
		for i, w := range want[m] {
			if rec := do(t, s, "POST", pOpenAI, openAIBody(m, "hi", 10)); rec.Code != w {
				t.Fatalf("%s #%d: %d want %d", m, i, rec.Code, w)
			}
		}
	}
}

// TestStormEchoKey: an echo_key storm quotes the presented credential in
// every provider's error message, whichever header carries it.
func TestStormEchoKey(t *testing.T) {
	const key = "PlainKey0123456789abcdefGHIJKLmn"
	cases := []struct {
		provider, path string
		body           any
		kind           string
		hdr            []string
		msg            []any // path to the message
	}{
		{OpenAI, pOpenAI, openAIBody("gpt-4o-mini", "hi", 10), "429", []string{"Authorization", "Bearer " + key}, []any{"error", "message"}},
		{Azure, pAzure, openAIBody("", "hi", 10), "429", []string{"api-key", key}, []any{"error", "message"}},
		{Anthropic, pAnthropic, anthropicBody("claude-haiku-4-5", "hi", 10), "503", []string{"x-api-key", key}, []any{"error", "message"}},
		{Gemini, pGemini, geminiBody("hi", 10), "429", []string{"x-goog-api-key", key}, []any{"error", "message"}},
	}
	for _, tc := range cases {
		s, _ := newSim(t, nil)
		if rec := do(t, s, "POST", "/sim/storm", map[string]any{"kind": tc.kind, "provider": tc.provider, "active": true, "echo_key": true}); rec.Code != 200 {
			t.Fatalf("%s: storm start: %d %s", tc.provider, rec.Code, rec.Body)
		}
		rec := do(t, s, "POST", tc.path, tc.body, tc.hdr...)
		if rec.Code < 400 {
			t.Errorf("%s: status %d", tc.provider, rec.Code)
			continue
		}
		if m, _ := path(t, decode(t, rec), tc.msg...).(string); !strings.Contains(m, key) {
			t.Errorf("%s: message %q does not echo the key", tc.provider, m)
		}
	}
}
