package provider

import (
	"encoding/json"
	"fmt"
	"sort"
)

// The Responses API to Anthropic Messages: a Responses request is first
// rewritten as the chat completion it means (instructions → a system
// message, input items → messages, function_call / function_call_output
// items → tool calls and tool messages, flat function tools → chat tools,
// text.format → response_format, max_output_tokens →
// max_completion_tokens), which the chat translation then carries, so the
// two APIs translate and refuse alike. The answer comes back as a response
// object, or its stream as the Responses events (claude_responses_answer.go).

// responsesFields are the Responses request fields the translation
// knows; others are refused.
var responsesFields = map[string]chatFieldRule{
	"model": fieldTranslated, "input": fieldTranslated, "instructions": fieldTranslated,
	"max_output_tokens": fieldTranslated, "temperature": fieldTranslated, "top_p": fieldTranslated,
	"tools": fieldTranslated, "tool_choice": fieldTranslated, "parallel_tool_calls": fieldTranslated,
	"text": fieldTranslated, "stream": fieldTranslated, "user": fieldTranslated, "safety_identifier": fieldTranslated,
	"store": fieldTranslated, "service_tier": fieldTranslated,
	"metadata": fieldIgnored, "prompt_cache_key": fieldIgnored, "stream_options": fieldIgnored,
	"previous_response_id": fieldRefused, "conversation": fieldRefused, "prompt": fieldRefused,
	"background": fieldRefused, "include": fieldRefused, "reasoning": fieldRefused, "max_tool_calls": fieldRefused,
	"top_logprobs": fieldRefused,
	// "disabled" is the default; "auto" drops input Anthropic would refuse.
	"truncation": fieldRefused,
}

type responsesRequest struct {
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Tools           []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
	Text       *struct {
		Format *struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
		} `json:"format"`
		Verbosity *string `json:"verbosity"`
	} `json:"text"`
}

// responsesItem is one input item: a message (with or without type), a
// function call or a function call's output.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

type responsesPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL string `json:"image_url"`
	FileID   string `json:"file_id"`
}

// ClaudeResponsesUntranslatable lists what of a Responses API body the
// translation to Anthropic Messages does not carry, each naming its field.
func ClaudeResponsesUntranslatable(body []byte) []string {
	return translateResponsesToClaude(body).why
}

// claudeResponsesBody translates a Responses API body into a Messages
// body for upstreamModel.
func claudeResponsesBody(body []byte, upstreamModel string, defaultMax int64) ([]byte, bool, error) {
	return translateResponsesToClaude(body).body(upstreamModel, defaultMax)
}

func translateResponsesToClaude(body []byte) *claudeTranslation {
	t := &claudeTranslation{}
	chat, where := responsesToChat(t, body)
	if chat == nil {
		return t
	}
	t.where = func(i int) string {
		if i < len(where) {
			return where[i]
		}
		return fmt.Sprintf("input[%d]", i)
	}
	return translateChat(t, chat, nil)
}

// responsesToChat rewrites a Responses body as a chat body, refusing into
// t what has no chat (hence no Anthropic) counterpart; where[i] names the
// Responses field chat message i came from. A nil body: nothing to
// translate further.
func responsesToChat(t *claudeTranslation, body []byte) (chat []byte, where []string) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		t.refuse("a body that is not a JSON object")
		return nil, nil
	}
	out := map[string]any{}
	names := make([]string, 0, len(top))
	for k := range top {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		rule, known := responsesFields[k]
		switch {
		case !known:
			t.refuse("the field %s (not a Responses API parameter the translation knows)", k)
		case k == "truncation" && string(top[k]) == `"disabled"`:
		case rule == fieldRefused && !isDefault(k, top[k]):
			t.refuse("%s (Anthropic Messages has no counterpart)", k)
		case rule == fieldTranslated:
			switch k {
			case "model", "temperature", "top_p", "parallel_tool_calls", "stream", "user", "safety_identifier", "store", "service_tier":
				out[k] = top[k] // same name and meaning in chat
			}
		}
	}
	var in responsesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		t.refuse("a body whose fields do not have their OpenAI types (%v)", err)
		return nil, nil
	}
	if in.MaxOutputTokens != nil {
		out["max_completion_tokens"] = *in.MaxOutputTokens
	}
	var msgs []any
	if in.Instructions != nil && *in.Instructions != "" {
		msgs, where = append(msgs, map[string]any{"role": "system", "content": *in.Instructions}), append(where, "instructions")
	}
	m, w := responsesInput(t, in.Input)
	msgs, where = append(msgs, m...), append(where, w...)
	out["messages"] = msgs
	responsesTools(t, &in, out)
	b, err := json.Marshal(out)
	if err != nil {
		t.refuse("a body that does not re-encode (%v)", err)
		return nil, nil
	}
	return b, where
}

