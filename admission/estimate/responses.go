package estimate

import (
	"encoding/json"
	"fmt"
)

// FormatOpenAIResponses is OpenAI's Responses API (POST /v1/responses).
const FormatOpenAIResponses Format = "openai_responses"

type responsesBody struct {
	Model           *string           `json:"model"`
	Input           json.RawMessage   `json:"input"`
	Instructions    json.RawMessage   `json:"instructions"`
	Tools           []json.RawMessage `json:"tools"`
	Text            json.RawMessage   `json:"text"`
	MaxOutputTokens json.RawMessage   `json:"max_output_tokens"`
	Stream          *bool             `json:"stream"`
	Background      *bool             `json:"background"`
}

// responsesItem is one input item: a message (type "message", or a bare
// {role, content}), a function call or its output, a reasoning item, or
// any other item kind (counted by its whole JSON).
type responsesItem struct {
	Type      string          `json:"type"`
	Role      *string         `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

type responsesPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL string `json:"image_url"`
	Detail   string `json:"detail"`
}

// ParseOpenAIResponses parses an OpenAI Responses API request body: input
// as a string or an array of input items, instructions (a top-level system
// prompt, kept in System), flat function tools, text.format (structured
// output) and max_output_tokens; background: true is refused. Stateful
// references (previous_response_id, item_reference) are counted only as far
// as the body shows them: what the provider stored is not visible here.
func ParseOpenAIResponses(body []byte) (Request, error) {
	if e := topLevel(body); e != nil {
		return Request{}, e
	}
	var b responsesBody
	if e := decode(body, &b, ""); e != nil {
		return Request{}, e
	}
	req := Request{Format: FormatOpenAIResponses, N: 1}
	if e := requireModel(b.Model, b.Model != nil); e != nil {
		return Request{}, e
	}
	req.Model = *b.Model
	if b.Background != nil && *b.Background {
		// A background response answers at once, status "queued", and
		// reports its usage only when polled later: the reservation could
		// never be reconciled with what the provider generated.
		return Request{}, &RequestError{Code: CodeInvalidValue, Param: "background",
			Message: "background responses are not supported through Sluice: the gateway reconciles each request with the usage of its answer, which a background response does not carry; send it without background (stream it instead for long outputs)"}
	}
	if e := responsesInput(&req, b.Instructions, b.Input); e != nil {
		return Request{}, e
	}
	for i, raw := range b.Tools {
		t, e := parseResponsesTool(raw, fmt.Sprintf("tools[%d]", i))
		if e != nil {
			return Request{}, e
		}
		req.Tools = append(req.Tools, t)
	}
	if !isNull(b.Text) {
		rf, e := parseResponsesText(b.Text)
		if e != nil {
			return Request{}, e
		}
		req.ResponseFormat = rf
	}
	mt, e := maxTokens("max_output_tokens", b.MaxOutputTokens)
	if e != nil {
		return Request{}, e
	}
	req.MaxTokens = mt
	if b.Stream != nil {
		req.Stream = *b.Stream
	}
	return req, nil
}

// responsesInput parses instructions (the system prompt) and input (a
// string or input items) into req.
func responsesInput(req *Request, instructions, input json.RawMessage) *RequestError {
	switch firstByte(instructions) {
	case 0, 'n':
	case '"':
		var s string
		if e := decode(instructions, &s, "instructions"); e != nil {
			return e
		}
		req.System = []Part{{Type: PartText, Text: s}}
	default:
		return typeErr("instructions", "a string", instructions)
	}
	switch firstByte(input) {
	case 0, 'n':
		if len(req.System) == 0 {
			return &RequestError{Code: CodeMissingField, Param: "input", Message: "input is required"}
		}
	case '"':
		var s string
		if e := decode(input, &s, "input"); e != nil {
			return e
		}
		req.Messages = []Message{{Role: "user", Parts: []Part{{Type: PartText, Text: s}}}}
	case '[':
		var items []json.RawMessage
		if e := decode(input, &items, "input"); e != nil {
			return e
		}
		if len(items) == 0 && len(req.System) == 0 {
			return &RequestError{Code: CodeInvalidValue, Param: "input", Message: "input must contain at least one item"}
		}
		req.Messages = make([]Message, 0, len(items))
		for i, raw := range items {
			m, e := parseResponsesItem(raw, fmt.Sprintf("input[%d]", i))
			if e != nil {
				return e
			}
			req.Messages = append(req.Messages, m)
		}
	default:
		return typeErr("input", "a string or an array of input items", input)
	}
	return nil
}

func parseResponsesItem(raw json.RawMessage, param string) (Message, *RequestError) {
	if firstByte(raw) != '{' {
		return Message{}, typeErr(param, "an object", raw)
	}
	var it responsesItem
	if e := decode(raw, &it, param); e != nil {
		return Message{}, e
	}
	switch {
	case it.Type == "message" || (it.Type == "" && it.Role != nil):
		if it.Role == nil {
			return Message{}, &RequestError{Code: CodeMissingField, Param: param + ".role", Message: param + ".role is required"}
		}
		parts, e := parseResponsesContent(it.Content, param+".content")
		if e != nil {
			return Message{}, e
		}
		return Message{Role: *it.Role, Parts: parts}, nil
	case it.Type == "function_call":
		return Message{Role: "assistant", ToolCalls: []ToolCall{{Name: it.Name, Arguments: it.Arguments}}, ToolCallID: it.CallID}, nil
	case it.Type == "function_call_output":
		m := Message{Role: "tool", ToolCallID: it.CallID}
		switch firstByte(it.Output) {
		case '"':
			var s string
			if e := decode(it.Output, &s, param+".output"); e != nil {
				return Message{}, e
			}
			m.Parts = []Part{{Type: PartText, Text: s}}
		case '[':
			parts, e := parseResponsesContent(it.Output, param+".output")
			if e != nil {
				return Message{}, e
			}
			m.Parts = parts
		case 0, 'n':
			return Message{}, &RequestError{Code: CodeMissingField, Param: param + ".output", Message: param + ".output is required"}
		default:
			return Message{}, typeErr(param+".output", "a string or an array", it.Output)
		}
		return m, nil
	case it.Type == "reasoning":
		m := Message{Role: "assistant"}
		for _, s := range it.Summary {
			m.Parts = append(m.Parts, Part{Type: PartText, Text: s.Text})
		}
		return m, nil
	case it.Type == "":
		return Message{}, &RequestError{Code: CodeMissingField, Param: param + ".type", Message: param + ".type is required (or a role for a message)"}
	}
	// Built-in tool calls and outputs, item references: count the item.
	return Message{Role: it.Type, Parts: []Part{{Type: PartOther, Text: string(raw)}}}, nil
}

// parseResponsesContent reads a message's content: a string or an array of
// input parts (input_text, output_text, refusal, input_image, input_file,
// input_audio).
func parseResponsesContent(raw json.RawMessage, param string) ([]Part, *RequestError) {
	switch firstByte(raw) {
	case '"':
		var s string
		if e := decode(raw, &s, param); e != nil {
			return nil, e
		}
		return []Part{{Type: PartText, Text: s}}, nil
	case '[':
	case 0, 'n':
		return nil, &RequestError{Code: CodeMissingField, Param: param, Message: param + " is required"}
	default:
		return nil, typeErr(param, "a string or an array", raw)
	}
	var raws []json.RawMessage
	if e := decode(raw, &raws, param); e != nil {
		return nil, e
	}
	parts := make([]Part, 0, len(raws))
	for j, pr := range raws {
		pp := fmt.Sprintf("%s[%d]", param, j)
		if firstByte(pr) != '{' {
			return nil, typeErr(pp, "an object", pr)
		}
		var p responsesPart
		if e := decode(pr, &p, pp); e != nil {
			return nil, e
		}
		switch p.Type {
		case "input_text", "output_text", "text":
			parts = append(parts, Part{Type: PartText, Text: p.Text})
		case "refusal":
			parts = append(parts, Part{Type: PartText, Text: p.Refusal})
		case "input_image":
			parts = append(parts, Part{Type: PartImage, Image: &Image{URL: p.ImageURL, Detail: p.Detail}})
		case "input_file":
			parts = append(parts, Part{Type: PartDocument})
		case "input_audio":
			parts = append(parts, Part{Type: PartAudio})
		case "":
			return nil, &RequestError{Code: CodeMissingField, Param: pp + ".type", Message: pp + ".type is required"}
		default:
			parts = append(parts, Part{Type: PartOther, Text: string(pr)})
		}
	}
	return parts, nil
}

// parseResponsesTool reads one tool: the Responses API's function tools are
// flat ({type, name, description, parameters}); custom tools carry a
// format; built-in tools (web_search, file_search, …) count their whole
// definition.
func parseResponsesTool(raw json.RawMessage, param string) (Tool, *RequestError) {
	if firstByte(raw) != '{' {
		return Tool{}, typeErr(param, "an object", raw)
	}
	var t struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Format      json.RawMessage `json:"format"`
	}
	if e := decode(raw, &t, param); e != nil {
		return Tool{}, e
	}
	switch t.Type {
	case "function":
		if t.Name == "" {
			return Tool{}, &RequestError{Code: CodeMissingField, Param: param + ".name", Message: param + ".name is required"}
		}
		return Tool{Type: "function", Name: t.Name, Description: t.Description, Parameters: t.Parameters}, nil
	case "custom":
		return Tool{Type: "custom", Name: t.Name, Description: t.Description, Parameters: t.Format}, nil
	case "":
		return Tool{}, &RequestError{Code: CodeMissingField, Param: param + ".type", Message: param + ".type is required"}
	}
	return Tool{Type: t.Type, Parameters: raw}, nil
}

// parseResponsesText reads text.format, the Responses API's structured
// output: {type: text | json_object | json_schema, name, schema}.
func parseResponsesText(raw json.RawMessage) (*ResponseFormat, *RequestError) {
	if firstByte(raw) != '{' {
		return nil, typeErr("text", "an object", raw)
	}
	var t struct {
		Format *struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	}
	if e := decode(raw, &t, "text"); e != nil {
		return nil, e
	}
	if t.Format == nil {
		return nil, nil
	}
	rf := &ResponseFormat{Type: t.Format.Type, Name: t.Format.Name, Schema: t.Format.Schema}
	if rf.Type == "json_schema" && isNull(rf.Schema) {
		return nil, &RequestError{Code: CodeMissingField, Param: "text.format.schema", Message: "text.format.schema is required when type is json_schema"}
	}
	return rf, nil
}
