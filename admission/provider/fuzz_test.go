package provider

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

func FuzzParseRateLimitHeaders(f *testing.F) {
	f.Add("5000", "4999", "6m0s", "2025-10-14T09:20:00Z", "14")
	f.Add("-1", "-1", "0", "garbage", "Tue, 14 Oct 2025 09:20:30 GMT")
	f.Add("1e99", "NaN", "1h2m3.5s", "2025-10-14T09:20:00.123456789+02:00", "1.5")
	f.Add("", "", "12ms", "", "")
	// A far-future HTTP-date once gave a retry delay of −9223372036853 ms.
	f.Add("5000", "4999", "6m0s", "7000-10-01T00:00:00Z", "Tue, 01 OCt 7000 0:00:00 GMT")
	f.Add("99999999999999999999", "1e15", "99999999999999h", "9999-12-31T23:59:59Z", "1e300")
	f.Fuzz(func(t *testing.T, limit, remaining, reset, rfcReset, retryAfter string) {
		h := http.Header{}
		for _, d := range []string{"requests", "tokens"} {
			h.Set("x-ratelimit-limit-"+d, limit)
			h.Set("x-ratelimit-remaining-"+d, remaining)
			h.Set("x-ratelimit-reset-"+d, reset)
		}
		for _, d := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
			h.Set("anthropic-ratelimit-"+d+"-limit", limit)
			h.Set("anthropic-ratelimit-"+d+"-remaining", remaining)
			h.Set("anthropic-ratelimit-"+d+"-reset", rfcReset)
		}
		h.Set("retry-after", retryAfter)
		h.Set("retry-after-ms", reset)
		h.Set("x-ms-retry-after-ms", limit)
		for _, k := range schemas.ProviderKinds {
			for _, o := range ParseRateLimitHeaders(k, h, testNow) {
				if o.Remaining < 0 || o.Limit < 0 || o.ResetMs < 0 || o.ResetMs > maxMs {
					t.Fatalf("bad observation %+v", o)
				}
			}
		}
		if ms, ok := ParseRetryAfter(h, testNow); ok && (ms < 0 || ms > maxMs) {
			t.Fatalf("retry-after %d", ms)
		}
		if ms, ok := ParseDurationMs(reset); ok && (ms < 0 || ms > maxMs) {
			t.Fatalf("duration %q → %d", reset, ms)
		}
	})
}

