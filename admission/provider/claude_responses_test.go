package provider

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestClaudeResponsesRequest: Responses API requests as the Messages body
// they become.
func TestClaudeResponsesRequest(t *testing.T) {
	const user = `{"role":"user","content":[{"type":"text","text":"hi"}]}`
	tests := []struct {
		name, in, want string
		jsonTool       bool
	}{
		{"a string input with instructions", `{"model":"m","instructions":"be brief","input":"hi","max_output_tokens":9,"temperature":0.3}`,
			`{"model":"claude-sonnet-4-5","max_tokens":9,"temperature":0.3,"system":[{"type":"text","text":"be brief"}],"messages":[` + user + `]}`, false},
		{"items: messages, a function call and its output", `{"model":"m","input":[{"role":"developer","content":"d"},
			{"type":"message","role":"user","content":[{"type":"input_text","text":"weather?"},{"type":"input_image","image_url":"https://x/y.png"}]},
			{"type":"function_call","call_id":"call_1","name":"w","arguments":"{\"city\":\"Oslo\"}"},
			{"type":"function_call_output","call_id":"call_1","output":"snow"},
			{"type":"reasoning","id":"rs_1","summary":[]},
			{"role":"assistant","content":[{"type":"output_text","text":"It snows."}]}],
			"tools":[{"type":"function","name":"w","description":"weather","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"w"}}`,
			`{"model":"claude-sonnet-4-5","max_tokens":4096,"system":[{"type":"text","text":"d"}],"messages":[
			{"role":"user","content":[{"type":"text","text":"weather?"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]},
			{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"w","input":{"city":"Oslo"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"snow"}]}]},
			{"role":"assistant","content":[{"type":"text","text":"It snows."}]}],
			"tools":[{"name":"w","description":"weather","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"w"}}`, false},
		{"text.format json_schema as a forced tool", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"p","schema":{"type":"object"},"strict":true}}}`,
			`{"model":"claude-sonnet-4-5","max_tokens":4096,"messages":[` + user + `],
			"tools":[{"name":"p","description":"Answer with a JSON object that follows this schema.","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"p"}}`, true},
		{"defaults of refused fields are dropped", `{"model":"m","input":"hi","truncation":"disabled","reasoning":null,"include":[],"store":false,"metadata":{"a":"b"}}`,
			`{"model":"claude-sonnet-4-5","max_tokens":4096,"messages":[` + user + `]}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, jsonTool, err := claudeResponsesBody([]byte(tc.in), "claude-sonnet-4-5", 0)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, got, tc.want) || jsonTool != tc.jsonTool {
				t.Errorf("got  %s (json tool %v)\nwant %s (%v)", got, jsonTool, tc.want, tc.jsonTool)
			}
		})
	}
}

// TestClaudeResponsesRefusals: what does not translate, named by its
// Responses field.
func TestClaudeResponsesRefusals(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string
	}{
		{"stored state and background", `{"model":"m","input":"hi","previous_response_id":"resp_1","background":true,"store":true}`,
			[]string{"background (Anthropic Messages has no counterpart)", "previous_response_id (Anthropic Messages has no counterpart)", "store (Anthropic keeps no stored completions)"}},
		{"reasoning, include, truncation auto", `{"model":"m","input":"hi","reasoning":{"effort":"high"},"include":["reasoning.encrypted_content"],"truncation":"auto"}`,
			[]string{"include (Anthropic Messages has no counterpart)", "reasoning (Anthropic Messages has no counterpart)", "truncation (Anthropic Messages has no counterpart)"}},
		{"built-in tools", `{"model":"m","input":"hi","tools":[{"type":"web_search"}]}`, []string{`tools[0] of type "web_search" (only function tools translate)`}},
		{"a file part, named by its input item", `{"model":"m","input":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`,
			[]string{"input_file content (input[1].content[0])"}},
		{"an item type", `{"model":"m","input":[{"type":"item_reference","id":"x"}]}`, []string{`input[0] of type "item_reference"`}},
		{"an unknown field", `{"model":"m","input":"hi","messages":[]}`, []string{"the field messages (not a Responses API parameter the translation knows)"}},
		{"verbosity", `{"model":"m","input":"hi","text":{"verbosity":"low"}}`, []string{`text.verbosity "low" (Anthropic Messages has no counterpart)`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := claudeResponsesWhy([]byte(tc.in)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestClaudeResponsesAnswer: a Messages response as the response object.
func TestClaudeResponsesAnswer(t *testing.T) {
	const usage = `"usage":{"input_tokens":10,"cache_read_input_tokens":4,"output_tokens":5}`
	const rusage = `"usage":{"input_tokens":14,"input_tokens_details":{"cached_tokens":4},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":19}`
	head := `{"id":"resp_r1","object":"response","created_at":0,"error":null,"model":"gpt-public","parallel_tool_calls":true,"tool_choice":"auto","tools":[],`
	tests := []struct {
		name, in string
		jsonTool bool
		want     string
	}{
		{"text", `{"type":"message","content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn",` + usage + `}`, false,
			head + `"status":"completed","incomplete_details":null,"output":[{"id":"msg_r1","type":"message","status":"completed","role":"assistant",
			"content":[{"type":"output_text","text":"Hello","annotations":[]}]}],` + rusage + `}`},
		{"max_tokens is incomplete", `{"type":"message","content":[{"type":"text","text":"Hel"}],"stop_reason":"max_tokens",` + usage + `}`, false,
			head + `"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"id":"msg_r1","type":"message","status":"completed","role":"assistant",
			"content":[{"type":"output_text","text":"Hel","annotations":[]}]}],` + rusage + `}`},
		{"tool_use is a function_call", `{"type":"message","content":[{"type":"tool_use","id":"toolu_1","name":"w","input":{"city":"Oslo"}}],"stop_reason":"tool_use",` + usage + `}`, false,
			head + `"status":"completed","incomplete_details":null,"output":[{"id":"fc_toolu_1","type":"function_call","status":"completed","call_id":"toolu_1","name":"w",
			"arguments":"{\"city\":\"Oslo\"}"}],` + rusage + `}`},
		{"the forced json tool is the text", `{"type":"message","content":[{"type":"tool_use","id":"toolu_1","name":"p","input":{"a":1}}],"stop_reason":"tool_use",` + usage + `}`, true,
			head + `"status":"completed","incomplete_details":null,"output":[{"id":"msg_r1","type":"message","status":"completed","role":"assistant",
			"content":[{"type":"output_text","text":"{\"a\":1}","annotations":[]}]}],` + rusage + `}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Exchange{Kind: schemas.ProviderAnthropic, API: APIResponses, jsonTool: tc.jsonTool}.Answer([]byte(tc.in), "gpt-public", "r1")
			if !a.Translated || !jsonEqual(t, a.Body, tc.want) {
				t.Errorf("got  %s\nwant %s", a.Body, tc.want)
			}
		})
	}
}

// TestClaudeResponsesStream: Anthropic events as the Responses events, in
// order, numbered, and ending with the response and its usage.
func TestClaudeResponsesStream(t *testing.T) {
	start := `{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}`
	evs := [][2]string{
		{"message_start", start},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":1}`},
		{"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"w","input":{}}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":2}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":6}}`},
		{"message_stop", `{"type":"message_stop"}`},
	}
	s := Exchange{Kind: schemas.ProviderAnthropic, API: APIResponses}.NewStream("gpt-public", "r1", false)
	var out strings.Builder
	for _, ev := range evs {
		out.Write(s.Event([]byte(ev[0]), []byte(ev[1]), nil))
	}
	var names []string
	for _, block := range strings.Split(strings.TrimSpace(out.String()), "\n\n") {
		name, _, _ := strings.Cut(strings.TrimPrefix(block, "event: "), "\n")
		names = append(names, name)
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done",
		"response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("events %q\nwant %q", names, want)
	}
	got := out.String()
	for _, s := range []string{`"sequence_number":12`, `"output_index":1,"sequence_number":10,"type":"response.function_call_arguments.done"`,
		`"status":"completed"`, `"output_tokens":6`, `"input_tokens":10`, `"call_id":"toolu_1"`, `"text":"Hi"`} {
		if !strings.Contains(got, s) {
			t.Errorf("stream lacks %s:\n%s", s, got)
		}
	}
	// An error event ends it in the Responses API's shape.
	s = Exchange{Kind: schemas.ProviderAnthropic, API: APIResponses}.NewStream("m", "r", false)
	s.Event([]byte("message_start"), []byte(start), nil)
	e := string(s.Event([]byte("error"), []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), nil))
	if !strings.HasPrefix(e, "event: error\ndata: ") || !strings.Contains(e, `"code":"overloaded_error"`) || !strings.Contains(e, `"message":"Overloaded"`) {
		t.Errorf("error event %q", e)
	}
}
