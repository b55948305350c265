package provider

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// FuzzClaudeRequest: the chat → Messages translation never panics; it
// refuses exactly when it does not build a body, and a body it builds is
// JSON with a positive max_tokens and only user and assistant turns.
func FuzzClaudeRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}],"max_tokens":8,"stop":["a","b"]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}]},
		  {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
		  {"role":"tool","tool_call_id":"c","content":"1"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto"}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"}}}}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"n":2,"logprobs":true,"temperature":3}`,
		`{"model":"m","messages":[],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false}`,
		`{"messages":[{"role":"developer","content":[{"type":"refusal","refusal":"no"}]}],"max_completion_tokens":-1}`,
		`[]`, `null`, `{"messages":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		why := claudeWhy(body)
		out, _, err := claudeRequestBody(body, "claude-sonnet-4-5", 2048)
		if (len(why) == 0) != (err == nil) {
			t.Fatalf("refusals %q but error %v", why, err)
		}
		if len(why) > claudeReasonsMax {
			t.Fatalf("%d reasons", len(why))
		}
		if err != nil {
			return
		}
		var r struct {
			MaxTokens int64 `json:"max_tokens"`
			Messages  []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if json.Unmarshal(out, &r) != nil || r.MaxTokens < 1 {
			t.Fatalf("translation %s", out)
		}
		for i, m := range r.Messages {
			if m.Role != "user" && m.Role != "assistant" || i > 0 && r.Messages[i-1].Role == m.Role {
				t.Fatalf("turns %s", out)
			}
		}
	})
}

// FuzzClaudeResponsesRequest: the Responses → Messages translation never
// panics and refuses exactly when it builds no body; a body it builds is
// JSON with a positive max_tokens.
func FuzzClaudeResponsesRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","instructions":"be brief","input":"hi","max_output_tokens":8}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image","image_url":"data:image/png;base64,AA"}]},
		  {"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"1"}],
		  "tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"}}`,
		`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}}}}`,
		`{"model":"m","input":[{"type":"reasoning"}],"previous_response_id":"r","truncation":"auto"}`,
		`{"input":[{"type":"message","role":"system","content":null}],"text":{"verbosity":"low","format":{"type":"json_object"}}}`,
		`[]`, `{"input":7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		why := claudeResponsesWhy(body)
		out, _, err := claudeResponsesBody(body, "claude-sonnet-4-5", 2048)
		if (len(why) == 0) != (err == nil) || len(why) > claudeReasonsMax {
			t.Fatalf("refusals %q but error %v", why, err)
		}
		if err != nil {
			return
		}
		var r struct {
			MaxTokens int64 `json:"max_tokens"`
		}
		if json.Unmarshal(out, &r) != nil || r.MaxTokens < 1 {
			t.Fatalf("translation %s", out)
		}
	})
}

// FuzzClaudeAnswer: a translated Messages answer is always JSON.
func FuzzClaudeAnswer(f *testing.F) {
	_, body := loadResponse(f, "anthropic_messages_200.http")
	f.Add(body, false)
	f.Add([]byte(`{"type":"message","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":[1]}}],"stop_reason":"tool_use"}`), true)
	f.Add([]byte(`{"type":"message","content":[{"type":"tool_use","input":null}],"usage":{"input_tokens":-3}}`), false)
	f.Fuzz(func(t *testing.T, body []byte, jsonTool bool) {
		for _, api := range []API{APIChat, APIResponses} {
			a := Exchange{Kind: schemas.ProviderAnthropic, API: api, jsonTool: jsonTool}.Answer(body, "m", "r")
			if a.Translated && !json.Valid(a.Body) {
				t.Fatalf("translation is not JSON: %s", a.Body)
			}
		}
	})
}

// FuzzClaudeStream: whatever Anthropic events arrive, the client gets
// well-formed chat.completion.chunk SSE (data: JSON or [DONE]) and
// nothing after [DONE]; or, for the Responses API, named events with
// JSON data, nothing after the final one.
func FuzzClaudeStream(f *testing.F) {
	for _, ev := range loadSSE(f, "anthropic_stream.sse") {
		f.Add(string(ev.event), ev.data, false, true)
	}
	f.Add("content_block_start", []byte(`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"t","name":"f"}}`), false, false)
	f.Add("", []byte(`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\""}}`), true, false)
	f.Add("error", []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), false, true)
	f.Fuzz(func(t *testing.T, event string, data []byte, jsonTool, includeUsage bool) {
		s := Exchange{Kind: schemas.ProviderAnthropic, API: APIChat, jsonTool: jsonTool}.NewStream("m", "r", includeUsage)
		var out []byte
		for _, ev := range [][2][]byte{
			{[]byte("message_start"), []byte(`{"type":"message_start","message":{"usage":{"input_tokens":1}}}`)},
			{[]byte(event), data}, {[]byte(event), data},
			{[]byte("message_stop"), []byte(`{"type":"message_stop"}`)},
			{[]byte(event), data},
		} {
			out = append(out, s.Event(ev[0], ev[1], nil)...)
		}
		done := false
		for _, e := range bytes.SplitAfter(out, []byte("\n\n")) {
			if len(e) == 0 {
				continue
			}
			d, ok := bytes.CutPrefix(bytes.TrimSuffix(e, []byte("\n\n")), []byte("data: "))
			switch {
			case !ok || done:
				t.Fatalf("translated stream %q", out)
			case bytes.Equal(d, []byte("[DONE]")):
				done = true
			case !json.Valid(d):
				t.Fatalf("chunk is not JSON: %q", d)
			}
		}
		if u, _ := s.Usage(); u.InputTokens < 0 || u.OutputTokens < 0 {
			t.Fatalf("bad usage %+v", u)
		}
		r := Exchange{Kind: schemas.ProviderAnthropic, API: APIResponses, jsonTool: jsonTool}.NewStream("m", "r", includeUsage)
		out = out[:0]
		for _, ev := range [][2][]byte{
			{[]byte("message_start"), []byte(`{"type":"message_start","message":{"usage":{"input_tokens":1}}}`)},
			{[]byte(event), data}, {[]byte(event), data},
			{[]byte("message_stop"), []byte(`{"type":"message_stop"}`)},
			{[]byte(event), data},
		} {
			out = append(out, r.Event(ev[0], ev[1], nil)...)
		}
		ended := false
		for _, e := range bytes.SplitAfter(out, []byte("\n\n")) {
			if len(e) == 0 {
				continue
			}
			name, d, ok := bytes.Cut(bytes.TrimSuffix(e, []byte("\n\n")), []byte("\ndata: "))
			name, named := bytes.CutPrefix(name, []byte("event: "))
			if !ok || !named || ended || !json.Valid(d) {
				t.Fatalf("translated Responses stream %q", out)
			}
			ended = bytes.Equal(name, []byte("response.completed")) || bytes.Equal(name, []byte("response.incomplete")) || bytes.Equal(name, []byte("error"))
		}
	})
}
