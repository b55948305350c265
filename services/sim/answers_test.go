package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// validJSON checks v against the schema subset genJSON speaks; it is the
// test's oracle, written apart from the generator.
func validJSON(schema, root map[string]any, v any) error {
	if ref, ok := schema["$ref"].(string); ok {
		return validJSON(resolveRef(root, ref), root, v)
	}
	if c, ok := schema["const"]; ok && fmt.Sprint(c) != fmt.Sprint(v) {
		return fmt.Errorf("%v is not the const %v", v, c)
	}
	if e, ok := schema["enum"].([]any); ok {
		for _, x := range e {
			if fmt.Sprint(x) == fmt.Sprint(v) {
				return nil
			}
		}
		return fmt.Errorf("%v not in enum %v", v, e)
	}
	if alts, ok := schema["anyOf"].([]any); ok {
		for _, a := range alts {
			if validJSON(a.(map[string]any), root, v) == nil {
				return nil
			}
		}
		return fmt.Errorf("%v matches no anyOf branch", v)
	}
	switch schemaType(schema) {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%v is not an object", v)
		}
		props, _ := schema["properties"].(map[string]any)
		req, _ := schema["required"].([]any)
		for _, r := range req {
			if _, ok := m[r.(string)]; !ok {
				return fmt.Errorf("required %v missing", r)
			}
		}
		for k, x := range m {
			ps, ok := props[k].(map[string]any)
			if !ok {
				if schema["additionalProperties"] == false {
					return fmt.Errorf("additional property %s", k)
				}
				continue
			}
			if err := validJSON(ps, root, x); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%v is not an array", v)
		}
		if lo, ok := schema["minItems"].(float64); ok && float64(len(a)) < lo {
			return fmt.Errorf("%d items < minItems %v", len(a), lo)
		}
		items, _ := schema["items"].(map[string]any)
		for i, x := range a {
			if err := validJSON(items, root, x); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
	case "string":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%v is not a string", v)
		}
		if lo, ok := schema["minLength"].(float64); ok && float64(len(s)) < lo {
			return fmt.Errorf("%q shorter than %v", s, lo)
		}
		if hi, ok := schema["maxLength"].(float64); ok && float64(len(s)) > hi {
			return fmt.Errorf("%q longer than %v", s, hi)
		}
	case "integer", "number":
		f, ok := v.(float64)
		if !ok {
			return fmt.Errorf("%v is not a number", v)
		}
		if schemaType(schema) == "integer" && f != float64(int64(f)) {
			return fmt.Errorf("%v is not an integer", v)
		}
		if lo, ok := schema["minimum"].(float64); ok && f < lo {
			return fmt.Errorf("%v < minimum %v", f, lo)
		}
		if hi, ok := schema["maximum"].(float64); ok && f > hi {
			return fmt.Errorf("%v > maximum %v", f, hi)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%v is not a boolean", v)
		}
	case "null":
		if v != nil {
			return fmt.Errorf("%v is not null", v)
		}
	}
	return nil
}

func checkAgainst(t *testing.T, schemaJSON, valueJSON string) {
	t.Helper()
	var schema map[string]any
	if err := json.Unmarshal([]byte(schemaJSON), &schema); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal([]byte(valueJSON), &v); err != nil {
		t.Fatalf("not JSON: %s", valueJSON)
	}
	if err := validJSON(schema, schema, v); err != nil {
		t.Fatalf("%s is not valid against %s: %v", valueJSON, schemaJSON, err)
	}
}

// TestGenJSONIsValid: for every schema shape tools and response formats
// use, the generated value is valid (after a JSON round trip, as a client
// sees it).
func TestGenJSONIsValid(t *testing.T) {
	for _, schema := range []string{
		`{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"],"additionalProperties":false}`,
		`{"type":"object","properties":{"n":{"type":"integer","minimum":5,"maximum":9},"x":{"type":"number","exclusiveMinimum":2},"ok":{"type":"boolean"},"none":{"type":"null"}}}`,
		`{"type":"array","items":{"type":"string","minLength":12,"maxLength":14},"minItems":3}`,
		`{"type":"object","properties":{"tags":{"type":"array","items":{"$ref":"#/$defs/Tag"}},"when":{"type":"string","format":"date-time"}},"$defs":{"Tag":{"type":"object","properties":{"name":{"type":"string"},"weight":{"anyOf":[{"type":"number"},{"type":"null"}]}},"required":["name","weight"],"additionalProperties":false}}}`,
		`{"type":["string","null"],"maxLength":2}`,
		`{"const":"fixed"}`,
		`{"type":"object","properties":{"self":{"$ref":"#"}}}`, // a cycle: bounded, still an object
		`{}`,
	} {
		b, err := json.Marshal(genJSON(mustJSON(t, schema)))
		if err != nil {
			t.Fatal(err)
		}
		checkAgainst(t, schema, string(b))
	}
}

func mustJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

const weatherTool = `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1}},"required":["city","days"],"additionalProperties":false}`

// TestChatChoicesToolsAndStructuredOutput: n choices, a tool call whose
// arguments fit the tool's schema, JSON valid against a json_schema
// response_format — plain and streamed.
func TestChatChoicesToolsAndStructuredOutput(t *testing.T) {
	s, _ := newSim(t, nil)
	msgs := []any{map[string]any{"role": "user", "content": "weather?"}}
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": mustJSON(t, weatherTool)}}}

	m := decode(t, do(t, s, "POST", pOpenAI, map[string]any{"model": "gpt-4o-mini", "messages": msgs, "max_tokens": 8, "n": 3}))
	if cs := path(t, m, "choices").([]any); len(cs) != 3 || path(t, cs[2], "index") != 2.0 {
		t.Fatalf("n=3: %v", cs)
	}
	if got := path(t, m, "usage", "completion_tokens"); got != 12.0 { // 3 × 4 (half of 8)
		t.Errorf("completion_tokens %v, want 12", got)
	}

	m = decode(t, do(t, s, "POST", pOpenAI, map[string]any{"model": "gpt-4o-mini", "messages": msgs, "tools": tools}))
	call := path(t, m, "choices", 0, "message", "tool_calls", 0, "function")
	if path(t, call, "name") != "get_weather" || path(t, m, "choices", 0, "finish_reason") != "tool_calls" {
		t.Fatalf("no tool call: %v", m)
	}
	checkAgainst(t, weatherTool, path(t, call, "arguments").(string))

	none := decode(t, do(t, s, "POST", pOpenAI, map[string]any{"model": "gpt-4o-mini", "messages": msgs, "tools": tools, "tool_choice": "none", "max_tokens": 4}))
	if path(t, none, "choices", 0, "message", "tool_calls") != nil {
		t.Errorf("tool_choice none still called a tool")
	}

	rf := map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "w", "strict": true, "schema": mustJSON(t, weatherTool)}}
	m = decode(t, do(t, s, "POST", pOpenAI, map[string]any{"model": "gpt-4o-mini", "messages": msgs, "response_format": rf}))
	checkAgainst(t, weatherTool, path(t, m, "choices", 0, "message", "content").(string))

	// Streamed: the tool call's arguments arrive in pieces that join to
	// valid JSON; two choices each end with their finish_reason.
	rec := do(t, s, "POST", pOpenAI, map[string]any{"model": "gpt-4o-mini", "messages": msgs, "tools": tools, "n": 2, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	args := map[float64]string{}
	finishes := 0
	var usage map[string]any
	for _, ev := range sseEvents(t, rec.Body.String()) {
		if ev[1] == "[DONE]" {
			continue
		}
		var ch map[string]any
		_ = json.Unmarshal([]byte(ev[1]), &ch)
		if u, ok := ch["usage"].(map[string]any); ok {
			usage = u
		}
		for _, c := range ch["choices"].([]any) {
			cm := c.(map[string]any)
			if cm["finish_reason"] == "tool_calls" {
				finishes++
			}
			if tcs, ok := path(t, cm, "delta", "tool_calls").([]any); ok {
				args[cm["index"].(float64)] += path(t, tcs[0], "function", "arguments").(string)
			}
		}
	}
	if finishes != 2 || len(args) != 2 || usage == nil {
		t.Fatalf("streamed: %d finishes, args %v, usage %v\n%s", finishes, args, usage, rec.Body.String())
	}
	checkAgainst(t, weatherTool, args[1])
}

// TestResponsesAPI: a response object with output text, instructions and
// usage; reasoning models report reasoning tokens; tools and text.format
// work as in chat; the stream is the Responses event sequence.
func TestResponsesAPI(t *testing.T) {
	s, _ := newSim(t, nil)
	m := decode(t, do(t, s, "POST", "/openai/v1/responses", map[string]any{"model": "o4-mini", "input": "hi", "instructions": "be brief", "max_output_tokens": 40}))
	if m["object"] != "response" || m["status"] != "completed" || m["instructions"] != "be brief" {
		t.Fatalf("response %v", m)
	}
	out := path(t, m, "output").([]any)
	if path(t, out[0], "type") != "reasoning" || path(t, out[1], "content", 0, "type") != "output_text" {
		t.Fatalf("output %v", out)
	}
	if got := path(t, m, "usage", "output_tokens"); got != 20.0 {
		t.Errorf("output_tokens %v, want 20 (half of 40)", got)
	}
	if got := path(t, m, "usage", "output_tokens_details", "reasoning_tokens"); got != 10.0 {
		t.Errorf("reasoning_tokens %v, want 10", got)
	}
	if text := path(t, out[1], "content", 0, "text").(string); len(text) != 40 { // 10 visible tokens × 4 bytes
		t.Errorf("text %q", text)
	}

	tools := []any{map[string]any{"type": "function", "name": "get_weather", "parameters": mustJSON(t, weatherTool)}}
	m = decode(t, do(t, s, "POST", "/v1/responses", map[string]any{"model": "gpt-4o-mini", "input": []any{map[string]any{"role": "user", "content": "w?"}}, "tools": tools}))
	fc := path(t, m, "output", 0)
	if path(t, fc, "type") != "function_call" || path(t, fc, "name") != "get_weather" {
		t.Fatalf("no function call: %v", m)
	}
	checkAgainst(t, weatherTool, path(t, fc, "arguments").(string))

	format := map[string]any{"format": map[string]any{"type": "json_schema", "name": "w", "schema": mustJSON(t, weatherTool)}}
	m = decode(t, do(t, s, "POST", "/azure/openai/v1/responses", map[string]any{"model": "dep1", "input": "w?", "text": format}))
	checkAgainst(t, weatherTool, path(t, m, "output", 0, "content", 0, "text").(string))

	rec := do(t, s, "POST", "/openai/v1/responses", map[string]any{"model": "o4-mini", "input": "hi", "max_output_tokens": 16, "stream": true})
	var types []string
	var text strings.Builder
	var final map[string]any
	for i, ev := range sseEvents(t, rec.Body.String()) {
		var d map[string]any
		if err := json.Unmarshal([]byte(ev[1]), &d); err != nil || d["type"] != ev[0] || d["sequence_number"] != float64(i) {
			t.Fatalf("event %d %q: %s", i, ev[0], ev[1])
		}
		types = append(types, ev[0])
		if ev[0] == "response.output_text.delta" {
			text.WriteString(d["delta"].(string))
		}
		if ev[0] == "response.completed" {
			final = d["response"].(map[string]any)
		}
	}
	if types[0] != "response.created" || types[len(types)-1] != "response.completed" || final == nil {
		t.Fatalf("events %v", types)
	}
	if path(t, final, "usage", "output_tokens") != 8.0 || path(t, final, "usage", "output_tokens_details", "reasoning_tokens") != 4.0 || text.Len() != 16 {
		t.Errorf("final usage %v, text %q", final["usage"], text.String())
	}
}

// TestCompletionsAPI: n choices per prompt, default max_tokens 16,
// streamed text_completion chunks with the usage chunk when asked.
func TestCompletionsAPI(t *testing.T) {
	s, _ := newSim(t, nil)
	m := decode(t, do(t, s, "POST", "/openai/v1/completions", map[string]any{"model": "gpt-3.5-turbo-instruct", "prompt": []any{"a", "b"}, "n": 2}))
	cs := path(t, m, "choices").([]any)
	if m["object"] != "text_completion" || len(cs) != 4 || path(t, cs[3], "index") != 3.0 {
		t.Fatalf("completions %v", m)
	}
	if got := path(t, m, "usage", "completion_tokens"); got != 32.0 { // 4 × 8 (half the default 16)
		t.Errorf("completion_tokens %v, want 32", got)
	}
	rec := do(t, s, "POST", "/azure/openai/deployments/dep1/completions?api-version=2024-10-21", map[string]any{"prompt": "x", "stream": true, "stream_options": map[string]any{"include_usage": true}})
	evs := sseEvents(t, rec.Body.String())
	if evs[len(evs)-1][1] != "[DONE]" || !strings.Contains(evs[len(evs)-2][1], `"completion_tokens":8`) {
		t.Fatalf("stream %v", evs)
	}
	if bad := do(t, s, "POST", "/openai/v1/completions", map[string]any{"model": "m"}); bad.Code != 400 {
		t.Errorf("no prompt: %d", bad.Code)
	}
}
