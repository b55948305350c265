package provider

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/admission/estimate"
)

// Gemini routes are served by translation, not passthrough: callers speak
// OpenAI chat completions (the SDK they already have), and the adapter
// turns the request into generateContent (streamGenerateContent?alt=sse for
// streams) and the answer back into chat.completion / chat.completion.chunk.
// Only what maps one to one is translated — text messages, system prompts,
// max tokens, temperature, top_p, stop — so a request with tools, images or
// other parts never goes to a Gemini candidate (see GeminiTranslatable).

// GeminiTranslatable reports whether a chat request maps onto Gemini.
func GeminiTranslatable(req estimate.Request) bool { return len(GeminiUntranslatable(req)) == 0 }

// geminiReasonsMax bounds the reasons GeminiUntranslatable lists (the
// first of each kind say enough).
const geminiReasonsMax = 8

// GeminiUntranslatable lists what of a chat request the translation to
// generateContent does not carry, each naming the field: tools, n > 1,
// structured response_format, tool calls and tool results in the
// history, non-text content parts. Empty: the request translates.
func GeminiUntranslatable(req estimate.Request) []string {
	var why []string
	if n := len(req.Tools); n > 0 {
		why = append(why, fmt.Sprintf("tools (%d given)", n))
	}
	if req.N > 1 {
		why = append(why, fmt.Sprintf("n > 1 (n = %d)", req.N))
	}
	if rf := req.ResponseFormat; rf != nil && rf.Type != "text" {
		why = append(why, fmt.Sprintf("response_format of type %q", rf.Type))
	}
	for i, m := range req.Messages {
		if len(why) >= geminiReasonsMax {
			break
		}
		switch {
		case len(m.ToolCalls) > 0:
			why = append(why, fmt.Sprintf("tool calls in messages[%d]", i))
		case m.Role == "tool" || m.Role == "function":
			why = append(why, fmt.Sprintf("a %s message (messages[%d])", m.Role, i))
		}
		for j, p := range m.Parts {
			if p.Type != estimate.PartText {
				why = append(why, fmt.Sprintf("%s content (messages[%d].content[%d])", p.Type, i, j))
				break // one per message
			}
		}
	}
	return why
}

type geminiPart struct {
	Text string `json:"text"`
}

type geminiContent struct {
	Role  string       `json:"role,omitempty"`
	Parts []geminiPart `json:"parts"`
}

// geminiOptions are the chat request's fields the translation takes
// besides the estimator's request.
type geminiOptions struct {
	Temperature *float64        `json:"temperature"`
	TopP        *float64        `json:"top_p"`
	Stop        json.RawMessage `json:"stop"`
}

var geminiOptionFields = []string{"temperature", "top_p", "stop"}

func (o *geminiOptions) field(name string) any {
	switch name {
	case "temperature":
		return &o.Temperature
	case "top_p":
		return &o.TopP
	case "stop":
		return &o.Stop
	}
	return nil
}

// geminiRequest translates an OpenAI chat body into generateContent:
// from the estimator's request and, for the sampling options, the body's
// members it kept (decoding the body only when it kept none).
func geminiRequest(req estimate.Request, body []byte) ([]byte, error) {
	var opt geminiOptions
	if !decodeMembers(req.Members, geminiOptionFields, opt.field) {
		opt = geminiOptions{}
		_ = json.Unmarshal(body, &opt) // the parser already validated the body
	}
	out := struct {
		Contents          []geminiContent `json:"contents"`
		SystemInstruction *geminiContent  `json:"systemInstruction,omitempty"`
		GenerationConfig  map[string]any  `json:"generationConfig,omitempty"`
	}{}
	var system []geminiPart
	for _, m := range req.Messages {
		var parts []geminiPart
		for _, p := range m.Parts {
			parts = append(parts, geminiPart{Text: p.Text})
		}
		switch m.Role {
		case "system", "developer":
			system = append(system, parts...)
			continue
		case "assistant":
			out.Contents = append(out.Contents, geminiContent{Role: "model", Parts: parts})
		default:
			out.Contents = append(out.Contents, geminiContent{Role: "user", Parts: parts})
		}
	}
	if len(system) > 0 {
		out.SystemInstruction = &geminiContent{Parts: system}
	}
	gc := map[string]any{}
	if req.MaxTokens > 0 {
		gc["maxOutputTokens"] = req.MaxTokens
	}
	if opt.Temperature != nil {
		gc["temperature"] = *opt.Temperature
	}
	if opt.TopP != nil {
		gc["topP"] = *opt.TopP
	}
	if len(opt.Stop) > 0 && string(opt.Stop) != "null" {
		var one string
		var many []string
		if json.Unmarshal(opt.Stop, &one) == nil {
			gc["stopSequences"] = []string{one}
		} else if json.Unmarshal(opt.Stop, &many) == nil {
			gc["stopSequences"] = many
		}
	}
	if len(gc) > 0 {
		out.GenerationConfig = gc
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("translate to gemini: %w", err)
	}
	return b, nil
}

