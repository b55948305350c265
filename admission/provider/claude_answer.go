package provider

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The answer's side of the Anthropic translation: a Messages response (or
// its SSE events) as chat.completion (chat.completion.chunk).

// claudeResponse is a Messages response as the translation reads it.
type claudeResponse struct {
	Type       string                `json:"type"`
	Content    []claudeResponseBlock `json:"content"`
	StopReason string                `json:"stop_reason"`
	Usage      *anthropicUsage       `json:"usage"`
}

type claudeResponseBlock struct {
	Type  string          `json:"type"` // text, tool_use, thinking, redacted_thinking, …
	Text  string          `json:"text"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// claudeFinish maps Anthropic's stop_reason to OpenAI's finish_reason;
// jsonTool: a tool_use stop is the forced response_format tool, which is
// the answer itself ("stop").
func claudeFinish(stop string, jsonTool bool) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		if jsonTool {
			return "stop"
		}
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop" // end_turn, stop_sequence, pause_turn, ""
}

// chatCompletionUsage is the usage of a translated answer in OpenAI's
// shape: prompt tokens include cache reads and writes, of which the reads
// are cached_tokens.
type chatCompletionUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func chatUsageOf(u Usage) *chatCompletionUsage {
	c := &chatCompletionUsage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
	c.PromptTokensDetails.CachedTokens = u.CachedInputTokens
	return c
}

type chatFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type chatToolCallOut struct {
	Index    *int         `json:"index,omitempty"` // streams only
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function chatFunction `json:"function"`
}

// readClaudeMessage decodes a Messages response and walks its content
// once for both answer shapes (chat completion, Responses): the text, with
// a forced response_format tool's input taken as text (jsonTool), and each
// other tool_use handed to call with its arguments ("{}" when empty).
// thinking and redacted_thinking blocks have no place in either answer;
// their tokens are in the output count.
func readClaudeMessage(body []byte, jsonTool bool, call func(id, name, args string)) (claudeResponse, string, error) {
	var r claudeResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return r, "", fmt.Errorf("anthropic response: %w", err)
	}
	if r.Type != "message" {
		return r, "", fmt.Errorf("anthropic response of type %q, not a message", r.Type)
	}
	var text strings.Builder
	for _, b := range r.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := string(b.Input)
			if args == "" || args == "null" {
				args = "{}"
			}
			if jsonTool {
				text.WriteString(args)
				continue
			}
			call(b.ID, b.Name, args)
		}
	}
	return r, text.String(), nil
}

// ClaudeToOpenAI translates a Messages response to chat.completion for
// the client's model under id "chatcmpl-"+reqID; jsonTool: the request's
// response_format was sent as a forced tool, whose input is the content.
func ClaudeToOpenAI(body []byte, model, reqID string, jsonTool bool) ([]byte, error) {
	var calls []chatToolCallOut
	r, text, err := readClaudeMessage(body, jsonTool, func(id, name, args string) {
		calls = append(calls, chatToolCallOut{ID: id, Type: "function", Function: chatFunction{Name: name, Arguments: args}})
	})
	if err != nil {
		return nil, err
	}
	msg := struct {
		Role      string            `json:"role"`
		Content   *string           `json:"content"`
		Refusal   *string           `json:"refusal"`
		ToolCalls []chatToolCallOut `json:"tool_calls,omitempty"`
	}{Role: "assistant", ToolCalls: calls}
	if text != "" || len(calls) == 0 {
		msg.Content = &text
	}
	type choice struct {
		Index        int    `json:"index"`
		Message      any    `json:"message"`
		Logprobs     *int   `json:"logprobs"`
		FinishReason string `json:"finish_reason"`
	}
	var usage *chatCompletionUsage
	if r.Usage != nil {
		usage = chatUsageOf(r.Usage.normalise())
	}
	return json.Marshal(struct {
		ID      string               `json:"id"`
		Object  string               `json:"object"`
		Created int64                `json:"created"`
		Model   string               `json:"model"`
		Choices []choice             `json:"choices"`
		Usage   *chatCompletionUsage `json:"usage,omitempty"`
	}{"chatcmpl-" + reqID, "chat.completion", 0, model, []choice{{0, msg, nil, claudeFinish(r.StopReason, jsonTool)}}, usage})
}

// ClaudeStream turns Anthropic SSE events into chat.completion.chunk
// events: message_start gives the role chunk, text deltas content chunks,
// a tool_use block a tool call (its id and name, then its input JSON as
// argument deltas), message_stop the finish chunk, the usage chunk when the
// client asked for stream_options.include_usage, and [DONE]; an error
// event becomes an OpenAI-style error chunk. Create it with
// NewClaudeStream; it reads the usage from the Stream's StreamUsage.
type ClaudeStream struct {
	model, id    string
	includeUsage bool
	jsonTool     bool
	usage        *StreamUsage
	stop         string
	done         bool
	// tools maps a content block index to its tool call's index.
	tools map[int]int
}

// NewClaudeStream returns the translation of one stream answering the
// client's model under chunk id id; usage is the stream's usage
// accumulator (fed before Translate); jsonTool as for ClaudeToOpenAI.
func NewClaudeStream(model, id string, includeUsage, jsonTool bool, usage *StreamUsage) *ClaudeStream {
	return &ClaudeStream{model: model, id: id, includeUsage: includeUsage, jsonTool: jsonTool, usage: usage, tools: map[int]int{}}
}

type claudeStreamEvent struct {
	Type         string               `json:"type"`
	Index        int                  `json:"index"`
	ContentBlock *claudeResponseBlock `json:"content_block"`
	Delta        *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type claudeChunkDelta struct {
	Role      string            `json:"role,omitempty"`
	Content   *string           `json:"content,omitempty"`
	ToolCalls []chatToolCallOut `json:"tool_calls,omitempty"`
}

type claudeChunkChoice struct {
	Index        int              `json:"index"`
	Delta        claudeChunkDelta `json:"delta"`
	FinishReason *string          `json:"finish_reason"`
}

func (t *ClaudeStream) chunk(choices []claudeChunkChoice, usage *chatCompletionUsage) []byte {
	return chatChunk(t.id, t.model, choices, usage)
}

// decodeClaudeEvent reads one Anthropic stream event and its type: the
// event name, or the data's type when the event is unnamed (ok false: the
// data is not an event). Both translations of Anthropic streams start so.
func decodeClaudeEvent(event, data []byte) (ev claudeStreamEvent, typ string, ok bool) {
	if json.Unmarshal(data, &ev) != nil {
		return ev, "", false
	}
	typ = strings.TrimSpace(string(event))
	if typ == "" {
		typ = ev.Type
	}
	return ev, typ, true
}

func (t *ClaudeStream) delta(d claudeChunkDelta) []byte {
	return t.chunk([]claudeChunkChoice{{Delta: d}}, nil)
}

// Translate turns one Anthropic event (its event name, or the data's type
// when unnamed) into zero or more OpenAI events.
func (t *ClaudeStream) Translate(event, data []byte) []byte {
	if t.done {
		return nil
	}
	ev, typ, ok := decodeClaudeEvent(event, data)
	if !ok {
		return nil
	}
	switch typ {
	case "message_start":
		empty := ""
		return t.delta(claudeChunkDelta{Role: "assistant", Content: &empty})
	case "content_block_start":
		b := ev.ContentBlock
		if b == nil || b.Type != "tool_use" || t.jsonTool {
			return nil
		}
		n := len(t.tools)
		t.tools[ev.Index] = n
		return t.delta(claudeChunkDelta{ToolCalls: []chatToolCallOut{{Index: &n, ID: b.ID, Type: "function", Function: chatFunction{Name: b.Name}}}})
	case "content_block_delta":
		return t.blockDelta(&ev)
	case "message_delta":
		if ev.Delta != nil && ev.Delta.StopReason != "" {
			t.stop = ev.Delta.StopReason
		}
	case "message_stop":
		return t.finish()
	case "error":
		t.done = true
		e := struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		}{"the provider ended the stream with an error", "upstream_error", "upstream_error"}
		if ev.Error != nil {
			e.Message, e.Code = ev.Error.Message, ev.Error.Type
			if ev.Error.Type == "overloaded_error" {
				e.Type = "upstream_overloaded"
			}
		}
		b, _ := json.Marshal(struct {
			Error any `json:"error"`
		}{e})
		return append(append([]byte("data: "), b...), '\n', '\n')
	}
	return nil // ping, content_block_stop, unknown events
}

func (t *ClaudeStream) blockDelta(ev *claudeStreamEvent) []byte {
	d := ev.Delta
	if d == nil {
		return nil
	}
	switch d.Type {
	case "text_delta":
		if d.Text == "" {
			return nil
		}
		return t.delta(claudeChunkDelta{Content: &d.Text})
	case "input_json_delta":
		if d.PartialJSON == "" {
			return nil
		}
		if t.jsonTool {
			return t.delta(claudeChunkDelta{Content: &d.PartialJSON})
		}
		n, ok := t.tools[ev.Index]
		if !ok {
			return nil
		}
		return t.delta(claudeChunkDelta{ToolCalls: []chatToolCallOut{{Index: &n, Function: chatFunction{Arguments: d.PartialJSON}}}})
	}
	return nil // thinking and signature deltas
}

// finish writes the closing chunks: finish_reason, usage if asked, [DONE].
func (t *ClaudeStream) finish() []byte {
	t.done = true
	fr := claudeFinish(t.stop, t.jsonTool)
	out := t.chunk([]claudeChunkChoice{{FinishReason: &fr}}, nil)
	if t.includeUsage {
		u, _ := t.usage.Usage()
		out = append(out, t.chunk([]claudeChunkChoice{}, chatUsageOf(u))...)
	}
	return append(out, "data: [DONE]\n\n"...)
}

func (t *ClaudeStream) translate(event, data []byte) []byte { return t.Translate(event, data) }

// tail is nil: message_stop brings the closing chunks.
func (t *ClaudeStream) tail() []byte { return nil }
