package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestOpenAIStreaming(t *testing.T) {
	cases := []struct {
		name         string
		path         string
		includeUsage bool
		maxTokens    int
		output       string
		wantTokens   int64
		wantFinish   string
	}{
		{"openai with include_usage", pOpenAI, true, 100, "10", 10, "stop"},
		{"openai without usage", pOpenAI, false, 100, "10", 10, "stop"},
		{"openai truncated at max_tokens", pOpenAI, true, 6, "50", 6, "length"},
		{"plain /v1 alias", "/v1/chat/completions", true, 100, "9", 9, "stop"},
		{"azure", pAzure, true, 100, "10", 10, "stop"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSim(t, func(c *Config) {
				setLimits(c, OpenAI, Limits{RPM: 60, TPM: 6000})
				setLimits(c, Azure, Limits{RPM: 60, TPM: 6000})
			})
			body := openAIBody("gpt-4o-mini", "hello world!", tc.maxTokens)
			body["stream"] = true
			if tc.includeUsage {
				body["stream_options"] = map[string]any{"include_usage": true}
			}
			rec := do(t, s, "POST", tc.path, body, HeaderOutputTokens, tc.output)
			if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%d %v", rec.Code, rec.Header())
			}
			if rec.Header().Get("x-ratelimit-remaining-requests") != "59" {
				t.Fatalf("stream lacks rate-limit headers: %v", rec.Header())
			}
			evs := sseEvents(t, rec.Body.String())
			if last := evs[len(evs)-1]; last[1] != "[DONE]" {
				t.Fatalf("last event %q", last[1])
			}
			var text strings.Builder
			var finish string
			var usage map[string]any
			for i, ev := range evs[:len(evs)-1] {
				var c map[string]any
				if err := json.Unmarshal([]byte(ev[1]), &c); err != nil {
					t.Fatalf("chunk %d: %v", i, err)
				}
				if c["object"] != "chat.completion.chunk" {
					t.Fatalf("chunk %d object %v", i, c["object"])
				}
				u, hasUsage := c["usage"]
				if hasUsage != tc.includeUsage {
					t.Fatalf("chunk %d: usage key present=%v, include_usage=%v", i, hasUsage, tc.includeUsage)
				}
				choices := c["choices"].([]any)
				if len(choices) == 0 { // the include_usage chunk
					if i != len(evs)-2 || u == nil {
						t.Fatalf("empty-choices chunk %d must be last and carry usage", i)
					}
					usage = u.(map[string]any)
					continue
				}
				if u != nil {
					t.Fatalf("chunk %d: usage must be null before the final chunk", i)
				}
				if i == 0 && path(t, choices, 0, "delta", "role") != "assistant" {
					t.Fatalf("first chunk delta %v", choices[0])
				}
				if s, ok := path(t, choices, 0, "delta", "content").(string); ok {
					text.WriteString(s)
				}
				if f, ok := path(t, choices, 0, "finish_reason").(string); ok {
					finish = f
				}
			}
			if finish != tc.wantFinish {
				t.Fatalf("finish_reason %q, want %q", finish, tc.wantFinish)
			}
			if int64(text.Len()) != 4*tc.wantTokens {
				t.Fatalf("streamed %d bytes, want %d", text.Len(), 4*tc.wantTokens)
			}
			if tc.includeUsage {
				if usage["completion_tokens"] != float64(tc.wantTokens) || usage["prompt_tokens"] != float64(helloTokens) ||
					usage["total_tokens"] != float64(helloTokens+tc.wantTokens) {
					t.Fatalf("usage %v", usage)
				}
			}
			prov := OpenAI
			if tc.path == pAzure {
				prov = Azure
			}
			if st := s.Stats().Providers[prov]; st.Streams != 1 || st.Tokens.Output != tc.wantTokens {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestAnthropicStreaming(t *testing.T) {
	s, _ := newSim(t, func(c *Config) { setLimits(c, Anthropic, Limits{RPM: 60, ITPM: 1000, OTPM: 1000}) })
	body := anthropicBody("claude-sonnet-4-5", "hello world!", 100)
	body["stream"] = true
	rec := do(t, s, "POST", pAnthropic, body, HeaderOutputTokens, "10")
	if rec.Code != 200 || rec.Header().Get("anthropic-ratelimit-requests-remaining") != "59" {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	evs := sseEvents(t, rec.Body.String())
	var names []string
	var text strings.Builder
	for _, ev := range evs {
		names = append(names, ev[0])
		var d map[string]any
		if err := json.Unmarshal([]byte(ev[1]), &d); err != nil {
			t.Fatal(err)
		}
		if d["type"] != ev[0] {
			t.Fatalf("event %s has data type %v", ev[0], d["type"])
		}
		switch ev[0] {
		case "message_start":
			if path(t, d, "message", "usage", "input_tokens") != float64(helloTokens) {
				t.Fatalf("message_start usage %v", d)
			}
		case "content_block_delta":
			if path(t, d, "delta", "type") != "text_delta" {
				t.Fatalf("delta %v", d)
			}
			text.WriteString(path(t, d, "delta", "text").(string))
		case "message_delta":
			if path(t, d, "delta", "stop_reason") != "end_turn" || path(t, d, "usage", "output_tokens") != 10.0 {
				t.Fatalf("message_delta %v", d)
			}
		}
	}
	want := "message_start content_block_start ping content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("events:\n%s\nwant\n%s", got, want)
	}
	if text.Len() != 40 {
		t.Fatalf("text %q", text.String())
	}
	// Non-streaming shape with a max_tokens stop.
	rec = do(t, s, "POST", pAnthropic, anthropicBody("claude-sonnet-4-5", "hello world!", 5), HeaderOutputTokens, "50")
	b := decode(t, rec)
	if b["type"] != "message" || b["stop_reason"] != "max_tokens" || path(t, b, "usage", "output_tokens") != 5.0 ||
		path(t, b, "content", 0, "type") != "text" {
		t.Fatalf("message %v", b)
	}
}

func TestGeminiStreaming(t *testing.T) {
	for _, sse := range []bool{true, false} {
		name := "json array"
		p := "/gemini/v1beta/models/gemini-2.0-flash:streamGenerateContent"
		if sse {
			name, p = "alt=sse", p+"?alt=sse"
		}
		t.Run(name, func(t *testing.T) {
			s, _ := newSim(t, nil)
			rec := do(t, s, "POST", p, geminiBody("hello world!", 100), HeaderOutputTokens, "10")
			if rec.Code != 200 {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			var chunks []map[string]any
			if sse {
				for _, ev := range sseEvents(t, rec.Body.String()) {
					var c map[string]any
					if err := json.Unmarshal([]byte(ev[1]), &c); err != nil {
						t.Fatal(err)
					}
					chunks = append(chunks, c)
				}
			} else if err := json.Unmarshal(rec.Body.Bytes(), &chunks); err != nil {
				t.Fatalf("not a JSON array: %v\n%s", err, rec.Body)
			}
			if len(chunks) != 3 {
				t.Fatalf("%d chunks", len(chunks))
			}
			var text strings.Builder
			for i, c := range chunks {
				text.WriteString(path(t, c, "candidates", 0, "content", "parts", 0, "text").(string))
				_, hasFinish := path(t, c, "candidates", 0).(map[string]any)["finishReason"]
				if hasFinish != (i == len(chunks)-1) {
					t.Fatalf("chunk %d finishReason presence %v", i, hasFinish)
				}
			}
			last := chunks[len(chunks)-1]
			um := path(t, last, "usageMetadata").(map[string]any)
			if um["promptTokenCount"] != float64(helloTokens) || um["candidatesTokenCount"] != 10.0 || um["totalTokenCount"] != float64(helloTokens+10) {
				t.Fatalf("usageMetadata %v", um)
			}
			if path(t, last, "candidates", 0, "finishReason") != "STOP" || text.Len() != 40 {
				t.Fatalf("last %v text %d", last, text.Len())
			}
		})
	}
	t.Run("non-streaming MAX_TOKENS", func(t *testing.T) {
		s, _ := newSim(t, nil)
		rec := do(t, s, "POST", pGemini, geminiBody("hello world!", 8), HeaderOutputTokens, "100")
		b := decode(t, rec)
		if path(t, b, "candidates", 0, "finishReason") != "MAX_TOKENS" || path(t, b, "usageMetadata", "candidatesTokenCount") != 8.0 {
			t.Fatalf("%v", b)
		}
	})
}

// TestStreamOverHTTP runs a stream over a real connection and checks that
// chunks are flushed as they are produced.
func TestStreamOverHTTP(t *testing.T) {
	gate := make(chan struct{})
	s, _ := newSim(t, func(c *Config) {
		c.Latency.PerOutputToken = Duration(time.Millisecond)
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			if d > 0 { // per-token sleeps wait for the test to read the first chunk
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}
	})
	ts := httptest.NewServer(s)
	defer ts.Close()
	body := `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello world!"}],"max_tokens":100}`
	req, _ := http.NewRequest("POST", ts.URL+"/openai/v1/chat/completions", strings.NewReader(body))
	req.Header.Set(HeaderOutputTokens, "12")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	// Role chunk and first content chunk arrive before the gate opens.
	for range 2 {
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: {") {
			t.Fatalf("%q %v", line, err)
		}
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || !strings.Contains(string(rest), `"completion_tokens":12`) {
		t.Fatalf("rest: %s", rest)
	}
}

func TestClientDisconnectMidStream(t *testing.T) {
	calls := 0
	s, _ := newSim(t, func(c *Config) {
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			calls++
			if calls > 2 { // TTFT, first per-chunk sleep, then the client is gone
				return context.Canceled
			}
			return nil
		}
	})
	body := anthropicBody("claude-sonnet-4-5", "hello world!", 100)
	body["stream"] = true
	rec := do(t, s, "POST", pAnthropic, body, HeaderOutputTokens, "20")
	if rec.Code != 200 {
		t.Fatal(rec.Code)
	}
	st := s.Stats().Providers[Anthropic]
	if st.Cancelled != 1 || st.OK != 0 || st.Tokens.Output != 8 || st.CancelledTokens != st.Tokens.Input+8 {
		t.Fatalf("stats %+v: want the cancelled call's input and its 8 output tokens as cancelled_tokens", st)
	}
}
