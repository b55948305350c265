package provider

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

var testNow = time.Date(2025, 10, 14, 9, 20, 0, 0, time.UTC)

// loadResponse reads a recorded HTTP response (status line, headers, blank
// line, body) from testdata.
func loadResponse(t testing.TB, name string) (*http.Response, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

type sseEvent struct{ event, data []byte }

// loadSSE splits a recorded text/event-stream into events.
func loadSSE(t testing.TB, name string) []sseEvent {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return parseSSE(raw)
}

func parseSSE(raw []byte) []sseEvent {
	var out []sseEvent
	var cur sseEvent
	var data [][]byte
	flush := func() {
		if cur.event != nil || data != nil {
			cur.data = bytes.Join(data, []byte("\n"))
			out = append(out, cur)
		}
		cur, data = sseEvent{}, nil
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		switch {
		case len(line) == 0:
			flush()
		case bytes.HasPrefix(line, []byte("event:")):
			cur.event = bytes.TrimSpace(line[len("event:"):])
		case bytes.HasPrefix(line, []byte("data:")):
			d := line[len("data:"):]
			data = append(data, bytes.TrimPrefix(d, []byte(" ")))
		}
	}
	flush()
	return out
}

func TestParseRateLimitHeaders(t *testing.T) {
	tests := []struct {
		file string
		kind Kind
		want []schemas.Observation
	}{
		{"openai_chat_200.http", schemas.ProviderOpenAI, []schemas.Observation{
			{Dimension: schemas.DimRequests, Limit: 5000, Remaining: 4999, ResetMs: 12},
			{Dimension: schemas.DimTotalTokens, Limit: 800000, Remaining: 799741, ResetMs: 19},
		}},
		{"openai_429_tpm.http", schemas.ProviderOpenAI, []schemas.Observation{
			{Dimension: schemas.DimRequests, Limit: 500, Remaining: 499, ResetMs: 120},
			{Dimension: schemas.DimTotalTokens, Limit: 30000, Remaining: 0, ResetMs: 119400},
		}},
		{"openai_embeddings_200.http", schemas.ProviderOpenAI, []schemas.Observation{
			{Dimension: schemas.DimRequests, Limit: 3000, Remaining: 2999, ResetMs: 20},
			{Dimension: schemas.DimTotalTokens, Limit: 1000000, Remaining: 999992, ResetMs: 0},
		}},
		{"azure_chat_200.http", schemas.ProviderAzure, []schemas.Observation{
			{Dimension: schemas.DimRequests, Remaining: 79},
			{Dimension: schemas.DimTotalTokens, Remaining: 79488},
		}},
		{"anthropic_messages_200.http", schemas.ProviderAnthropic, []schemas.Observation{
			{Dimension: schemas.DimRequests, Limit: 4000, Remaining: 3999, ResetMs: 0},
			{Dimension: schemas.DimInputTokens, Limit: 2000000, Remaining: 1998000, ResetMs: 0},
			{Dimension: schemas.DimOutputTokens, Limit: 400000, Remaining: 399000, ResetMs: 1000},
			{Dimension: schemas.DimTotalTokens, Limit: 2400000, Remaining: 2397000, ResetMs: 0},
		}},
		{"anthropic_429.http", schemas.ProviderAnthropic, []schemas.Observation{
			{Dimension: schemas.DimRequests, Limit: 50, Remaining: 41, ResetMs: 1000},
			{Dimension: schemas.DimInputTokens, Limit: 20000, Remaining: 0, ResetMs: 14000},
			{Dimension: schemas.DimOutputTokens, Limit: 8000, Remaining: 8000, ResetMs: 0},
		}},
		{"gemini_200.http", schemas.ProviderGemini, nil},
		{"openai_429_insufficient_quota.http", schemas.ProviderOpenAI, nil},
	}
	for _, tt := range tests {
		resp, _ := loadResponse(t, tt.file)
		got := ParseRateLimitHeaders(tt.kind, resp.Header, testNow)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.file, got, tt.want)
		}
	}
}

