package sim

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// "hello world!" from role "user": 16 bytes → 4 + 3 + 4 = 11 input tokens.
const helloTokens = 11

func TestOpenAIDurationFormat(t *testing.T) {
	cases := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"}, {12 * time.Millisecond, "12ms"}, {time.Second, "1s"}, {6 * time.Minute, "6m0s"},
		{1500 * time.Microsecond, "2ms"}, {1110 * time.Millisecond, "1.11s"}, {90 * time.Second, "1m30s"},
	}
	for _, tc := range cases {
		got := openAIDuration(tc.in)
		if got != tc.want {
			t.Errorf("openAIDuration(%v) = %q, want %q", tc.in, got, tc.want)
		}
		if d, err := time.ParseDuration(got); err != nil || d < tc.in {
			t.Errorf("%q does not parse back to >= %v: %v %v", got, tc.in, d, err)
		}
	}
}

func mustInt(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	v := h.Get(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q is not an integer", name, v)
	}
	return n
}

func mustDur(t *testing.T, h http.Header, name string) time.Duration {
	t.Helper()
	v := h.Get(name)
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("header %s = %q is not a Go duration: %v", name, v, err)
	}
	return d
}

func mustRFC3339(t *testing.T, h http.Header, name string) time.Time {
	t.Helper()
	v := h.Get(name)
	ts, err := time.Parse(time.RFC3339, v)
	if err != nil {
		t.Fatalf("header %s = %q is not RFC 3339: %v", name, v, err)
	}
	return ts
}

func hasPrefixHeader(h http.Header, prefixes ...string) string {
	for k := range h {
		lk := strings.ToLower(k)
		for _, p := range prefixes {
			if strings.HasPrefix(lk, p) {
				return k
			}
		}
	}
	return ""
}

