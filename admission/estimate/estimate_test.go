package estimate

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/png"
	"strings"
	"testing"
)

// The OpenAI cookbook's "How to count tokens with tiktoken" example
// conversation; its expected count follows the cookbook formula over
// tiktoken-go's own encoder.
const cookbookBody = `{"model":"%s","messages":[
 {"role":"system","content":"You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
 {"role":"system","name":"example_user","content":"New synergies will help drive top-line growth."},
 {"role":"system","name":"example_assistant","content":"Things working well together will increase revenue."},
 {"role":"system","name":"example_user","content":"Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
 {"role":"system","name":"example_assistant","content":"Let's talk later when we're less busy about how to do better."},
 {"role":"user","content":"This late pivot means we don't have time to boil the ocean for the client project."}]}`

func mustParseChat(t testing.TB, body string) Request {
	t.Helper()
	r, err := ParseOpenAIChat([]byte(body))
	if err != nil {
		t.Fatalf("ParseOpenAIChat: %v", err)
	}
	return r
}

func TestEstimateCookbookExample(t *testing.T) {
	est := New(Options{})
	for _, tt := range []struct{ model, enc string }{{"gpt-4-0613", EncodingCL100k}, {"gpt-4o-2024-08-06", EncodingO200k}} {
		req := mustParseChat(t, fmt.Sprintf(cookbookBody, tt.model))
		ref := reference(t, tt.enc)
		want := int64(3) // reply priming
		for _, m := range req.Messages {
			want += 3 + int64(len(ref.EncodeOrdinary(m.Role))) + int64(len(ref.EncodeOrdinary(m.Parts[0].Text)))
			if m.Name != "" {
				want += 1 + int64(len(ref.EncodeOrdinary(m.Name)))
			}
		}
		got := est.Estimate(req, 0)
		if got.InputTokens != want || got.Encoding != tt.enc || got.Approximate {
			t.Errorf("%s: %+v, want %d %s exact", tt.model, got, want, tt.enc)
		}
	}
	// Pinned values, so a tokenizer change cannot go unnoticed.
	if got := est.Estimate(mustParseChat(t, fmt.Sprintf(cookbookBody, "gpt-4")), 0).InputTokens; got != 128 {
		t.Errorf("gpt-4 cookbook example = %d, want 128", got)
	}
	if got := est.Estimate(mustParseChat(t, fmt.Sprintf(cookbookBody, "gpt-4o")), 0).InputTokens; got != 123 {
		t.Errorf("gpt-4o cookbook example = %d, want 123", got)
	}
}

func TestEncodingForModel(t *testing.T) {
	tests := []struct {
		model string
		enc   string
		exact bool
	}{
		{"gpt-4o", EncodingO200k, true},
		{"gpt-4o-mini-2024-07-18", EncodingO200k, true},
		{"gpt-4.1-nano", EncodingO200k, true},
		{"gpt-4.5-preview", EncodingO200k, true},
		{"gpt-5", EncodingO200k, true},
		{"o1-preview", EncodingO200k, true},
		{"o3-mini", EncodingO200k, true},
		{"o4-mini", EncodingO200k, true},
		{"chatgpt-4o-latest", EncodingO200k, true},
		{"openai/GPT-4o", EncodingO200k, true},
		{"gpt-4", EncodingCL100k, true},
		{"gpt-4-turbo-2024-04-09", EncodingCL100k, true},
		{"gpt-3.5-turbo", EncodingCL100k, true},
		{"gpt-35-turbo", EncodingCL100k, true},
		{"text-embedding-3-small", EncodingCL100k, true},
		{"text-embedding-ada-002", EncodingCL100k, true},
		{"claude-sonnet-4-20250514", EncodingCL100k, false},
		{"anthropic.claude-3-5-sonnet-20240620-v1:0", EncodingCL100k, false},
		{"models/gemini-2.5-flash", EncodingCL100k, false},
		{"llama-3.1-70b", EncodingCL100k, false},
	}
	for _, tt := range tests {
		enc, exact := EncodingForModel(tt.model)
		if enc != tt.enc || exact != tt.exact {
			t.Errorf("EncodingForModel(%q) = %s,%v want %s,%v", tt.model, enc, exact, tt.enc, tt.exact)
		}
	}
}

