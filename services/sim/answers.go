package sim

import (
	"encoding/json"
	"strings"
)

// What the simulator answers, shared by chat completions and the Responses
// API: a tool call when the request offers function tools and tool_choice
// does not say "none" (arguments generated from the tool's parameters
// schema), JSON valid against the schema when response_format (chat) or
// text.format (Responses) asks for json_schema ("{}" for json_object),
// otherwise the drawn number of output tokens of filler text. Reasoning
// models also report reasoning tokens.

// answer is one choice's content.
type answer struct {
	text string    // the message text ("" for a tool call)
	tool *toolCall // non-nil: the choice is this tool call
	// tokens is the choice's output tokens, reasoning included.
	tokens    int64
	reasoning int64 // of tokens
	truncated bool  // the drawn output hit the bound (finish "length")
	filler    bool  // text is outputText: 4 bytes per token
}

type toolCall struct {
	name, arguments string
}

// toolDef is a function tool as offered: chat wraps it in "function",
// the Responses API has it flat.
type toolDef struct {
	name   string
	params any
}

// functionTools lists the function tools of a request (chat: tools[] of
// {type: function, function: {name, parameters}} and legacy functions[];
// Responses: tools[] of {type: function, name, parameters}).
func functionTools(body map[string]any) []toolDef {
	var out []toolDef
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		tm, _ := t.(map[string]any)
		if tm["type"] != "function" {
			continue
		}
		f, _ := tm["function"].(map[string]any)
		if f == nil {
			f = tm // Responses API: flat
		}
		if name, _ := f["name"].(string); name != "" {
			out = append(out, toolDef{name: name, params: f["parameters"]})
		}
	}
	fns, _ := body["functions"].([]any)
	for _, f := range fns {
		fm, _ := f.(map[string]any)
		if name, _ := fm["name"].(string); name != "" {
			out = append(out, toolDef{name: name, params: fm["parameters"]})
		}
	}
	return out
}

// chosenTool is the tool the answer calls, or nil: tool_choice "none"
// calls none; a named function ({type: function, function: {name}} in
// chat, {type: function, name} in Responses) calls that one; "auto",
// "required" or no choice call the first function tool.
func chosenTool(body map[string]any) *toolDef {
	tools := functionTools(body)
	if len(tools) == 0 {
		return nil
	}
	want := ""
	switch tc := body["tool_choice"].(type) {
	case string:
		if tc == "none" {
			return nil
		}
	case map[string]any:
		if f, ok := tc["function"].(map[string]any); ok {
			want, _ = f["name"].(string)
		} else {
			want, _ = tc["name"].(string)
		}
	}
	if fc, ok := body["function_call"].(string); ok && fc == "none" {
		return nil
	}
	for i := range tools {
		if want == "" || tools[i].name == want {
			return &tools[i]
		}
	}
	return &tools[0]
}

// structuredSchema returns the JSON schema the answer must follow, and
// whether structured output was asked at all (json_object has no schema).
// Chat: response_format {type: json_schema, json_schema: {schema}};
// Responses: text.format {type: json_schema, schema}.
func structuredSchema(body map[string]any) (schema any, structured bool) {
	rf, _ := body["response_format"].(map[string]any)
	if rf == nil {
		if text, ok := body["text"].(map[string]any); ok {
			rf, _ = text["format"].(map[string]any)
			if rf != nil && rf["type"] == "json_schema" {
				return rf["schema"], true
			}
		}
	}
	switch rf["type"] {
	case "json_schema":
		js, _ := rf["json_schema"].(map[string]any)
		return js["schema"], true
	case "json_object":
		return nil, true
	}
	return nil, false
}

// reasoningModel: models that think before they answer (o-series,
// gpt-5), or any request that sets a reasoning effort.
func reasoningModel(model string, body map[string]any) bool {
	if r, ok := body["reasoning"].(map[string]any); ok {
		if e, _ := r["effort"].(string); e != "" && e != "none" {
			return true
		}
	}
	if e, _ := body["reasoning_effort"].(string); e != "" && e != "none" {
		return true
	}
	m := strings.ToLower(model)
	for _, p := range []string{"o1", "o3", "o4", "gpt-5"} {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}

// answerFor plans one choice of a request whose drawn output is drawn
// tokens (truncated: it reached the bound). A reasoning model spends half
// the drawn output on reasoning; a tool call or structured answer is as
// long as its JSON (ceil(bytes / 4)), plus that reasoning.
func answerFor(body map[string]any, model string, drawn int64, truncated bool) answer {
	var a answer
	if reasoningModel(model, body) {
		a.reasoning = drawn / 2
	}
	if t := chosenTool(body); t != nil {
		args, _ := json.Marshal(genJSON(t.params))
		a.tool = &toolCall{name: t.name, arguments: string(args)}
		a.tokens = max(1, ceilDiv4(int64(len(args)))) + a.reasoning
		return a
	}
	if schema, ok := structuredSchema(body); ok {
		v := any(map[string]any{})
		if schema != nil {
			v = genJSON(schema)
		}
		b, _ := json.Marshal(v)
		a.text = string(b)
		a.tokens = max(1, ceilDiv4(int64(len(b)))) + a.reasoning
		return a
	}
	a.text = outputText(0, drawn-a.reasoning)
	a.tokens, a.truncated, a.filler = drawn, truncated, true
	return a
}

// choicesN is the request's n (1 when absent or out of 1…128).
func choicesN(body map[string]any) int64 {
	if n, ok := num(body["n"]); ok && n >= 1 && n <= 128 {
		return n
	}
	return 1
}