type geminiResponse struct {
	Candidates []struct {
		Content struct {
			Parts []geminiPart `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount     int64 `json:"promptTokenCount"`
		CandidatesTokenCount int64 `json:"candidatesTokenCount"`
		TotalTokenCount      int64 `json:"totalTokenCount"`
	} `json:"usageMetadata"`
}

// chatUsage is the usage object of a translated chat.completion.
type chatUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

func (g *geminiResponse) text() (string, string) {
	if len(g.Candidates) == 0 {
		return "", ""
	}
	var sb strings.Builder
	for _, p := range g.Candidates[0].Content.Parts {
		sb.WriteString(p.Text)
	}
	return sb.String(), finishReason(g.Candidates[0].FinishReason)
}

func (g *geminiResponse) usage() *chatUsage {
	if g.UsageMetadata == nil {
		return nil
	}
	u := g.UsageMetadata
	return &chatUsage{PromptTokens: u.PromptTokenCount, CompletionTokens: u.CandidatesTokenCount, TotalTokens: u.PromptTokenCount + u.CandidatesTokenCount}
}

func finishReason(r string) string {
	switch r {
	case "":
		return ""
	case "STOP":
		return "stop"
	case "MAX_TOKENS":
		return "length"
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII":
		return "content_filter"
	}
	return "stop"
}

// GeminiToOpenAI translates a generateContent response to chat.completion.
func GeminiToOpenAI(body []byte, model, reqID string) ([]byte, error) {
	var g geminiResponse
	if err := json.Unmarshal(body, &g); err != nil {
		return nil, fmt.Errorf("gemini response: %w", err)
	}
	text, fr := g.text()
	if fr == "" {
		fr = "stop"
	}
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type choice struct {
		Index        int    `json:"index"`
		Message      msg    `json:"message"`
		FinishReason string `json:"finish_reason"`
	}
	return json.Marshal(struct {
		ID      string     `json:"id"`
		Object  string     `json:"object"`
		Created int64      `json:"created"`
		Model   string     `json:"model"`
		Choices []choice   `json:"choices"`
		Usage   *chatUsage `json:"usage,omitempty"`
	}{"chatcmpl-" + reqID, "chat.completion", 0, model, []choice{{0, msg{"assistant", text}, fr}}, g.usage()})
}

// GeminiStream turns Gemini SSE chunks into chat.completion.chunk events.
// Create it with NewGeminiStream; feed it each event's data with Translate
// and end a clean stream with Finish.
type GeminiStream struct {
	model, id    string
	includeUsage bool
	started      bool
	stop         string
	usage        *chatUsage
}

// NewGeminiStream returns the translation of one Gemini stream answering
// the client's model under the chunk id id; includeUsage: the client asked
// for stream_options.include_usage.
func NewGeminiStream(model, id string, includeUsage bool) *GeminiStream {
	return &GeminiStream{model: model, id: id, includeUsage: includeUsage}
}

type chunkDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

func (t *GeminiStream) chunk(choices []chunkChoice, usage *chatUsage) []byte {
	return chatChunk(t.id, t.model, choices, usage)
}

// chatChunk is one chat.completion.chunk SSE event of a translated stream
// (Gemini's and Anthropic's, whose choices and usage differ in type).
func chatChunk[Choice, U any](id, model string, choices []Choice, usage *U) []byte {
	b, _ := json.Marshal(struct {
		ID      string   `json:"id"`
		Object  string   `json:"object"`
		Created int64    `json:"created"`
		Model   string   `json:"model"`
		Choices []Choice `json:"choices"`
		Usage   *U       `json:"usage,omitempty"`
	}{id, "chat.completion.chunk", 0, model, choices, usage})
	return append(append([]byte("data: "), b...), '\n', '\n')
}

// Translate turns one Gemini event's data into zero or more OpenAI events.
func (t *GeminiStream) Translate(data []byte) []byte {
	var g geminiResponse
	if json.Unmarshal(data, &g) != nil {
		return nil
	}
	if u := g.usage(); u != nil {
		t.usage = u
	}
	text, fr := g.text()
	var out []byte
	if !t.started {
		t.started = true
		out = append(out, t.chunk([]chunkChoice{{Delta: chunkDelta{Role: "assistant"}}}, nil)...)
	}
	if text != "" {
		out = append(out, t.chunk([]chunkChoice{{Delta: chunkDelta{Content: text}}}, nil)...)
	}
	if fr != "" {
		t.stop = fr
	}
	return out
}

// Finish writes the closing chunks: finish_reason, usage if asked, [DONE].
func (t *GeminiStream) Finish() []byte {
	fr := t.stop
	if fr == "" {
		fr = "stop"
	}
	out := t.chunk([]chunkChoice{{FinishReason: &fr}}, nil)
	if t.includeUsage && t.usage != nil {
		out = append(out, t.chunk([]chunkChoice{}, t.usage)...)
	}
	return append(out, "data: [DONE]\n\n"...)
}

func (t *GeminiStream) translate(_, data []byte) []byte { return t.Translate(data) }
func (t *GeminiStream) tail() []byte                    { return t.Finish() }
