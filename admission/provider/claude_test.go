package provider

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// jsonEqual compares two JSON texts as values.
func jsonEqual(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want: %v\n%s", err, want)
	}
	return reflect.DeepEqual(g, w)
}

// TestClaudeRequest: each OpenAI chat feature as the Messages body it
// becomes.
func TestClaudeRequest(t *testing.T) {
	const hi = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, in, want string
		jsonTool       bool
	}{
		{"plain text, default max_tokens", `{"model":"claude",` + hi + `}`,
			`{"model":"claude-sonnet-4-5","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, false},
		{"max_completion_tokens wins over max_tokens", `{"model":"m","max_tokens":5,"max_completion_tokens":7,` + hi + `}`,
			`{"model":"claude-sonnet-4-5","max_tokens":7,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, false},
		{"system and developer into system, in order", `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"be brief"},
			{"role":"user","content":"hi"},{"role":"developer","content":[{"type":"text","text":"in French"}]}]}`,
			`{"model":"claude-sonnet-4-5","max_tokens":5,"system":[{"type":"text","text":"be brief"},{"type":"text","text":"in French"}],
			"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, false},
		{"sampling, stop, stream, user", `{"model":"m","max_tokens":5,"temperature":0.5,"top_p":0.9,"stop":"END","stream":true,
			"stream_options":{"include_usage":true},"user":"u-1","metadata":{"k":"v"},"n":1,"logprobs":false,` + hi + `}`,
			`{"model":"claude-sonnet-4-5","max_tokens":5,"temperature":0.5,"top_p":0.9,"stop_sequences":["END"],"stream":true,
			"metadata":{"user_id":"u-1"},"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`, false},
		{"tools, required, no parallel calls", `{"model":"m","max_tokens":5,"tools":[{"type":"function","function":{"name":"f","description":"d",
			"parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}},{"type":"function","function":{"name":"g"}}],
			"tool_choice":"required","parallel_tool_calls":false,` + hi + `}`,
			`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
			"tools":[{"name":"f","description":"d","input_schema":{"type":"object","properties":{"x":{"type":"integer"}}}},
			{"name":"g","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"any","disable_parallel_tool_use":true}}`, false},
		{"named tool choice", `{"model":"m","max_tokens":5,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
			"tool_choice":{"type":"function","function":{"name":"f"}},` + hi + `}`,
			`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
			"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"}}`, false},
		{"tool calls and results, merged turns", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"weather?"},
			{"role":"assistant","content":"Let me look.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"call_2","type":"function","function":{"name":"w","arguments":""}}]},
			{"role":"tool","tool_call_id":"call_1","content":"sunny"},{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"rain"}]},
			{"role":"user","content":"thanks"}]}`,
			`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"weather?"}]},
			{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"call_1","name":"w","input":{"city":"Paris"}},
			{"type":"tool_use","id":"call_2","name":"w","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"sunny"}]},
			{"type":"tool_result","tool_use_id":"call_2","content":[{"type":"text","text":"rain"}]},{"type":"text","text":"thanks"}]}]}`, false},
		{"images by URL and data URL", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"what?"},
			{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"high"}},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}}]}]}`,
			`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"what?"},
			{"type":"image","source":{"type":"url","url":"https://x/y.png"}},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}]}]}`, false},
		{"json_schema as a forced tool", `{"model":"m","max_tokens":5,"response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,
			"schema":{"type":"object","properties":{"name":{"type":"string"}}}}},` + hi + `}`,
			`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
			"tools":[{"name":"person","description":"Answer with a JSON object that follows this schema.","input_schema":{"type":"object","properties":{"name":{"type":"string"}}}}],
			"tool_choice":{"type":"tool","name":"person"}}`, true},
		{"json_object as a forced tool", `{"model":"m","max_tokens":5,"response_format":{"type":"json_object"},` + hi + `}`,
			`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
			"tools":[{"name":"json_response","description":"Answer with a JSON object.","input_schema":{"type":"object"}}],
			"tool_choice":{"type":"tool","name":"json_response"}}`, true},
		{"a user turn between calls and results goes after the results", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},
			{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},
			{"role":"user","content":"wait"},{"role":"tool","tool_call_id":"c","content":"1"}]}`,
			`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},
			{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"f","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":[{"type":"text","text":"1"}]},{"type":"text","text":"wait"}]}]}`, false},
		{"empty assistant content dropped", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":""},{"role":"user","content":"b"}]}`,
			`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, jsonTool, err := claudeRequestBody([]byte(tc.in), "claude-sonnet-4-5", 0)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, got, tc.want) || jsonTool != tc.jsonTool {
				t.Errorf("got  %s (json tool %v)\nwant %s (%v)", got, jsonTool, tc.want, tc.jsonTool)
			}
		})
	}
}

// TestClaudeRefusals: what does not translate is refused with a reason
// naming the field.
func TestClaudeRefusals(t *testing.T) {
	const hi = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, in string
		want     []string
	}{
		{"n", `{"model":"m","n":3,` + hi + `}`, []string{"n > 1 (n = 3; Anthropic returns one message)"}},
		{"logprobs and top_logprobs", `{"model":"m","logprobs":true,"top_logprobs":2,` + hi + `}`,
			[]string{"logprobs (Anthropic Messages has no counterpart)", "top_logprobs (Anthropic Messages has no counterpart)"}},
		{"audio output", `{"model":"m","modalities":["text","audio"],"audio":{"voice":"alloy","format":"wav"},` + hi + `}`,
			[]string{"audio (Anthropic Messages has no counterpart)", "modalities (Anthropic Messages has no counterpart)"}},
		{"penalties, seed, logit_bias", `{"model":"m","presence_penalty":0.5,"frequency_penalty":0,"seed":7,"logit_bias":{"50256":-100},` + hi + `}`,
			[]string{"logit_bias (Anthropic Messages has no counterpart)", "presence_penalty (Anthropic Messages has no counterpart)", "seed (Anthropic Messages has no counterpart)"}},
		{"unknown field", `{"model":"m","guided_json":{},` + hi + `}`, []string{"the field guided_json (not a chat completions parameter the translation knows)"}},
		{"temperature above 1", `{"model":"m","temperature":1.5,` + hi + `}`,
			[]string{"temperature 1.5 (Anthropic accepts 0 to 1, OpenAI 0 to 2; the scales are not the same)"}},
		{"legacy functions", `{"model":"m","functions":[{"name":"f"}],` + hi + `}`, []string{"functions (Anthropic Messages has no counterpart)"}},
		{"non-function tool", `{"model":"m","tools":[{"type":"custom","custom":{"name":"x"}}],` + hi + `}`, []string{`tools[0] of type "custom" (only function tools translate)`}},
		{"tools with response_format", `{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"response_format":{"type":"json_object"},` + hi + `}`,
			[]string{`response_format "json_object" together with tools (the translation forces a tool to honour response_format)`}},
		{"array schema", `{"model":"m","response_format":{"type":"json_schema","json_schema":{"name":"l","schema":{"type":"array"}}},` + hi + `}`,
			[]string{"response_format.json_schema.schema that is not an object schema (Anthropic tool input is an object)"}},
		{"audio input", `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`,
			[]string{"input_audio content (messages[0].content[0])"}},
		{"file input", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"f"}}]}]}`,
			[]string{"file content (messages[0].content[0])"}},
		{"image in a system message", `{"model":"m","messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x"}}]},{"role":"user","content":"hi"}]}`,
			[]string{"image_url content (messages[0].content[0])"}},
		{"bad tool arguments", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]},
			{"role":"tool","tool_call_id":"c","content":"1"}]}`, []string{"messages[1].tool_calls[0].function.arguments that are not a JSON object"}},
		{"function role", `{"model":"m","messages":[{"role":"function","name":"f","content":"1"}]}`,
			[]string{"a function message (messages[0]; legacy function calling, use tools)"}},
		{"store and service tier", `{"model":"m","store":true,"service_tier":"flex",` + hi + `}`,
			[]string{"store (Anthropic keeps no stored completions)", `service_tier "flex" (only auto or default translate)`}},
		{"allowed_tools choice", `{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools"},` + hi + `}`,
			[]string{`tool_choice {"type":"allowed_tools"} (only none, auto, required or a named function translate)`}},
		{"not an object", `[1]`, []string{"a body that is not a JSON object"}},
		{"legacy function_call in a message", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","function_call":{"name":"f","arguments":"{}"}}]}`,
			[]string{"messages[1].function_call (legacy function calling, use tools)"}},
		{"custom tool call", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"g","input":"y"}}]}]}`,
			[]string{`messages[1].tool_calls[0] of type "custom" (only function tool calls translate)`}},
		{"assistant audio", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","audio":{"id":"a1"}}]}`,
			[]string{"audio in messages[1]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := claudeWhy([]byte(tc.in))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			if _, _, err := claudeRequestBody([]byte(tc.in), "m", 0); err == nil {
				t.Error("claudeRequestBody translated what claudeWhy refuses")
			}
		})
	}
}

