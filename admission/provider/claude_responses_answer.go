package provider

import (
	"encoding/json"
	"fmt"
	"strings"
)

// A Messages answer as the Responses API's response object, and its SSE
// events as the Responses events.

type responsesContentPart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

// responsesOutputItem is an output item: a message or a function call.
type responsesOutputItem struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Status string `json:"status"`
	Role   string `json:"role,omitempty"`
	// Content is a message's parts (a pointer, so that a message's empty
	// list is [] and a function call has none; the SDKs append to it).
	Content   *[]responsesContentPart `json:"content,omitempty"`
	CallID    string                  `json:"call_id,omitempty"`
	Name      string                  `json:"name,omitempty"`
	Arguments *string                 `json:"arguments,omitempty"`
}

type responsesUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

func responsesUsageOf(u Usage) *responsesUsage {
	r := &responsesUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
	r.InputTokensDetails.CachedTokens = u.CachedInputTokens
	return r
}

// responseObject is the response as the client gets it: in_progress (no
// output, no usage), completed or incomplete.
type responseObject struct {
	ID                string                `json:"id"`
	Object            string                `json:"object"`
	CreatedAt         int64                 `json:"created_at"`
	Status            string                `json:"status"`
	Error             any                   `json:"error"`
	IncompleteDetails map[string]string     `json:"incomplete_details"`
	Model             string                `json:"model"`
	Output            []responsesOutputItem `json:"output"`
	ParallelToolCalls bool                  `json:"parallel_tool_calls"`
	ToolChoice        string                `json:"tool_choice"`
	Tools             []any                 `json:"tools"`
	Usage             *responsesUsage       `json:"usage"`
}

func newResponseObject(id, model string) responseObject {
	return responseObject{ID: id, Object: "response", Status: "in_progress", Model: model, Output: []responsesOutputItem{},
		ParallelToolCalls: true, ToolChoice: "auto", Tools: []any{}}
}

// finish sets the final status from Anthropic's stop reason: max_tokens
// (or the context window) is incomplete, as max_output_tokens is.
func (r *responseObject) finish(stop string, u Usage) {
	r.Status = "completed"
	if claudeFinish(stop, false) == "length" {
		r.Status = "incomplete"
		r.IncompleteDetails = map[string]string{"reason": "max_output_tokens"}
	}
	r.Usage = responsesUsageOf(u)
}

// ClaudeToResponse translates a Messages response to the Responses API's
// response object under id "resp_"+reqID; jsonTool as for ClaudeToOpenAI.
func ClaudeToResponse(body []byte, model, reqID string, jsonTool bool) ([]byte, error) {
	var calls []responsesOutputItem
	r, text, err := readClaudeMessage(body, jsonTool, func(id, name, args string) {
		calls = append(calls, responsesOutputItem{ID: "fc_" + id, Type: "function_call", Status: "completed", CallID: id, Name: name, Arguments: &args})
	})
	if err != nil {
		return nil, err
	}
	resp := newResponseObject("resp_"+reqID, model)
	if text != "" || len(calls) == 0 {
		resp.Output = append(resp.Output, responsesOutputItem{ID: "msg_" + reqID, Type: "message", Status: "completed", Role: "assistant",
			Content: &[]responsesContentPart{{Type: "output_text", Text: text, Annotations: []any{}}}})
	}
	resp.Output = append(resp.Output, calls...)
	var u Usage
	if r.Usage != nil {
		u = r.Usage.normalise()
	}
	resp.finish(r.StopReason, u)
	return json.Marshal(&resp)
}

// ClaudeResponsesStream turns Anthropic SSE events into the Responses
// events: message_start → response.created and response.in_progress; a
// text block → a message item (output_item.added, content_part.added,
// output_text.delta…, output_text.done, content_part.done,
// output_item.done); a tool_use block → a function_call item
// (output_item.added, function_call_arguments.delta…, .done,
// output_item.done), or with jsonTool a message item of its input;
// message_stop → response.completed (incomplete at max_tokens) with the
// usage; an error event → the Responses error event. Thinking blocks send
// nothing.
type ClaudeResponsesStream struct {
	id       string
	jsonTool bool
	usage    *StreamUsage
	resp     responseObject
	seq      int64
	stop     string
	done     bool
	blocks   map[int]*responsesBlock // by Anthropic block index
}

// responsesBlock is an open output item.
type responsesBlock struct {
	item   responsesOutputItem
	output int // output_index
	text   strings.Builder
}

// NewClaudeResponsesStream returns the translation of one stream
// answering the client's model under response id id.
func NewClaudeResponsesStream(model, id string, jsonTool bool, usage *StreamUsage) *ClaudeResponsesStream {
	return &ClaudeResponsesStream{id: id, jsonTool: jsonTool, usage: usage, resp: newResponseObject(id, model), blocks: map[int]*responsesBlock{}}
}

// event renders one named event with the next sequence_number.
func (t *ClaudeResponsesStream) event(typ string, fields map[string]any) []byte {
	fields["type"] = typ
	fields["sequence_number"] = t.seq
	t.seq++
	b, _ := json.Marshal(fields)
	return append(append(append(append([]byte("event: "), typ...), "\ndata: "...), b...), '\n', '\n')
}