func TestOutputTokens(t *testing.T) {
	est := New(Options{})
	tests := []struct {
		name       string
		body       string
		p95        int64
		wantOut    int64
		wantStream bool
	}{
		{"default", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 0, 4096, false},
		{"max_tokens below default", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, 0, 100, false},
		{"max_completion_tokens wins", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"max_completion_tokens":200}`, 0, 200, false},
		{"p95 lowest", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":1000}`, 250, 250, false},
		{"asked lowest", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":50}`, 250, 50, false},
		{"asked above default", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":50000}`, 0, 4096, false},
		{"model cap", `{"model":"gpt-3.5-turbo","messages":[{"role":"user","content":"hi"}]}`, 9000, 4096, false},
		{"n choices", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":10,"n":3}`, 0, 30, false},
		{"stream", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`, 0, 4096, true},
	}
	for _, tt := range tests {
		got := est.Estimate(mustParseChat(t, tt.body), tt.p95)
		if got.OutputTokens != tt.wantOut || got.Streaming != tt.wantStream {
			t.Errorf("%s: out=%d stream=%v, want %d %v", tt.name, got.OutputTokens, got.Streaming, tt.wantOut, tt.wantStream)
		}
	}
	if got := New(Options{DefaultOutputTokens: 512}).Estimate(mustParseChat(t, tests[0].body), 0); got.OutputTokens != 512 {
		t.Errorf("custom default: %d", got.OutputTokens)
	}
}

func TestEstimateParts(t *testing.T) {
	est := New(Options{})
	base := est.Estimate(mustParseChat(t, `{"model":"gpt-4o","messages":[{"role":"user","content":"What is in this image?"}]}`), 0)
	arr := est.Estimate(mustParseChat(t, `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"What is in this image?"}]}]}`), 0)
	if base.InputTokens != arr.InputTokens || base.Approximate {
		t.Fatalf("string vs parts: %+v vs %+v", base, arr)
	}
	for _, tt := range []struct {
		detail string
		extra  int64
	}{{"low", 85}, {"high", 765}, {"auto", 765}} {
		body := `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"https://example.com/cat.png","detail":"` + tt.detail + `"}}]}]}`
		got := est.Estimate(mustParseChat(t, body), 0)
		if got.InputTokens != base.InputTokens+tt.extra || !got.Approximate {
			t.Errorf("detail %s: %d, want %d", tt.detail, got.InputTokens, base.InputTokens+tt.extra)
		}
	}
	// Inline PNGs: 1024×1024 → shortest side to 768 → 2×2 tiles → 765;
	// 512×512 → 1 tile → 255; 4096×1024 → fit 2048×512 → 4×1 tiles → 765;
	// 2048×4096 → 1024×2048 → 768×1536 → 2×3 tiles → 1105.
	for _, tt := range []struct {
		w, h  int
		extra int64
	}{{1024, 1024, 765}, {512, 512, 255}, {4096, 1024, 765}, {2048, 4096, 1105}} {
		body := `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"` + pngDataURL(tt.w, tt.h) + `"}}]}]}`
		if got := est.Estimate(mustParseChat(t, body), 0); got.InputTokens != base.InputTokens+tt.extra {
			t.Errorf("png %dx%d: +%d, want +%d", tt.w, tt.h, got.InputTokens-base.InputTokens, tt.extra)
		}
	}
	// Tools and a json_schema response format add their schemas.
	withTools := est.Estimate(mustParseChat(t, `{"model":"gpt-4o","messages":[{"role":"user","content":"What is in this image?"}],
	  "tools":[{"type":"function","function":{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],
	  "response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object","properties":{"a":{"type":"string"}}}}}}`), 0)
	if withTools.InputTokens <= base.InputTokens+tokensToolsPreamble+tokensPerTool+tokensResponseFmt || !withTools.Approximate {
		t.Errorf("tools: %+v (base %d)", withTools, base.InputTokens)
	}
}

func pngDataURL(w, h int) string {
	var buf bytes.Buffer
	_ = png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h)))
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestEstimateAnthropic(t *testing.T) {
	est := New(Options{})
	body := `{"model":"claude-sonnet-4-20250514","max_tokens":1024,"system":"You are terse.",
	 "messages":[{"role":"user","content":"Hello, Claude"},
	   {"role":"assistant","content":[{"type":"text","text":"Hi."},{"type":"tool_use","id":"t1","name":"lookup","input":{"q":"x"}}]},
	   {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"42"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` +
		strings.TrimPrefix(pngDataURL(750, 100), "data:image/png;base64,") + `"}}]}],"stream":true}`
	r, err := ParseAnthropicMessages([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	got := est.Estimate(r, 0)
	if got.OutputTokens != 1024 || !got.Streaming || !got.Approximate || got.Encoding != "cl100k_base*1.15" {
		t.Errorf("anthropic: %+v", got)
	}
	// text part × 1.15 plus the image at 750×100/750 = 100 tokens.
	c := &counter{enc: mustEncoding(t, EncodingCL100k)}
	var text int64 = tokensPerMessage + c.count("You are terse.") + tokensReplyPriming
	for _, m := range r.Messages {
		text += tokensPerMessage + c.count(m.Role)
		for _, p := range m.Parts {
			if p.Type == PartText {
				text += c.count(p.Text)
			}
		}
	}
	if want := int64(float64(text)*1.15+0.999999) + 100; got.InputTokens != want {
		t.Errorf("anthropic input %d, want %d", got.InputTokens, want)
	}
}

func TestEstimateEmbeddings(t *testing.T) {
	est := New(Options{})
	r, err := ParseEmbeddings([]byte(`{"model":"text-embedding-3-small","input":["hello world","tiktoken is great!"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := est.Estimate(r, 500); got.InputTokens != 8 || got.OutputTokens != 0 || got.Approximate {
		t.Errorf("embeddings: %+v", got)
	}
	r, err = ParseEmbeddings([]byte(`{"model":"text-embedding-3-small","input":[[1,2,3],[4,5]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := est.Estimate(r, 0); got.InputTokens != 5 {
		t.Errorf("token arrays: %+v", got)
	}
}

func TestParseErrors(t *testing.T) {
	type parser func([]byte) (Request, error)
	chat, anth, emb := parser(ParseOpenAIChat), parser(ParseAnthropicMessages), parser(ParseEmbeddings)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name  string
		parse parser
		body  string
		code  string
		param string
	}{
		{"empty", chat, ``, CodeInvalidJSON, ""},
		{"bad json", chat, `{"model":`, CodeInvalidJSON, ""},
		{"not object", chat, `[1,2]`, CodeInvalidType, ""},
		{"missing model", chat, `{` + msgs + `}`, CodeMissingField, "model"},
		{"model wrong type", chat, `{"model":4,` + msgs + `}`, CodeInvalidType, "model"},
		{"missing messages", chat, `{"model":"gpt-4o"}`, CodeMissingField, "messages"},
		{"messages not array", chat, `{"model":"gpt-4o","messages":"hi"}`, CodeInvalidType, "messages"},
		{"messages empty", chat, `{"model":"gpt-4o","messages":[]}`, CodeInvalidValue, "messages"},
		{"role missing", chat, `{"model":"gpt-4o","messages":[{"content":"hi"}]}`, CodeMissingField, "messages[0].role"},
		{"content number", chat, `{"model":"gpt-4o","messages":[{"role":"user","content":5}]}`, CodeInvalidType, "messages[0].content"},
		{"part text number", chat, `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":7}]}]}`, CodeInvalidType, "messages[0].content[0].text"},
		{"max_tokens negative", chat, `{"model":"gpt-4o",` + msgs + `,"max_tokens":-5}`, CodeInvalidValue, "max_tokens"},
		{"max_tokens zero", chat, `{"model":"gpt-4o",` + msgs + `,"max_tokens":0}`, CodeInvalidValue, "max_tokens"},
		{"max_tokens absurd", chat, `{"model":"gpt-4o",` + msgs + `,"max_tokens":1000001}`, CodeInvalidValue, "max_tokens"},
		{"max_tokens huge", chat, `{"model":"gpt-4o",` + msgs + `,"max_tokens":1e300}`, CodeInvalidValue, "max_tokens"},
		{"max_tokens string", chat, `{"model":"gpt-4o",` + msgs + `,"max_tokens":"100"}`, CodeInvalidType, "max_tokens"},
		{"max_tokens float", chat, `{"model":"gpt-4o",` + msgs + `,"max_tokens":10.5}`, CodeInvalidType, "max_tokens"},
		{"max_completion_tokens negative", chat, `{"model":"gpt-4o",` + msgs + `,"max_completion_tokens":-1}`, CodeInvalidValue, "max_completion_tokens"},
		{"stream string", chat, `{"model":"gpt-4o",` + msgs + `,"stream":"yes"}`, CodeInvalidType, "stream"},
		{"include_usage string", chat, `{"model":"gpt-4o",` + msgs + `,"stream_options":{"include_usage":"yes"}}`, CodeInvalidType, "stream_options.include_usage"},
		{"n zero", chat, `{"model":"gpt-4o",` + msgs + `,"n":0}`, CodeInvalidValue, "n"},
		{"json_schema missing", chat, `{"model":"gpt-4o",` + msgs + `,"response_format":{"type":"json_schema"}}`, CodeMissingField, "response_format.json_schema"},
		{"anthropic max_tokens missing", anth, `{"model":"claude-3-5-haiku-latest",` + msgs + `}`, CodeMissingField, "max_tokens"},
		{"anthropic max_tokens absurd", anth, `{"model":"claude-3-5-haiku-latest","max_tokens":99999999,` + msgs + `}`, CodeInvalidValue, "max_tokens"},
		{"anthropic content missing", anth, `{"model":"claude-3-5-haiku-latest","max_tokens":10,"messages":[{"role":"user"}]}`, CodeMissingField, "messages[0].content"},
		{"anthropic system number", anth, `{"model":"claude-3-5-haiku-latest","max_tokens":10,"system":1,` + msgs + `}`, CodeInvalidType, "system"},
		{"anthropic block type missing", anth, `{"model":"claude-3-5-haiku-latest","max_tokens":10,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, CodeMissingField, "messages[0].content[0].type"},
		{"embeddings missing input", emb, `{"model":"text-embedding-3-small"}`, CodeMissingField, "input"},
		{"embeddings input number", emb, `{"model":"text-embedding-3-small","input":5}`, CodeInvalidType, "input"},
		{"embeddings input mixed", emb, `{"model":"text-embedding-3-small","input":["a",5]}`, CodeInvalidType, "input[1]"},
		{"embeddings bad token", emb, `{"model":"text-embedding-3-small","input":[1,"a"]}`, CodeInvalidType, "input[1]"},
		{"embeddings empty", emb, `{"model":"text-embedding-3-small","input":[]}`, CodeInvalidValue, "input"},
	}
	for _, tt := range tests {
		_, err := tt.parse([]byte(tt.body))
		var re *RequestError
		if !errors.As(err, &re) {
			t.Errorf("%s: err = %v, want *RequestError", tt.name, err)
			continue
		}
		if re.Code != tt.code || re.Param != tt.param || re.Message == "" {
			t.Errorf("%s: got %q/%q (%s), want %q/%q", tt.name, re.Code, re.Param, re.Message, tt.code, tt.param)
		}
	}
}

func TestParsePassesUnknownFields(t *testing.T) {
	r, err := ParseOpenAIChat([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi","x_extra":1}],
	  "temperature":0.2,"seed":7,"metadata":{"a":"b"},"some_future_field":[1,2,3],"functions":[{"name":"f","parameters":{}}],
	  "tools":[{"type":"web_search_preview"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tools) != 2 || r.N != 1 {
		t.Errorf("tools %d n %d", len(r.Tools), r.N)
	}
	if _, err := ParseAnthropicMessages([]byte(`{"model":"claude-opus-4-1","max_tokens":5,"messages":[{"role":"user","content":"hi"}],
	  "metadata":{"user_id":"u"},"thinking":{"type":"enabled","budget_tokens":2048},"tools":[{"type":"web_search_20250305","name":"web_search"}]}`)); err != nil {
		t.Fatal(err)
	}
}

// benchRequest builds a chat request whose prompt is ≈4,000 o200k tokens.
func benchRequest(tb testing.TB) (Request, int64) {
	para := "Sluice sits between every caller and the LLM providers. It decides before a request leaves " +
		"the company who may send what, when, and against which provider quota, so that provider 429s become " +
		"rare, explainable events instead of retry storms. Here is some code: func (l *Ledger) Apply(ev Event) " +
		"[]Decision { return l.apply(ev) } // deterministic; numbers 12345, 3.14159, 2025-01-31. Üñíçødé too! "
	var sb strings.Builder
	enc := mustEncoding(tb, EncodingO200k)
	for i := 0; enc.Count(sb.String()) < 3950; i++ {
		fmt.Fprintf(&sb, "%d. %s\n", i, para)
	}
	req := Request{Format: FormatOpenAIChat, Model: "gpt-4o", N: 1, Messages: []Message{
		{Role: "system", Parts: []Part{{Type: PartText, Text: "You are a careful assistant."}}},
		{Role: "user", Parts: []Part{{Type: PartText, Text: sb.String()}}},
	}}
	est := New(Options{}).Estimate(req, 0)
	return req, est.InputTokens
}

func TestBenchRequestSize(t *testing.T) {
	_, n := benchRequest(t)
	if n < 3950 || n > 4100 {
		t.Fatalf("bench prompt is %d tokens", n)
	}
}

// BenchmarkEstimate4kTokens estimates a 4,000-token prompt: "unseen" as a
// prompt not counted before (the text cache off), "repeated" as the same
// prompt again (from the text cache).
func BenchmarkEstimate4kTokens(b *testing.B) {
	req, n := benchRequest(b)
	benchTextCache(b, func(b *testing.B) {
		est := New(Options{})
		b.ReportAllocs()
		for b.Loop() {
			est.Estimate(req, 0)
		}
		b.ReportMetric(float64(n), "prompt_tokens")
	})
}

// benchTextCache runs bench as "unseen", with the o200k encoding's text
// cache off (benchmarks run one at a time, so nothing else counts
// meanwhile), and as "repeated", with it.
func benchTextCache(b *testing.B, bench func(*testing.B)) {
	enc := mustEncoding(b, EncodingO200k)
	texts := enc.texts
	b.Run("unseen", func(b *testing.B) {
		enc.texts = nil
		defer func() { enc.texts = texts }()
		bench(b)
	})
	b.Run("repeated", bench)
}

// BenchmarkParseOpenAIChat parses the body of `sluice bench gateway
// --process` (a 200-token message) on each path: the one-scan path
// ParseOpenAIChat takes, the two-pass encoding/json path it falls back to,
// and the level-by-level parser that names a bad body's problem.
func BenchmarkParseOpenAIChat(b *testing.B) {
	body := []byte(`{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"` +
		strings.Repeat("Say hello to Sluice in five words. ", 25) + `"}]}`)
	for _, p := range []struct {
		name  string
		parse func([]byte) (Request, bool)
	}{
		{"scan", parseOpenAIChatScan},
		{"decode", parseOpenAIChatFast},
		{"levels", func(b []byte) (Request, bool) { r, err := parseOpenAIChat(b); return r, err == nil }},
	} {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := p.parse(body); !ok {
					b.Fatal("not parsed")
				}
			}
		})
	}
}

// BenchmarkEstimateBenchPrompt estimates the request of `sluice bench
// gateway --process` (a 200-token message whose words recur, as a
// deployment's do), unseen and repeated (benchTextCache).
func BenchmarkEstimateBenchPrompt(b *testing.B) {
	body := []byte(`{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"` +
		strings.Repeat("Say hello to Sluice in five words. ", 25) + `"}]}`)
	req, err := ParseOpenAIChat(body)
	if err != nil {
		b.Fatal(err)
	}
	benchTextCache(b, func(b *testing.B) {
		est := New(Options{})
		b.ReportAllocs()
		for b.Loop() {
			est.Estimate(req, 0)
		}
	})
}