// responsesTools carries tools, tool_choice and text.format.
func responsesTools(t *claudeTranslation, in *responsesRequest, out map[string]any) {
	var tools []any
	for i, tl := range in.Tools {
		if tl.Type != "function" {
			t.refuse("tools[%d] of type %q (only function tools translate)", i, tl.Type)
			continue
		}
		f := map[string]any{"name": tl.Name, "description": tl.Description}
		if len(tl.Parameters) > 0 {
			f["parameters"] = tl.Parameters
		}
		tools = append(tools, map[string]any{"type": "function", "function": f})
	}
	if tools != nil {
		out["tools"] = tools
	}
	if len(in.ToolChoice) > 0 && string(in.ToolChoice) != "null" {
		var named struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if json.Unmarshal(in.ToolChoice, &named) == nil && named.Type == "function" && named.Name != "" {
			out["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": named.Name}}
		} else {
			out["tool_choice"] = in.ToolChoice // strings mean the same; others are refused there
		}
	}
	if in.Text == nil {
		return
	}
	if v := in.Text.Verbosity; v != nil && *v != "" && *v != "medium" {
		t.refuse("text.verbosity %q (Anthropic Messages has no counterpart)", *v)
	}
	if f := in.Text.Format; f != nil {
		switch f.Type {
		case "", "text":
		case "json_schema":
			out["response_format"] = map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": f.Name, "description": f.Description, "schema": f.Schema}}
		default:
			out["response_format"] = map[string]any{"type": f.Type}
		}
	}
}

// responsesInput rewrites the input (a string or items) as chat messages,
// each with the input field it came from.
func responsesInput(t *claudeTranslation, raw json.RawMessage) (msgs []any, where []string) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []any{map[string]any{"role": "user", "content": s}}, []string{"input"}
	}
	var items []responsesItem
	if json.Unmarshal(raw, &items) != nil {
		t.refuse("input that is neither a string nor an array of input items")
		return nil, nil
	}
	for k, it := range items {
		at := fmt.Sprintf("input[%d]", k)
		switch {
		case it.Type == "function_call":
			msgs = append(msgs, map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": it.CallID, "type": "function",
				"function": map[string]any{"name": it.Name, "arguments": it.Arguments}}}})
		case it.Type == "function_call_output":
			msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": it.CallID, "content": responsesContent(t, it.Output, at)})
		case it.Type == "reasoning":
			continue // OpenAI's own reasoning, meaningless to Claude; no content of the conversation
		case it.Type == "" || it.Type == "message":
			msgs = append(msgs, map[string]any{"role": it.Role, "content": responsesContent(t, it.Content, at)})
		default:
			t.refuse("%s of type %q", at, it.Type)
			continue
		}
		where = append(where, at)
	}
	return msgs, where
}

// responsesContent rewrites a message's (or a function output's) content:
// a string, or input_text / output_text / input_image parts as chat parts;
// other parts keep their type, which the chat translation refuses by name.
func responsesContent(t *claudeTranslation, raw json.RawMessage, at string) any {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []responsesPart
	if json.Unmarshal(raw, &parts) != nil {
		t.refuse("%s.content that is neither a string nor an array of content parts", at)
		return nil
	}
	out := make([]any, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text":
			out = append(out, map[string]any{"type": "text", "text": p.Text})
		case "input_image":
			if p.ImageURL == "" {
				out = append(out, map[string]any{"type": "input_image (by file_id)"})
				continue
			}
			out = append(out, map[string]any{"type": "image_url", "image_url": map[string]any{"url": p.ImageURL}})
		default:
			out = append(out, map[string]any{"type": p.Type})
		}
	}
	return out
}