// Translate turns one Anthropic event into zero or more Responses events.
func (t *ClaudeResponsesStream) Translate(event, data []byte) []byte {
	if t.done {
		return nil
	}
	ev, typ, ok := decodeClaudeEvent(event, data)
	if !ok {
		return nil
	}
	switch typ {
	case "message_start":
		return append(t.event("response.created", map[string]any{"response": &t.resp}),
			t.event("response.in_progress", map[string]any{"response": &t.resp})...)
	case "content_block_start":
		return t.blockStart(&ev)
	case "content_block_delta":
		return t.blockDelta(&ev)
	case "content_block_stop":
		return t.blockStop(ev.Index)
	case "message_delta":
		if ev.Delta != nil && ev.Delta.StopReason != "" {
			t.stop = ev.Delta.StopReason
		}
	case "message_stop":
		t.done = true
		u, _ := t.usage.Usage()
		t.resp.finish(t.stop, u)
		final := "response.completed"
		if t.resp.Status == "incomplete" {
			final = "response.incomplete"
		}
		return t.event(final, map[string]any{"response": &t.resp})
	case "error":
		t.done = true
		code, msg := "upstream_error", "the provider ended the stream with an error"
		if ev.Error != nil {
			code, msg = ev.Error.Type, ev.Error.Message
		}
		return t.event("error", map[string]any{"code": code, "message": msg, "param": nil})
	}
	return nil
}

func (t *ClaudeResponsesStream) blockStart(ev *claudeStreamEvent) []byte {
	cb := ev.ContentBlock
	if cb == nil || cb.Type != "text" && cb.Type != "tool_use" {
		return nil
	}
	b := &responsesBlock{output: len(t.resp.Output) + len(t.blocks)}
	if cb.Type == "tool_use" && !t.jsonTool {
		empty := ""
		b.item = responsesOutputItem{ID: "fc_" + cb.ID, Type: "function_call", Status: "in_progress", CallID: cb.ID, Name: cb.Name, Arguments: &empty}
		t.blocks[ev.Index] = b
		return t.event("response.output_item.added", map[string]any{"output_index": b.output, "item": b.item})
	}
	b.item = responsesOutputItem{ID: fmt.Sprintf("msg_%s_%d", strings.TrimPrefix(t.id, "resp_"), ev.Index), Type: "message", Status: "in_progress", Role: "assistant",
		Content: &[]responsesContentPart{}}
	t.blocks[ev.Index] = b
	return append(t.event("response.output_item.added", map[string]any{"output_index": b.output, "item": b.item}),
		t.event("response.content_part.added", map[string]any{"item_id": b.item.ID, "output_index": b.output, "content_index": 0,
			"part": responsesContentPart{Type: "output_text", Text: "", Annotations: []any{}}})...)
}

func (t *ClaudeResponsesStream) blockDelta(ev *claudeStreamEvent) []byte {
	b, d := t.blocks[ev.Index], ev.Delta
	if b == nil || d == nil {
		return nil
	}
	piece := d.Text
	if d.Type == "input_json_delta" {
		piece = d.PartialJSON
	} else if d.Type != "text_delta" {
		return nil
	}
	if piece == "" {
		return nil
	}
	b.text.WriteString(piece)
	if b.item.Type == "function_call" {
		return t.event("response.function_call_arguments.delta", map[string]any{"item_id": b.item.ID, "output_index": b.output, "delta": piece})
	}
	return t.event("response.output_text.delta", map[string]any{"item_id": b.item.ID, "output_index": b.output, "content_index": 0,
		"delta": piece, "logprobs": []any{}})
}

func (t *ClaudeResponsesStream) blockStop(index int) []byte {
	b := t.blocks[index]
	if b == nil {
		return nil
	}
	delete(t.blocks, index)
	text := b.text.String()
	b.item.Status = "completed"
	var out []byte
	if b.item.Type == "function_call" {
		if text == "" {
			text = "{}"
		}
		b.item.Arguments = &text
		out = t.event("response.function_call_arguments.done", map[string]any{"item_id": b.item.ID, "output_index": b.output, "arguments": text})
	} else {
		part := responsesContentPart{Type: "output_text", Text: text, Annotations: []any{}}
		b.item.Content = &[]responsesContentPart{part}
		out = append(t.event("response.output_text.done", map[string]any{"item_id": b.item.ID, "output_index": b.output, "content_index": 0,
			"text": text, "logprobs": []any{}}),
			t.event("response.content_part.done", map[string]any{"item_id": b.item.ID, "output_index": b.output, "content_index": 0, "part": part})...)
	}
	t.resp.Output = append(t.resp.Output, b.item)
	return append(out, t.event("response.output_item.done", map[string]any{"output_index": b.output, "item": b.item})...)
}

func (t *ClaudeResponsesStream) translate(event, data []byte) []byte { return t.Translate(event, data) }

// tail is nil: message_stop brings the closing events.
func (t *ClaudeResponsesStream) tail() []byte { return nil }