func TestParseRateLimitHeadersOddValues(t *testing.T) {
	h := http.Header{}
	h.Set("x-ratelimit-limit-tokens", "-1") // Azure Responses API quirk
	h.Set("x-ratelimit-remaining-tokens", "-1")
	h.Set("x-ratelimit-reset-tokens", "0")
	h.Set("x-ratelimit-remaining-requests", "abc")
	if got := ParseRateLimitHeaders(schemas.ProviderAzure, h, testNow); len(got) != 0 {
		t.Errorf("negative/garbage values must be skipped: %+v", got)
	}
	h = http.Header{}
	h.Set("x-ratelimit-remaining-requests", " 7 ")
	h.Set("x-ratelimit-reset-requests", "garbage")
	got := ParseRateLimitHeaders(schemas.ProviderOpenAICompatible, h, testNow)
	if want := []schemas.Observation{{Dimension: schemas.DimRequests, Remaining: 7}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v", got)
	}
}

func TestParseDurationMs(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1s", 1000, true}, {"6m0s", 360000, true}, {"12ms", 12, true}, {"20ms", 20, true},
		{"0s", 0, true}, {"1h2m3.5s", 3723500, true}, {"1m59.4s", 119400, true},
		{"2.5s", 2500, true}, {"0.4ms", 1, true}, {"500us", 1, true}, {"1500µs", 2, true},
		{"1d2h", 93600000, true}, {"7", 7000, true}, {"0.25", 250, true}, {"37s", 37000, true},
		{"25.465784708s", 25466, true}, {"  3s ", 3000, true},
		{"", 0, false}, {"s", 0, false}, {"5x", 0, false}, {"-1s", 0, false}, {"1.2.3s", 0, false},
		{"abc", 0, false}, {"10", 10000, true}, {"1e400", 0, false}, {"99999999999999h", maxMs, true},
	}
	for _, tt := range tests {
		got, ok := ParseDurationMs(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseDurationMs(%q) = %d,%v want %d,%v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		want    int64
		ok      bool
	}{
		{"none", nil, 0, false},
		{"seconds", map[string]string{"Retry-After": "14"}, 14000, true},
		{"decimal seconds", map[string]string{"Retry-After": "1.5"}, 1500, true},
		{"ms wins", map[string]string{"Retry-After": "6", "retry-after-ms": "5712"}, 5712, true},
		{"x-ms wins over seconds", map[string]string{"Retry-After": "3", "x-ms-retry-after-ms": "2500"}, 2500, true},
		{"retry-after-ms first", map[string]string{"retry-after-ms": "100", "x-ms-retry-after-ms": "2500"}, 100, true},
		{"bad ms falls back", map[string]string{"retry-after-ms": "soon", "Retry-After": "2"}, 2000, true},
		{"http date", map[string]string{"Retry-After": "Tue, 14 Oct 2025 09:20:30 GMT"}, 30000, true},
		{"rfc850 date", map[string]string{"Retry-After": "Tuesday, 14-Oct-25 09:20:05 GMT"}, 5000, true},
		{"past date", map[string]string{"Retry-After": "Tue, 14 Oct 2025 09:00:00 GMT"}, 0, true},
		{"negative", map[string]string{"Retry-After": "-5"}, 0, false},
		{"garbage", map[string]string{"Retry-After": "later"}, 0, false},
		// t.Sub saturates at 292 years; rounding it up once overflowed to −9223372036853.
		{"far-future date", map[string]string{"Retry-After": "Tue, 01 OCt 7000 0:00:00 GMT"}, maxMs, true},
		{"huge seconds", map[string]string{"Retry-After": "1e300"}, maxMs, true},
		{"huge ms", map[string]string{"retry-after-ms": "1e300"}, maxMs, true},
	}
	for _, tt := range tests {
		h := http.Header{}
		for k, v := range tt.headers {
			h.Set(k, v)
		}
		got, ok := ParseRetryAfter(h, testNow)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: got %d,%v want %d,%v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseRejection(t *testing.T) {
	tests := []struct {
		file    string
		kind    Kind
		want    schemas.ProviderRejected
		msgHas  string
		msgNot  []string
		wantNil bool
	}{
		{file: "openai_429_tpm.http", kind: schemas.ProviderOpenAI, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRateLimited,
			Limiter: schemas.DimTotalTokens, RetryAfterMs: 3000, ProviderRequestID: "req_429tpm"}, msgHas: "Rate limit reached for gpt-4o"},
		{file: "openai_429_too_large.http", kind: schemas.ProviderOpenAI, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRequestError,
			Limiter: schemas.DimTotalTokens, ProviderRequestID: "req_toolarge"}, msgHas: "Request too large"},
		{file: "openai_429_insufficient_quota.http", kind: schemas.ProviderOpenAI, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindQuotaExhausted,
			ProviderRequestID: "req_quota1"}, msgHas: "exceeded your current quota"},
		{file: "openai_401_key.http", kind: schemas.ProviderOpenAI, want: schemas.ProviderRejected{HTTPStatus: 401, Kind: schemas.KindRequestError,
			ProviderRequestID: "req_auth1"}, msgHas: "Incorrect API key provided: sk-[REDACTED]", msgNot: []string{"AbCd"}},
		{file: "azure_429.http", kind: schemas.ProviderAzure, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRateLimited,
			Limiter: schemas.DimTotalTokens, RetryAfterMs: 5712, ProviderRequestID: "1b2c3d4e-5f60-4718-293a-4b5c6d7e8f90"}, msgHas: "exceeded token rate limit"},
		{file: "azure_429_proxy.http", kind: schemas.ProviderAzure, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRateLimited,
			Limiter: schemas.DimRequests, RetryAfterMs: 2500}, msgHas: "api-key=[REDACTED]", msgNot: []string{"0123456789abcdef"}},
		{file: "anthropic_429.http", kind: schemas.ProviderAnthropic, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRateLimited,
			Limiter: schemas.DimInputTokens, RetryAfterMs: 14000, ProviderRequestID: "req_011CTrateLimited0001"}, msgHas: "20,000 input tokens per minute"},
		{file: "anthropic_429_noretry.http", kind: schemas.ProviderAnthropic, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRateLimited,
			Limiter: schemas.DimRequests, RetryAfterMs: 2500, ProviderRequestID: "req_011CTnoRetryAfter"}},
		{file: "anthropic_429_spend_limit.http", kind: schemas.ProviderAnthropic, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindQuotaExhausted,
			ProviderRequestID: "req_011CTspendLimit"}},
		{file: "anthropic_529.http", kind: schemas.ProviderAnthropic, want: schemas.ProviderRejected{HTTPStatus: 529, Kind: schemas.KindOverloaded,
			ProviderRequestID: "req_011CToverloaded", Message: "Overloaded"}},
		{file: "gemini_429_per_minute.http", kind: schemas.ProviderGemini, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRateLimited,
			Limiter: schemas.DimInputTokens, RetryAfterMs: 58000}},
		{file: "gemini_429_per_day.http", kind: schemas.ProviderGemini, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindQuotaExhausted,
			Limiter: schemas.DimRequestsPerDay, RetryAfterMs: 37000}},
		{file: "vertex_429.http", kind: schemas.ProviderGemini, want: schemas.ProviderRejected{HTTPStatus: 429, Kind: schemas.KindRateLimited}, msgHas: "Resource exhausted"},
		{file: "gemini_503.http", kind: schemas.ProviderGemini, want: schemas.ProviderRejected{HTTPStatus: 503, Kind: schemas.KindOverloaded}, msgHas: "overloaded"},
		{file: "openai_chat_200.http", kind: schemas.ProviderOpenAI, wantNil: true},
	}
	for _, tt := range tests {
		resp, body := loadResponse(t, tt.file)
		got, ok := ParseRejection(tt.kind, resp.StatusCode, resp.Header, body, testNow, Secrets{})
		if tt.wantNil {
			if ok {
				t.Errorf("%s: unexpected rejection %+v", tt.file, got)
			}
			continue
		}
		if !ok {
			t.Errorf("%s: not parsed as a rejection", tt.file)
			continue
		}
		msg := got.Message
		if tt.want.Message == "" {
			got.Message = ""
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.file, got, tt.want)
		}
		if len(msg) > MaxMessageBytes || !strings.Contains(msg, tt.msgHas) {
			t.Errorf("%s: message %q (want it to contain %q, ≤ %d bytes)", tt.file, msg, tt.msgHas, MaxMessageBytes)
		}
		for _, bad := range tt.msgNot {
			if strings.Contains(msg, bad) {
				t.Errorf("%s: message leaks %q: %q", tt.file, bad, msg)
			}
		}
	}
}