// TestClaudeMaxTokens: the route's default output, bounded by the
// model's maximum output.
func TestClaudeMaxTokens(t *testing.T) {
	tests := []struct {
		model        string
		routeDefault int64
		want         int64
	}{
		{"claude-sonnet-4-5-20250929", 0, 4096},
		{"claude-sonnet-4-5-20250929", 100_000, 64000},
		{"claude-opus-4-1", 50_000, 32000},
		{"claude-opus-4-5", 50_000, 50_000},
		{"claude-3-5-haiku-latest", 10_000, 8192},
		{"anthropic.claude-3-haiku-20240307-v1:0", 8192, 4096},
		{"claude-next", 9000, claudeMaxTokensFallback},
		{"CLAUDE-3-7-SONNET", 20_000, 20_000},
	}
	for _, tc := range tests {
		if got := ClaudeMaxTokens(tc.model, tc.routeDefault); got != tc.want {
			t.Errorf("ClaudeMaxTokens(%q, %d) = %d, want %d", tc.model, tc.routeDefault, got, tc.want)
		}
	}
}

// TestClaudeAnswer: a Messages response as the chat.completion the client
// gets.
func TestClaudeAnswer(t *testing.T) {
	const usage = `"usage":{"input_tokens":10,"cache_read_input_tokens":4,"cache_creation_input_tokens":2,"output_tokens":5}`
	const chatUsage = `"usage":{"prompt_tokens":16,"completion_tokens":5,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":4}}`
	head := `{"id":"chatcmpl-r1","object":"chat.completion","created":0,"model":"gpt-public","choices":[{"index":0,"logprobs":null,`
	tests := []struct {
		name, in string
		jsonTool bool
		want     string
	}{
		{"text, end_turn", `{"type":"message","content":[{"type":"text","text":"Hel"},{"type":"thinking","thinking":"hmm"},{"type":"text","text":"lo"}],"stop_reason":"end_turn",` + usage + `}`, false,
			head + `"message":{"role":"assistant","content":"Hello","refusal":null},"finish_reason":"stop"}],` + chatUsage + `}`},
		{"max_tokens is length", `{"type":"message","content":[{"type":"text","text":"x"}],"stop_reason":"max_tokens",` + usage + `}`, false,
			head + `"message":{"role":"assistant","content":"x","refusal":null},"finish_reason":"length"}],` + chatUsage + `}`},
		{"stop_sequence is stop", `{"type":"message","content":[{"type":"text","text":"x"}],"stop_reason":"stop_sequence",` + usage + `}`, false,
			head + `"message":{"role":"assistant","content":"x","refusal":null},"finish_reason":"stop"}],` + chatUsage + `}`},
		{"tool_use is tool_calls", `{"type":"message","content":[{"type":"tool_use","id":"toolu_1","name":"w","input":{"city":"Paris"}}],"stop_reason":"tool_use",` + usage + `}`, false,
			head + `"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}],` + chatUsage + `}`},
		{"the forced json tool is the content", `{"type":"message","content":[{"type":"tool_use","id":"toolu_1","name":"person","input":{"name":"Ada"}}],"stop_reason":"tool_use",` + usage + `}`, true,
			head + `"message":{"role":"assistant","content":"{\"name\":\"Ada\"}","refusal":null},"finish_reason":"stop"}],` + chatUsage + `}`},
		{"refusal is content_filter", `{"type":"message","content":[],"stop_reason":"refusal"}`, false,
			head + `"message":{"role":"assistant","content":"","refusal":null},"finish_reason":"content_filter"}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := Exchange{Kind: schemas.ProviderAnthropic, API: APIChat, jsonTool: tc.jsonTool}
			a := x.Answer([]byte(tc.in), "gpt-public", "r1")
			if !a.Translated || !jsonEqual(t, a.Body, tc.want) {
				t.Errorf("got  %s\nwant %s", a.Body, tc.want)
			}
		})
	}
	// Usage is Anthropic's, whatever the client's API.
	x := Exchange{Kind: schemas.ProviderAnthropic, API: APIChat}
	if a := x.Answer([]byte(`{"type":"message","content":[],`+usage+`}`), "m", "r"); a.Usage != (Usage{InputTokens: 16, CachedInputTokens: 4, CacheWriteInputTokens: 2, OutputTokens: 5}) {
		t.Errorf("usage %+v", a.Usage)
	}
	if a := x.Answer([]byte(`not json`), "m", "r"); a.Translated || string(a.Body) != "not json" {
		t.Errorf("a body that does not parse: %+v", a)
	}
	// The Messages API passes through.
	msg := []byte(`{"type":"message","content":[],` + usage + `}`)
	if a := (Exchange{Kind: schemas.ProviderAnthropic, API: APIMessages}).Answer(msg, "m", "r"); a.Translated || !bytes.Equal(a.Body, msg) {
		t.Errorf("messages passthrough: %+v", a)
	}
}

// claudeSSE is one Anthropic event of a test stream.
type claudeSSE struct{ event, data string }

func claudeEvents(jsonTool, includeUsage bool, evs []claudeSSE) (string, *Stream) {
	x := Exchange{Kind: schemas.ProviderAnthropic, API: APIChat, jsonTool: jsonTool}
	s := x.NewStream("gpt-public", "r1", includeUsage)
	var out strings.Builder
	for _, ev := range evs {
		raw := "event: " + ev.event + "\ndata: " + ev.data + "\n\n"
		out.Write(s.Event([]byte(ev.event), []byte(ev.data), []byte(raw)))
	}
	out.Write(s.Tail())
	return out.String(), s
}

// chunkOf is one chat.completion.chunk line in the translated stream.
func chunkOf(choices, usage string) string {
	c := `{"id":"chatcmpl-r1","object":"chat.completion.chunk","created":0,"model":"gpt-public","choices":` + choices
	if usage != "" {
		c += `,"usage":` + usage
	}
	return "data: " + c + "}\n\n"
}

// TestClaudeStream: Anthropic SSE events as chat.completion.chunk events,
// with the usage chunk only when the client asked.
func TestClaudeStream(t *testing.T) {
	start := claudeSSE{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":10,"cache_read_input_tokens":4,"output_tokens":1}}}`}
	stop := func(reason string, out int) []claudeSSE {
		return []claudeSSE{
			{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"` + reason + `"},"usage":{"output_tokens":` + string(rune('0'+out)) + `}}`},
			{"message_stop", `{"type":"message_stop"}`},
		}
	}
	role := chunkOf(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, "")
	finish := func(fr string) string { return chunkOf(`[{"index":0,"delta":{},"finish_reason":"`+fr+`"}]`, "") }
	const usage = `{"prompt_tokens":14,"completion_tokens":3,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":4}}`
	text := append([]claudeSSE{start,
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{"ping", `{"type":"ping"}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}`},
	}, stop("end_turn", 3)...)
	tool := append([]claudeSSE{start,
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"w","input":{}}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`},
	}, stop("tool_use", 3)...)
	tests := []struct {
		name         string
		evs          []claudeSSE
		jsonTool     bool
		includeUsage bool
		want         string
	}{
		{"text without usage", text, false, false, role +
			chunkOf(`[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]`, "") +
			chunkOf(`[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]`, "") + finish("stop") + "data: [DONE]\n\n"},
		{"text with usage", text, false, true, role +
			chunkOf(`[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]`, "") +
			chunkOf(`[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]`, "") + finish("stop") + chunkOf(`[]`, usage) + "data: [DONE]\n\n"},
		{"tool call", tool, false, false, role +
			chunkOf(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"toolu_1","type":"function","function":{"arguments":"","name":"w"}}]},"finish_reason":null}]`, "") +
			chunkOf(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"finish_reason":null}]`, "") +
			chunkOf(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"finish_reason":null}]`, "") +
			finish("tool_calls") + "data: [DONE]\n\n"},
		{"the forced json tool streams content", tool, true, false, role +
			chunkOf(`[{"index":0,"delta":{"content":"{\"city\":"},"finish_reason":null}]`, "") +
			chunkOf(`[{"index":0,"delta":{"content":"\"Paris\"}"},"finish_reason":null}]`, "") + finish("stop") + "data: [DONE]\n\n"},
		{"max_tokens", append([]claudeSSE{start}, stop("max_tokens", 1)...), false, false, role + finish("length") + "data: [DONE]\n\n"},
		{"an error event", []claudeSSE{start, {"error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}}, false, false, role +
			`data: {"error":{"message":"Overloaded","type":"upstream_overloaded","code":"overloaded_error"}}` + "\n\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, s := claudeEvents(tc.jsonTool, tc.includeUsage, tc.evs)
			if got = canonicalSSE(t, got); got != canonicalSSE(t, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", got, canonicalSSE(t, tc.want))
			}
			if u, partial := s.Usage(); tc.name == "text with usage" && (partial || u.InputTokens != 14 || u.OutputTokens != 3) {
				t.Errorf("usage %+v partial %v", u, partial)
			}
		})
	}
}

// canonicalSSE re-encodes each data line's JSON as encoding/json writes
// it, so that wants can be written in any key order.
func canonicalSSE(t *testing.T, s string) string {
	t.Helper()
	var out strings.Builder
	for _, ev := range strings.SplitAfter(s, "\n\n") {
		d, ok := strings.CutPrefix(strings.TrimSuffix(ev, "\n\n"), "data: ")
		if !ok || d == "[DONE]" {
			out.WriteString(ev)
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(d), &v); err != nil {
			t.Fatalf("want is not JSON: %v\n%s", err, d)
		}
		out.WriteString("data: ")
		out.Write(mustJSON(t, v))
		out.WriteString("\n\n")
	}
	return out.String()
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
