package provider

import (
	"bytes"
	"encoding/json"
	"strings"
)

// StreamUsage accumulates usage from a streamed response, one SSE event at a
// time. It understands:
//
//   - OpenAI / Azure / OpenAI-compatible chat chunks: the final chunk's
//     `usage` (sent when stream_options.include_usage is true) is
//     authoritative; otherwise content, refusal, reasoning and tool-argument
//     deltas are counted as a fallback: max(number of delta chunks,
//     ceil(delta bytes / 4)). "[DONE]" ends the stream.
//   - Anthropic events: message_start (message.usage: input_tokens, cache
//     reads/writes, initial output_tokens), message_delta (usage.output_tokens,
//     cumulative), content_block_delta (fallback count), message_stop.
//   - OpenAI legacy completions chunks: choices[].text deltas, the same
//     final usage chunk.
//   - OpenAI Responses API events: response.completed (or incomplete,
//     failed) carries the response's usage (authoritative, reasoning
//     tokens included); *.delta events are the fallback count.
//   - Gemini streamGenerateContent chunks: the latest usageMetadata
//     (cumulative); a candidate with finishReason plus usageMetadata ends it.
//
// The zero value is not usable; create one with NewStreamUsage. A
// StreamUsage is not safe for concurrent use.
type StreamUsage struct {
	ad adapter // the provider kind's

	usage      Usage
	reported   bool // the provider's final usage was seen
	inputKnown bool
	finished   bool

	deltaChunks int64
	deltaBytes  int64
}

// NewStreamUsage returns an accumulator for a stream from a kind of provider.
func NewStreamUsage(kind Kind) *StreamUsage { return &StreamUsage{ad: adapterOf(kind)} }

type openAIChunk struct {
	Usage   *openAIUsage `json:"usage"`
	Choices []struct {
		Text  string `json:"text"` // legacy completions
		Delta *struct {
			Content          string `json:"content"`
			Refusal          string `json:"refusal"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
			ToolCalls        []struct {
				Function *struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
}

type anthropicEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Usage *anthropicUsage `json:"usage"`
	} `json:"message"`
	Usage *struct {
		InputTokens              *int64 `json:"input_tokens"`
		OutputTokens             *int64 `json:"output_tokens"`
		CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	Delta *struct {
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
	} `json:"delta"`
}

type geminiChunk struct {
	UsageMetadata *geminiUsage `json:"usageMetadata"`
	Candidates    []struct {
		FinishReason string `json:"finishReason"`
		Content      *struct {
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"content"`
	} `json:"candidates"`
}

// Feed consumes one SSE event: its `event:` field (may be empty) and its
// joined `data:` payload. Malformed or unknown events are ignored.
func (s *StreamUsage) Feed(event, data []byte) {
	data = bytes.TrimSpace(data)
	s.ad.feed(s, event, data)
}

// responsesEvent is one Responses API stream event: a delta (text,
// refusal, reasoning, function-call arguments) or the response it ends
// with (response.completed / incomplete / failed carry the usage).
type responsesEvent struct {
	Type     string `json:"type"`
	Delta    any    `json:"delta"` // a string for every delta this counts
	Response *struct {
		Usage *openAIUsage `json:"usage"`
	} `json:"response"`
}

// isResponsesEvent tells a Responses API event from a chat or completions
// chunk: OpenAI names every Responses event (`event: response.…`); a
// stream without event names is recognised by its leading type.
func isResponsesEvent(event, data []byte) bool {
	if len(event) > 0 {
		return bytes.HasPrefix(event, []byte("response.")) || bytes.Equal(event, []byte("error"))
	}
	return bytes.HasPrefix(data, []byte(`{"type":"response.`))
}

func (s *StreamUsage) feedResponses(data []byte) {
	if len(data) == 0 || data[0] != '{' {
		return
	}
	var ev responsesEvent
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "response.completed", "response.incomplete", "response.failed":
		s.finished = true
		if ev.Response != nil && ev.Response.Usage != nil {
			if u, ok := ev.Response.Usage.normalise(); ok {
				s.usage, s.reported, s.inputKnown = u, true, true
			}
		}
	case "error":
		s.finished = true
	default:
		if d, ok := ev.Delta.(string); ok && strings.HasSuffix(ev.Type, ".delta") {
			s.delta(d)
		}
	}
}

func (s *StreamUsage) delta(text string) {
	if text == "" {
		return
	}
	s.deltaChunks++
	s.deltaBytes += int64(len(text))
}

