package sim

import (
	"encoding/json"
	"strings"
	"testing"
)

func claudeWeatherTool() map[string]any {
	return map[string]any{"name": "get_weather", "description": "weather of a city", "input_schema": map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}}}
}

// TestAnthropicToolUse: offered tools are called (non-streaming and as
// input_json_delta events), tool_choice none is obeyed, and a
// conversation that ends with a tool result is answered in text.
func TestAnthropicToolUse(t *testing.T) {
	s, _ := newSim(t, nil)
	body := anthropicBody("claude-sonnet-4-5", "weather in Paris?", 100)
	body["tools"] = []any{claudeWeatherTool()}
	rec := do(t, s, "POST", pAnthropic, body)
	m := decode(t, rec)
	if rec.Code != 200 || m["stop_reason"] != "tool_use" || path(t, m, "content", 0, "type") != "tool_use" ||
		path(t, m, "content", 0, "name") != "get_weather" {
		t.Fatalf("%d %v", rec.Code, m)
	}
	if _, ok := path(t, m, "content", 0, "input", "city").(string); !ok {
		t.Fatalf("input does not follow the schema: %v", m)
	}
	id := path(t, m, "content", 0, "id").(string)

	body["stream"] = true
	rec = do(t, s, "POST", pAnthropic, body)
	var args strings.Builder
	stop := ""
	for _, ev := range sseEvents(t, rec.Body.String()) {
		var d map[string]any
		_ = json.Unmarshal([]byte(ev[1]), &d)
		switch ev[0] {
		case "content_block_start":
			if path(t, d, "content_block", "type") != "tool_use" {
				t.Fatalf("block %v", d)
			}
		case "content_block_delta":
			if path(t, d, "delta", "type") != "input_json_delta" {
				t.Fatalf("delta %v", d)
			}
			args.WriteString(path(t, d, "delta", "partial_json").(string))
		case "message_delta":
			stop, _ = path(t, d, "delta", "stop_reason").(string)
		}
	}
	var in map[string]any
	if err := json.Unmarshal([]byte(args.String()), &in); err != nil || stop != "tool_use" {
		t.Fatalf("streamed input %q (%v), stop %q", args.String(), err, stop)
	}

	delete(body, "stream")
	body["tool_choice"] = map[string]any{"type": "none"}
	if m := decode(t, do(t, s, "POST", pAnthropic, body)); m["stop_reason"] != "end_turn" || path(t, m, "content", 0, "type") != "text" {
		t.Fatalf("tool_choice none: %v", m)
	}
	delete(body, "tool_choice")
	body["messages"] = []any{
		map[string]any{"role": "user", "content": "weather in Paris?"},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id, "name": "get_weather", "input": map[string]any{"city": "Paris"}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": "sunny"}}},
	}
	if m := decode(t, do(t, s, "POST", pAnthropic, body)); m["stop_reason"] != "end_turn" {
		t.Fatalf("after a tool result: %v", m)
	}
}

// TestAnthropicRequestChecks: the shapes the real API refuses are refused
// with an invalid_request_error that says where.
func TestAnthropicRequestChecks(t *testing.T) {
	s, _ := newSim(t, nil)
	msgs := func(m ...any) []any { return m }
	user := func(c any) map[string]any { return map[string]any{"role": "user", "content": c} }
	tests := []struct {
		name   string
		mutate func(b map[string]any)
		want   string
	}{
		{"system role in messages", func(b map[string]any) { b["messages"] = msgs(map[string]any{"role": "system", "content": "x"}) }, "messages.0.role"},
		{"empty text block", func(b map[string]any) { b["messages"] = msgs(user([]any{map[string]any{"type": "text", "text": ""}})) }, "non-empty"},
		{"unknown block", func(b map[string]any) { b["messages"] = msgs(user([]any{map[string]any{"type": "image_url"}})) }, "Input tag 'image_url'"},
		{"orphan tool result", func(b map[string]any) {
			b["messages"] = msgs(user([]any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}}))
		}, "corresponding `tool_use`"},
		{"tool without object schema", func(b map[string]any) {
			b["tools"] = []any{map[string]any{"name": "f", "input_schema": map[string]any{"type": "string"}}}
		}, "tools.0.input_schema.type"},
		{"system block not text", func(b map[string]any) { b["system"] = []any{map[string]any{"type": "image"}} }, "system.0.type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := anthropicBody("claude-sonnet-4-5", "hi", 10)
			tc.mutate(body)
			rec := do(t, s, "POST", pAnthropic, body)
			m := decode(t, rec)
			msg, _ := path(t, m, "error", "message").(string)
			if rec.Code != 400 || path(t, m, "error", "type") != "invalid_request_error" || !strings.Contains(msg, tc.want) {
				t.Fatalf("%d %v, want a 400 saying %q", rec.Code, m, tc.want)
			}
		})
	}
}
