package provider

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/sluice-dev/sluice/admission/estimate"
)

// The Responses API to Anthropic Messages: a Responses request is read
// as the chat completion it means (instructions → a system message,
// input items → messages, function_call / function_call_output items →
// tool calls and tool messages, flat function tools → chat tools,
// text.format → response_format, max_output_tokens →
// max_completion_tokens), built as the translation's own chat request
// and messages (no intermediate chat body), which the chat translation
// then carries, so the two APIs translate and refuse alike. The answer comes back as a response
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

func translateResponsesToClaude(body []byte) *claudeTranslation {
	t := &claudeTranslation{}
	in, msgs, where := responsesToChat(t, body)
	if in == nil {
		return t
	}
	t.where = func(i int) string {
		if i < len(where) {
			return where[i]
		}
		return fmt.Sprintf("input[%d]", i)
	}
	t.translate(in, msgs)
	return t
}

// responsesToChat reads a Responses body as the chat request it means,
// and its messages as the estimator's, refusing into t what has no chat
// (hence no Anthropic) counterpart; where[i] names the Responses field
// chat message i came from. nil: nothing to translate further. It builds
// the chat request's fields directly (no chat body is written and read
// again), so the two APIs translate and refuse alike through the same
// code (claudeTranslation.translate).
func responsesToChat(t *claudeTranslation, body []byte) (*chatRequest, []estimate.Message, []string) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		t.refuse("a body that is not a JSON object")
		return nil, nil, nil
	}
	in := &chatRequest{}
	names := make([]string, 0, len(top))
	for k := range top {
		names = append(names, k)
	}
	sort.Strings(names)
	var typeErr error
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
				// same name and meaning in chat
				if err := json.Unmarshal(top[k], in.field(k)); err != nil && typeErr == nil {
					typeErr = err
				}
			}
		}
	}
	var rr responsesRequest
	if err := json.Unmarshal(body, &rr); err != nil || typeErr != nil {
		if err == nil {
			err = typeErr
		}
		t.refuse("a body whose fields do not have their OpenAI types (%v)", err)
		return nil, nil, nil
	}
	in.MaxCompletionTokens = rr.MaxOutputTokens
	var msgs []estimate.Message
	var where []string
	if rr.Instructions != nil && *rr.Instructions != "" {
		msgs = append(msgs, estimate.Message{Role: "system", Parts: []estimate.Part{{Type: estimate.PartText, Text: *rr.Instructions}}})
		where = append(where, "instructions")
	}
	m, w := responsesInput(t, rr.Input)
	msgs, where = append(msgs, m...), append(where, w...)
	responsesTools(t, &rr, in)
	return in, msgs, where
}

// responsesTools carries tools, tool_choice and text.format.
func responsesTools(t *claudeTranslation, rr *responsesRequest, in *chatRequest) {
	for i, tl := range rr.Tools {
		if tl.Type != "function" {
			t.refuse("tools[%d] of type %q (only function tools translate)", i, tl.Type)
			continue
		}
		in.Tools = append(in.Tools, chatTool{Type: "function", Function: &chatToolFunction{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters}})
	}
	if len(rr.ToolChoice) > 0 && string(rr.ToolChoice) != "null" {
		var named struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if json.Unmarshal(rr.ToolChoice, &named) == nil && named.Type == "function" && named.Name != "" {
			in.ToolChoice = json.RawMessage(`{"type":"function","function":{"name":` + strconv.Quote(named.Name) + `}}`)
		} else {
			in.ToolChoice = rr.ToolChoice // strings mean the same; others are refused there
		}
	}
	if rr.Text == nil {
		return
	}
	if v := rr.Text.Verbosity; v != nil && *v != "" && *v != "medium" {
		t.refuse("text.verbosity %q (Anthropic Messages has no counterpart)", *v)
	}
	if f := rr.Text.Format; f != nil {
		switch f.Type {
		case "", "text":
		case "json_schema":
			in.ResponseFormat = &chatResponseFormat{Type: "json_schema", JSONSchema: &chatJSONSchema{Name: f.Name, Description: f.Description, Schema: f.Schema}}
		default:
			in.ResponseFormat = &chatResponseFormat{Type: f.Type}
		}
	}
}

// responsesInput reads the input (a string or items) as chat messages,
// each with the input field it came from.
func responsesInput(t *claudeTranslation, raw json.RawMessage) (msgs []estimate.Message, where []string) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []estimate.Message{{Role: "user", Parts: []estimate.Part{{Type: estimate.PartText, Text: s}}}}, []string{"input"}
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
			msgs = append(msgs, estimate.Message{Role: "assistant", ToolCalls: []estimate.ToolCall{{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}}})
		case it.Type == "function_call_output":
			msgs = append(msgs, estimate.Message{Role: "tool", ToolCallID: it.CallID, Parts: responsesContent(t, it.Output, at)})
		case it.Type == "reasoning":
			continue // OpenAI's own reasoning, meaningless to Claude; no content of the conversation
		case it.Type == "" || it.Type == "message":
			msgs = append(msgs, estimate.Message{Role: it.Role, Parts: responsesContent(t, it.Content, at)})
		default:
			t.refuse("%s of type %q", at, it.Type)
			continue
		}
		where = append(where, at)
	}
	return msgs, where
}

// responsesContent reads a message's (or a function output's) content:
// a string, or input_text / output_text / input_image parts as chat
// parts; other parts keep their type, which the chat translation refuses
// by name.
func responsesContent(t *claudeTranslation, raw json.RawMessage, at string) []estimate.Part {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []estimate.Part{{Type: estimate.PartText, Text: s}}
	}
	var parts []responsesPart
	if json.Unmarshal(raw, &parts) != nil {
		t.refuse("%s.content that is neither a string nor an array of content parts", at)
		return nil
	}
	out := make([]estimate.Part, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text":
			out = append(out, estimate.Part{Type: estimate.PartText, Text: p.Text})
		case "input_image":
			if p.ImageURL == "" {
				out = append(out, estimate.Part{Type: estimate.PartOther, Text: `{"type":"input_image (by file_id)"}`})
				continue
			}
			out = append(out, estimate.Part{Type: estimate.PartImage, Image: &estimate.Image{URL: p.ImageURL}})
		default:
			typ, _ := json.Marshal(map[string]string{"type": p.Type})
			out = append(out, estimate.Part{Type: estimate.PartOther, Text: string(typ)})
		}
	}
	return out
}