func TestScrubMessage(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Incorrect API key provided: sk-proj-abc123XYZ.", "Incorrect API key provided: sk-[REDACTED]"},
		{"bad key sk-ant-api03-AbC_dEf-123", "bad key sk-[REDACTED]"},
		{"Authorization: Bearer eyJhbGciOi.abc.def", "Authorization: [REDACTED]"},
		{"header bearer abc.DEF-123", "header Bearer [REDACTED]"},
		{"GET https://generativelanguage.googleapis.com/v1/models/gemini-pro:generateContent?key=AIzaSyC1UCQZn8WFdrevgxXx-S4LoGD0a8lh8eU failed",
			"GET https://generativelanguage.googleapis.com/v1/models/gemini-pro:generateContent?key=[REDACTED] failed"},
		{"key AIzaSyC1UCQZn8WFdrevgxXx-S4LoGD0a8lh8eU", "key [REDACTED]"},
		{`{"api_key": "abcd1234"}`, `{"api_key": "[REDACTED]"}`},
		{"azure key 0123456789abcdef0123456789abcdef", "azure key [REDACTED]"},
		{"token Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1u end", "token [REDACTED] end"},
		{"quota GenerateContentInputTokensPerModelPerMinute-FreeTier stays", "quota GenerateContentInputTokensPerModelPerMinute-FreeTier stays"},
		{"Limit 30000, Used 29937, Requested 385 tokens per min (TPM)", "Limit 30000, Used 29937, Requested 385 tokens per min (TPM)"},
		{"line1\nline2\ttab", "line1 line2 tab"},
	}
	for _, tt := range tests {
		if got := ScrubMessage(tt.in); got != tt.want {
			t.Errorf("ScrubMessage(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
	long := strings.Repeat("é", 600) // 1200 bytes
	if got := ScrubMessage(long); len(got) > MaxMessageBytes || !strings.HasPrefix(long, got) || len(got) < MaxMessageBytes-1 {
		t.Errorf("truncation: %d bytes", len(got))
	}
}

func TestParseUsage(t *testing.T) {
	tests := []struct {
		file string
		kind Kind
		want Usage
	}{
		{"openai_chat_200.http", schemas.ProviderOpenAI, Usage{InputTokens: 2006, CachedInputTokens: 1920, OutputTokens: 300}},
		{"openai_reasoning_200.http", schemas.ProviderOpenAI, Usage{InputTokens: 75, OutputTokens: 1186, ReasoningTokens: 1024}},
		{"openai_embeddings_200.http", schemas.ProviderOpenAI, Usage{InputTokens: 8}},
		{"openai_responses_200.http", schemas.ProviderOpenAI, Usage{InputTokens: 36, OutputTokens: 387, ReasoningTokens: 320}},
		{"azure_chat_200.http", schemas.ProviderAzure, Usage{InputTokens: 12, OutputTokens: 3}},
		{"anthropic_messages_200.http", schemas.ProviderAnthropic, Usage{InputTokens: 12 + 1500 + 2048, CachedInputTokens: 2048, CacheWriteInputTokens: 1500, OutputTokens: 6}},
		{"gemini_200.http", schemas.ProviderGemini, Usage{InputTokens: 1041, CachedInputTokens: 1024, OutputTokens: 204, ReasoningTokens: 200}},
	}
	for _, tt := range tests {
		_, body := loadResponse(t, tt.file)
		got, ok := ParseUsage(tt.kind, body)
		if !ok || got != tt.want {
			t.Errorf("%s: got %+v,%v want %+v", tt.file, got, ok, tt.want)
		}
	}
	for _, body := range []string{``, `[]`, `{"id":"x"}`, `{"usage":null}`, `not json`} {
		if u, ok := ParseUsage(schemas.ProviderOpenAI, []byte(body)); ok {
			t.Errorf("ParseUsage(%q) = %+v, want !ok", body, u)
		}
	}
}

func TestStreamUsage(t *testing.T) {
	tests := []struct {
		file     string
		kind     Kind
		want     Usage
		partial  bool
		finished bool
	}{
		{"openai_stream_include_usage.sse", schemas.ProviderOpenAI, Usage{InputTokens: 19, OutputTokens: 10}, false, true},
		// Cut: 5 content/tool deltas ("Once", " upon", " a", " time", "get_weather"),
		// 26 bytes → max(5, ceil(26/4)=7) = 7.
		{"openai_stream_cut.sse", schemas.ProviderOpenAI, Usage{OutputTokens: 7}, true, false},
		{"anthropic_stream.sse", schemas.ProviderAnthropic, Usage{InputTokens: 25 + 1024, CachedInputTokens: 1024, OutputTokens: 15}, false, true},
		// Cut after message_start: input known; output from deltas (57 bytes → 15).
		{"anthropic_stream_cut.sse", schemas.ProviderAnthropic, Usage{InputTokens: 472, OutputTokens: 15}, true, false},
		{"gemini_stream.sse", schemas.ProviderGemini, Usage{InputTokens: 9, OutputTokens: 10}, false, true},
		// Responses API: response.completed's usage, reasoning included.
		{"openai_responses_stream.sse", schemas.ProviderOpenAI, Usage{InputTokens: 12, OutputTokens: 70, ReasoningTokens: 64}, false, true},
		// Cut after two text deltas ("Hello", " there!": 12 bytes) → max(2, 3) = 3.
		{"openai_responses_stream_cut.sse", schemas.ProviderOpenAI, Usage{OutputTokens: 3}, true, false},
		{"openai_completions_stream.sse", schemas.ProviderOpenAI, Usage{InputTokens: 5, OutputTokens: 4}, false, true},
	}
	for _, tt := range tests {
		s := NewStreamUsage(tt.kind)
		for _, ev := range loadSSE(t, tt.file) {
			s.Feed(ev.event, ev.data)
		}
		got, partial := s.Usage()
		if got != tt.want || partial != tt.partial || s.Finished() != tt.finished {
			t.Errorf("%s: got %+v partial=%v finished=%v, want %+v %v %v", tt.file, got, partial, s.Finished(), tt.want, tt.partial, tt.finished)
		}
	}
	// Without include_usage the stream finishes but usage stays approximate.
	s := NewStreamUsage(schemas.ProviderOpenAI)
	for _, ev := range loadSSE(t, "openai_stream_include_usage.sse") {
		if !bytes.Contains(ev.data, []byte(`"usage":{`)) {
			s.Feed(ev.event, ev.data)
		}
	}
	if u, partial := s.Usage(); !partial || !s.Finished() || u.InputTokens != 0 || u.OutputTokens != 6 { // 3 deltas, 22 bytes → 6
		t.Errorf("no include_usage: %+v partial=%v", u, partial)
	}
}