func (s *StreamUsage) feedOpenAI(data []byte) {
	if bytes.Equal(data, []byte("[DONE]")) {
		s.finished = true
		return
	}
	if len(data) == 0 || data[0] != '{' {
		return
	}
	var c openAIChunk
	if json.Unmarshal(data, &c) != nil {
		return
	}
	for _, ch := range c.Choices {
		s.delta(ch.Text)
		d := ch.Delta
		if d == nil {
			continue
		}
		n := len(d.Content) + len(d.Refusal) + len(d.ReasoningContent) + len(d.Reasoning)
		for _, tc := range d.ToolCalls {
			if tc.Function != nil {
				n += len(tc.Function.Name) + len(tc.Function.Arguments)
			}
		}
		if n > 0 {
			s.deltaChunks++
			s.deltaBytes += int64(n)
		}
	}
	if c.Usage != nil {
		if u, ok := c.Usage.normalise(); ok {
			s.usage, s.reported, s.inputKnown, s.finished = u, true, true, true
		}
	}
}

func (s *StreamUsage) feedAnthropic(event, data []byte) {
	if len(data) == 0 || data[0] != '{' {
		return
	}
	var ev anthropicEvent
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	typ := string(bytes.TrimSpace(event))
	if typ == "" {
		typ = ev.Type
	}
	switch typ {
	case "message_start":
		if ev.Message != nil && ev.Message.Usage != nil {
			s.usage = ev.Message.Usage.normalise()
			s.inputKnown = true
		}
	case "content_block_delta":
		if ev.Delta != nil {
			s.delta(ev.Delta.Text + ev.Delta.PartialJSON + ev.Delta.Thinking)
		}
	case "message_delta":
		if u := ev.Usage; u != nil {
			au := anthropicUsage{
				InputTokens:              s.usage.InputTokens - s.usage.CachedInputTokens - s.usage.CacheWriteInputTokens,
				CacheReadInputTokens:     s.usage.CachedInputTokens,
				CacheCreationInputTokens: s.usage.CacheWriteInputTokens,
				OutputTokens:             s.usage.OutputTokens,
			}
			// message_delta counts are cumulative; input fields appear only
			// in newer API versions.
			if u.InputTokens != nil && *u.InputTokens > 0 {
				au.InputTokens = *u.InputTokens
				s.inputKnown = true
			}
			if u.CacheReadInputTokens != nil && *u.CacheReadInputTokens > 0 {
				au.CacheReadInputTokens = *u.CacheReadInputTokens
			}
			if u.CacheCreationInputTokens != nil && *u.CacheCreationInputTokens > 0 {
				au.CacheCreationInputTokens = *u.CacheCreationInputTokens
			}
			if u.OutputTokens != nil {
				au.OutputTokens = *u.OutputTokens
				s.reported = true
			}
			s.usage = au.normalise()
		}
	case "message_stop":
		s.finished = true
	case "error":
		s.finished = true
	}
}

func (s *StreamUsage) feedGemini(data []byte) {
	// Without alt=sse Gemini streams one JSON array; tolerate its brackets
	// and separators around each element.
	data = bytes.TrimLeft(data, "[, \r\n\t")
	data = bytes.TrimRight(data, "], \r\n\t")
	if len(data) == 0 || data[0] != '{' {
		return
	}
	var c geminiChunk
	if json.Unmarshal(data, &c) != nil {
		return
	}
	done := false
	for _, cand := range c.Candidates {
		if cand.Content != nil {
			for _, p := range cand.Content.Parts {
				s.delta(p.Text)
			}
		}
		if cand.FinishReason != "" {
			done = true
		}
	}
	if c.UsageMetadata != nil {
		s.usage = c.UsageMetadata.normalise()
		s.inputKnown = s.usage.InputTokens > 0
		if done {
			s.reported, s.finished = true, true
		}
	}
}

// approxOutput is the fallback output count from deltas.
func (s *StreamUsage) approxOutput() int64 {
	return max(s.deltaChunks, (s.deltaBytes+3)/4)
}

// Usage returns the usage so far. partial is true when the counts are not
// the provider's final report (the stream was cut, or the provider never
// sent usage): OutputTokens is then the larger of any reported count and the
// delta approximation, and InputTokens is 0 if the provider never reported
// it (use the estimate).
func (s *StreamUsage) Usage() (Usage, bool) {
	if s.reported {
		return s.usage, false
	}
	u := s.usage
	if !s.inputKnown {
		u.InputTokens, u.CachedInputTokens, u.CacheWriteInputTokens = 0, 0, 0
	}
	u.OutputTokens = max(u.OutputTokens, s.approxOutput())
	return u, true
}

// Finished reports whether the stream's terminal event was seen ([DONE],
// message_stop, an error event, or Gemini's final chunk).
func (s *StreamUsage) Finished() bool { return s.finished }