func TestProviderHeaderFormats(t *testing.T) {
	type check func(t *testing.T, first, second, limited http.Header, limitedBody map[string]any)
	cases := []struct {
		provider, path string
		body           any
		limits         Limits
		check          check
	}{
		{OpenAI, pOpenAI, openAIBody("gpt-4o-mini", "hello world!", 100), Limits{RPM: 60, TPM: 6000},
			func(t *testing.T, h1, h2, hl http.Header, _ map[string]any) {
				want := map[string]int64{"x-ratelimit-limit-requests": 60, "x-ratelimit-remaining-requests": 59,
					"x-ratelimit-limit-tokens": 6000, "x-ratelimit-remaining-tokens": 6000 - helloTokens - 100}
				for k, v := range want {
					if got := mustInt(t, h1, k); got != v {
						t.Errorf("%s = %d, want %d", k, got, v)
					}
				}
				if got := h1.Get("x-ratelimit-reset-requests"); got != "1s" {
					t.Errorf("reset-requests %q, want 1s", got)
				}
				// 111 tokens at 100 tokens/s.
				if got := mustDur(t, h1, "x-ratelimit-reset-tokens"); got != 1110*time.Millisecond {
					t.Errorf("reset-tokens %v", got)
				}
				// OpenAI keeps the max_tokens charge (no refund).
				if got := mustInt(t, h2, "x-ratelimit-remaining-tokens"); got != 6000-2*(helloTokens+100) {
					t.Errorf("second remaining-tokens %d", got)
				}
				if h1.Get("retry-after") != "" {
					t.Error("200 carries retry-after")
				}
				if got := mustInt(t, hl, "retry-after"); got != 60 {
					t.Errorf("retry-after %d", got)
				}
				if got := mustInt(t, hl, "x-ratelimit-remaining-requests"); got != 0 {
					t.Errorf("429 remaining %d", got)
				}
				if got := mustDur(t, hl, "x-ratelimit-reset-requests"); got != time.Minute {
					t.Errorf("429 reset %v", got)
				}
			}},
		{Azure, pAzure, openAIBody("", "hello world!", 100), Limits{RPM: 60, TPM: 6000},
			func(t *testing.T, h1, h2, hl http.Header, b map[string]any) {
				if got := mustInt(t, h1, "x-ratelimit-remaining-requests"); got != 59 {
					t.Errorf("remaining-requests %d", got)
				}
				if got := mustInt(t, h1, "x-ratelimit-remaining-tokens"); got != 6000-helloTokens-100 {
					t.Errorf("remaining-tokens %d", got)
				}
				if k := hasPrefixHeader(h1, "x-ratelimit-reset", "x-ratelimit-limit", "anthropic-"); k != "" {
					t.Errorf("unexpected header %s", k)
				}
				if got := mustInt(t, hl, "retry-after"); got != 60 {
					t.Errorf("retry-after %d", got)
				}
				if got := mustInt(t, hl, "retry-after-ms"); got != 60000 {
					t.Errorf("retry-after-ms %d", got)
				}
				if path(t, b, "error", "code") != "429" || !strings.Contains(path(t, b, "error", "message").(string), "Please retry after 60 seconds") {
					t.Errorf("body %v", b)
				}
			}},
		{Anthropic, pAnthropic, anthropicBody("claude-sonnet-4-5", "hello world!", 100), Limits{RPM: 60, ITPM: 1200, OTPM: 600},
			func(t *testing.T, h1, h2, hl http.Header, b map[string]any) {
				want := map[string]int64{
					"anthropic-ratelimit-requests-limit": 60, "anthropic-ratelimit-requests-remaining": 59,
					"anthropic-ratelimit-input-tokens-limit": 1200, "anthropic-ratelimit-input-tokens-remaining": 1200 - helloTokens,
					"anthropic-ratelimit-output-tokens-limit": 600, "anthropic-ratelimit-output-tokens-remaining": 500,
					// tokens-* = the most restrictive token limit (output here).
					"anthropic-ratelimit-tokens-limit": 600, "anthropic-ratelimit-tokens-remaining": 500,
				}
				for k, v := range want {
					if got := mustInt(t, h1, k); got != v {
						t.Errorf("%s = %d, want %d", k, got, v)
					}
				}
				resets := map[string]time.Duration{
					"anthropic-ratelimit-requests-reset":      time.Second,
					"anthropic-ratelimit-input-tokens-reset":  time.Second, // 0.55s rounded up
					"anthropic-ratelimit-output-tokens-reset": 10 * time.Second,
					"anthropic-ratelimit-tokens-reset":        10 * time.Second,
				}
				for k, d := range resets {
					if got := mustRFC3339(t, h1, k); !got.Equal(t0.Add(d)) {
						t.Errorf("%s = %v, want %v", k, got, t0.Add(d))
					}
				}
				if got := h1.Get("anthropic-ratelimit-requests-reset"); got != "2026-01-02T07:00:01Z" {
					t.Errorf("reset literal %q", got)
				}
				// Anthropic refunds unused output: 600-100 (first) +90 refund -100 (second).
				if got := mustInt(t, h2, "anthropic-ratelimit-output-tokens-remaining"); got != 490 {
					t.Errorf("second output remaining %d", got)
				}
				if got := mustInt(t, hl, "retry-after"); got != 60 {
					t.Errorf("retry-after %d", got)
				}
				if got := mustRFC3339(t, hl, "anthropic-ratelimit-requests-reset"); !got.Equal(t0.Add(time.Minute)) {
					t.Errorf("429 reset %v", got)
				}
				if path(t, b, "type") != "error" || path(t, b, "error", "type") != "rate_limit_error" {
					t.Errorf("body %v", b)
				}
			}},
		{Gemini, pGemini, geminiBody("hello world!", 100), Limits{RPM: 60, ITPM: 6000},
			func(t *testing.T, h1, h2, hl http.Header, b map[string]any) {
				for _, h := range []http.Header{h1, hl} {
					if k := hasPrefixHeader(h, "x-ratelimit", "anthropic-", "retry-after"); k != "" {
						t.Errorf("Gemini sent %s", k)
					}
				}
				if path(t, b, "error", "code") != 429.0 || path(t, b, "error", "status") != "RESOURCE_EXHAUSTED" {
					t.Errorf("body %v", b)
				}
				d := path(t, b, "error", "details").([]any)
				if path(t, d, 0, "@type") != "type.googleapis.com/google.rpc.QuotaFailure" ||
					path(t, d, 0, "violations", 0, "quotaId") != "GenerateRequestsPerMinutePerProjectPerModel-FreeTier" ||
					path(t, d, 0, "violations", 0, "quotaValue") != "1" {
					t.Errorf("QuotaFailure %v", d[0])
				}
				if path(t, d, 2, "@type") != "type.googleapis.com/google.rpc.RetryInfo" {
					t.Errorf("RetryInfo %v", d[2])
				}
				delay := path(t, d, 2, "retryDelay").(string)
				if dd, err := time.ParseDuration(delay); err != nil || dd < time.Second || !strings.HasSuffix(delay, "s") {
					t.Errorf("retryDelay %q", delay)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.provider, func(t *testing.T) {
			s, _ := newSim(t, func(c *Config) { setLimits(c, tc.provider, tc.limits) })
			r1 := do(t, s, "POST", tc.path, tc.body, HeaderOutputTokens, "10")
			r2 := do(t, s, "POST", tc.path, tc.body, HeaderOutputTokens, "10")
			if r1.Code != 200 || r2.Code != 200 {
				t.Fatalf("%d %d %s", r1.Code, r2.Code, r1.Body)
			}
			// A separate simulator with RPM 1 for the 429.
			l := tc.limits
			l.RPM = 1
			s2, _ := newSim(t, func(c *Config) { setLimits(c, tc.provider, l) })
			do(t, s2, "POST", tc.path, tc.body)
			rl := do(t, s2, "POST", tc.path, tc.body)
			if rl.Code != 429 {
				t.Fatalf("want 429, got %d", rl.Code)
			}
			tc.check(t, r1.Header(), r2.Header(), rl.Header(), decode(t, rl))
		})
	}
}

func TestBadRequests(t *testing.T) {
	s, _ := newSim(t, nil)
	cases := []struct {
		name, path string
		body       any
		code       int
	}{
		{"openai no model", pOpenAI, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x"}}}, 400},
		{"openai bad json", pOpenAI, "{", 400},
		{"openai bad max_tokens", pOpenAI, map[string]any{"model": "m", "max_tokens": 0, "messages": []any{map[string]any{"role": "user", "content": "x"}}}, 400},
		{"azure without api-version", "/azure/openai/deployments/d/chat/completions", openAIBody("", "x", 5), 404},
		{"anthropic without max_tokens", pAnthropic, map[string]any{"model": "c", "messages": []any{map[string]any{"role": "user", "content": "x"}}}, 400},
		{"gemini unknown method", "/gemini/v1beta/models/gemini-2.0-flash:countTokens", geminiBody("x", 5), 404},
		{"gemini no contents", pGemini, map[string]any{}, 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if rec := do(t, s, "POST", tc.path, tc.body); rec.Code != tc.code {
				t.Fatalf("%d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
		})
	}
}

// TestNoRateLimitHeaders: a provider configured with no_rate_limit_headers
// answers a success and a 429 with no rate-limit header and no
// Retry-After, as Vertex AI's bare RESOURCE_EXHAUSTED does.
func TestNoRateLimitHeaders(t *testing.T) {
	for _, p := range []struct{ provider, path string }{{OpenAI, pOpenAI}, {Azure, pAzure}} {
		s, _ := newSim(t, func(c *Config) {
			setLimits(c, p.provider, Limits{RPM: 1})
			pc := c.Providers[p.provider]
			pc.NoRateLimitHeaders = true
			c.Providers[p.provider] = pc
		})
		ok := do(t, s, "POST", p.path, openAIBody("gpt-4o-mini", "hello", 10))
		limited := do(t, s, "POST", p.path, openAIBody("gpt-4o-mini", "hello", 10))
		if ok.Code != 200 || limited.Code != 429 {
			t.Fatalf("%s: statuses %d, %d; want 200, 429", p.provider, ok.Code, limited.Code)
		}
		for _, h := range []http.Header{ok.Header(), limited.Header()} {
			if k := hasPrefixHeader(h, "x-ratelimit", "retry-after", "anthropic-"); k != "" {
				t.Errorf("%s: header %s sent", p.provider, k)
			}
		}
	}
}

// TestRequestIDHeaders: every OpenAI-shaped answer carries x-request-id,
// and Azure's also its API Management id, on each endpoint they share
// (openAISurface.requestIDs).
func TestRequestIDHeaders(t *testing.T) {
	s, _ := newSim(t, nil)
	prompt := map[string]any{"model": "m", "prompt": "x"}
	cases := []struct {
		name, path string
		body       any
		apim       bool
	}{
		{"openai chat", pOpenAI, openAIBody("m", "x", 5), false},
		{"openai completions", "/openai/v1/completions", prompt, false},
		{"openai responses", "/openai/v1/responses", map[string]any{"model": "m", "input": "x"}, false},
		{"azure chat", pAzure, openAIBody("", "x", 5), true},
		{"azure completions", "/azure/openai/deployments/dep1/completions?api-version=2024-10-21", prompt, true},
		{"azure responses", "/azure/openai/v1/responses", map[string]any{"model": "dep1", "input": "x"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := do(t, s, "POST", tc.path, tc.body)
			if rec.Code != 200 {
				t.Fatalf("%d: %s", rec.Code, rec.Body)
			}
			if rec.Header().Get("x-request-id") == "" || (rec.Header().Get("apim-request-id") != "") != tc.apim {
				t.Fatalf("headers %v, want x-request-id and apim-request-id %v", rec.Header(), tc.apim)
			}
		})
	}
}