func FuzzParseRejection(f *testing.F) {
	for _, name := range []string{"openai_429_tpm.http", "openai_429_insufficient_quota.http", "azure_429.http",
		"anthropic_429.http", "anthropic_529.http", "anthropic_429_spend_limit.http",
		"gemini_429_per_day.http", "gemini_429_per_minute.http", "vertex_429.http"} {
		resp, body := loadResponse(f, name)
		f.Add(resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	f.Add(200, []byte(`{"error":{"status":"RESOURCE_EXHAUSTED","details":[{"@type":"x.google.rpc.RetryInfo","retryDelay":"1e9s"}]}}`), "")
	f.Add(-5, []byte(`[`), "NaN")
	f.Fuzz(func(t *testing.T, status int, body []byte, retryAfter string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		h.Set("anthropic-ratelimit-requests-remaining", "0")
		h.Set("anthropic-ratelimit-requests-reset", retryAfter)
		for _, k := range schemas.ProviderKinds {
			r, ok := ParseRejection(k, status, h, body, testNow, Secrets{})
			if !ok {
				continue
			}
			if len(r.Message) > MaxMessageBytes || len(r.ProviderRequestID) > 128 || r.RetryAfterMs < 0 {
				t.Fatalf("bad rejection %+v", r)
			}
			switch r.Kind {
			case schemas.KindRateLimited, schemas.KindOverloaded, schemas.KindQuotaExhausted, schemas.KindRequestError:
			default:
				t.Fatalf("bad kind %q", r.Kind)
			}
		}
	})
}

func FuzzStreamUsage(f *testing.F) {
	for _, name := range []string{"openai_stream_include_usage.sse", "openai_stream_cut.sse", "anthropic_stream.sse",
		"anthropic_stream_cut.sse", "gemini_stream.sse", "openai_responses_stream.sse", "openai_completions_stream.sse"} {
		for _, ev := range loadSSE(f, name) {
			f.Add(string(ev.event), ev.data)
		}
	}
	f.Add("", []byte("[DONE]"))
	f.Add("message_delta", []byte(`{"usage":{"output_tokens":-5,"input_tokens":-1}}`))
	f.Fuzz(func(t *testing.T, event string, data []byte) {
		for _, k := range []Kind{schemas.ProviderOpenAI, schemas.ProviderAnthropic, schemas.ProviderGemini} {
			s := NewStreamUsage(k)
			// Feed it twice and around a real event so state interactions are exercised.
			s.Feed([]byte(event), data)
			s.Feed([]byte("message_start"), []byte(`{"type":"message_start","message":{"usage":{"input_tokens":3}}}`))
			s.Feed([]byte(event), data)
			u, _ := s.Usage()
			if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens > u.InputTokens {
				t.Fatalf("bad usage %+v", u)
			}
			ParseUsage(k, data)
		}
	})
}

// FuzzStream: the adapter's view of a stream never panics, and what it
// passes or translates for the client is well-formed SSE.
func FuzzStream(f *testing.F) {
	for _, name := range []string{"openai_stream_include_usage.sse", "openai_stream_cut.sse", "anthropic_stream.sse", "gemini_stream.sse"} {
		for _, ev := range loadSSE(f, name) {
			f.Add(string(ev.event), ev.data, true)
		}
	}
	f.Add("", []byte(`{"choices":[],"usage":null}`), true)
	f.Add("", []byte(`{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"SAFETY"}]}`), false)
	f.Fuzz(func(t *testing.T, event string, data []byte, forced bool) {
		for _, k := range []Kind{schemas.ProviderOpenAI, schemas.ProviderAnthropic, schemas.ProviderGemini} {
			s := NewStream(k, forced, "m", "r", true)
			raw := append(append([]byte("data: "), data...), '\n', '\n')
			out := append(s.Event([]byte(event), data, raw), s.Tail()...)
			if k == schemas.ProviderGemini && len(out) > 0 && !bytes.HasPrefix(out, []byte("data: ")) {
				t.Fatalf("translated stream %q", out)
			}
			if u, _ := s.Usage(); u.InputTokens < 0 || u.OutputTokens < 0 {
				t.Fatalf("bad usage %+v", u)
			}
		}
	})
}

// FuzzParseAnswer: a translated answer is always JSON.
func FuzzParseAnswer(f *testing.F) {
	for _, name := range []string{"openai_chat_200.http", "anthropic_messages_200.http", "gemini_200.http"} {
		_, body := loadResponse(f, name)
		f.Add(body)
	}
	f.Add([]byte(`{"candidates":null,"usageMetadata":{"promptTokenCount":-1}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, k := range schemas.ProviderKinds {
			a := ParseAnswer(k, body, "m", "r")
			if a.Translated && !json.Valid(a.Body) {
				t.Fatalf("translation is not JSON: %s", a.Body)
			}
		}
	})
}

// FuzzParseUsageFast: reading the usage member alone (usageFieldFast) gives
// what json.Unmarshal of the whole answer gives, for every provider's
// shape, whenever it decides.
func FuzzParseUsageFast(f *testing.F) {
	for _, name := range []string{"openai_chat_200.http", "anthropic_messages_200.http", "gemini_200.http"} {
		_, body := loadResponse(f, name)
		f.Add(body)
	}
	for _, s := range []string{
		`{"usage":{"prompt_tokens":5},"USAGE":{"completion_tokens":3}}`,
		`{"usage":{"prompt_tokens":5},"usage":null}`,
		`{"usage":{"prompt_tokens":"5"}}`,
		`{"usageMetadata":{"promptTokenCount":2},"Usage":{"input_tokens":1,"output_tokens":2}}`,
		`{"\u0075sage":{"prompt_tokens":1}}`,
		`{"usage":{"prompt_tokens":1}}x`,
		`{"usage":{"prompt_tokens":-9223372036854775808,"completion_tokens":1e2}}`,
		`{"usage":{"PROMPT_TOKENS":3,"prompt_tokens_details":{"cached_tokens":2},"prompt_tokens_details":{"Cached_Tokens":null},"output_tokens":1.0}}`,
		`{"usage":{"input_tokens":7,"input_tokens":null,"output_tokens_details":{"reasoning_tokens":"1"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkUsageFast[openAIUsage](t, body, "usage")
		checkUsageFast[anthropicUsage](t, body, "usage")
		checkUsageFast[geminiUsage](t, body, "usageMetadata")
	})
}

func checkUsageFast[T any](t *testing.T, body []byte, name string) {
	t.Helper()
	fast, fastOK, decided := usageFieldFast[T](body, name)
	if !decided {
		return
	}
	slow, slowOK := usageFieldSlow[T](body, name)
	if fastOK != slowOK || (fast == nil) != (slow == nil) || fast != nil && !reflect.DeepEqual(*fast, *slow) {
		t.Fatalf("%T of %q: fast %+v %v, encoding/json %+v %v", fast, body, fast, fastOK, slow, slowOK)
	}
}
