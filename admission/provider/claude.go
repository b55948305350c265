package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/sluice-dev/sluice/admission/estimate"
)

// Anthropic providers answer POST /v1/chat/completions by translation, as
// Gemini does: the client speaks OpenAI chat completions and the adapter
// sends Anthropic Messages, then turns the message (or its SSE events) back
// into chat.completion (chat.completion.chunk). Unlike Gemini the
// translation carries tools, tool calls and tool results, images and
// structured output (json_schema / json_object as one forced tool whose
// input is the answer). What has no Anthropic counterpart (n > 1,
// logprobs, audio, penalties, seed, …) is refused, naming the field:
// sending it anyway would answer something other than what was asked.

// ClaudeOutputMax is each Claude model's documented maximum output, the
// bound of the max_tokens the translation sends when the client set
// neither max_completion_tokens nor max_tokens (Anthropic requires one;
// OpenAI's default is "as long as the context allows"). The translation
// then sends the route's default output reservation
// (default_max_output_tokens, 4096 unless configured), bounded by this:
// Anthropic counts max_tokens against the output-tokens-per-minute limit
// when a request arrives, so sending the model's whole maximum would
// spend a minute's output budget on every request, and the ledger
// reserves the same amount. Models not in the table: claudeMaxTokensFallback.
var ClaudeOutputMax = map[string]int64{
	"claude-3-haiku": 4096, "claude-3-opus": 4096, "claude-3-sonnet": 4096,
	"claude-3-5": 8192, "claude-3-7": 64000,
	"claude-sonnet-4": 64000, "claude-opus-4": 32000, "claude-haiku-4": 64000,
	"claude-opus-4-5": 64000,
}

// claudeMaxTokensFallback is the output maximum of a model not in
// ClaudeOutputMax, and the default when the route gives none: every
// Claude model since claude-3 produces at least this much.
const claudeMaxTokensFallback = 4096

// ClaudeMaxTokens is the max_tokens sent to model when the client set
// none and the route's default output is routeDefault (0: 4096): that,
// bounded by the model's maximum output (the longest matching prefix of
// ClaudeOutputMax).
func ClaudeMaxTokens(model string, routeDefault int64) int64 {
	if routeDefault <= 0 {
		routeDefault = claudeMaxTokensFallback
	}
	return min(routeDefault, claudeOutputMax(model))
}

func claudeOutputMax(model string) int64 {
	m := strings.ToLower(model)
	if i := strings.LastIndexAny(m, "/."); i >= 0 && strings.Contains(m[i+1:], "claude") {
		m = m[i+1:] // Bedrock's anthropic.claude-…, Vertex's publishers/…/claude-…
	}
	best, n := "", int64(claudeMaxTokensFallback)
	for p, v := range ClaudeOutputMax {
		if strings.HasPrefix(m, p) && len(p) > len(best) {
			best, n = p, v
		}
	}
	return n
}

// claudeJSONTool is the forced tool's name for response_format json_object
// (json_schema uses the schema's name, which OpenAI restricts to the same
// characters as Anthropic's tool names).
const claudeJSONTool = "json_response"

// claudeReasonsMax bounds the reasons a refusal lists.
const claudeReasonsMax = 8

// chatFieldRule says what the translation does with one top-level field of
// an OpenAI chat request.
type chatFieldRule uint8

const (
	fieldTranslated chatFieldRule = iota // carried (or local: stream_options)
	fieldIgnored                         // meaningless to Anthropic and harmless to drop
	fieldRefused                         // refused when set to anything but its default
)

// chatFields are the OpenAI chat request fields the translation knows. A
// field not here is refused: the translation cannot tell what it asks.
var chatFields = map[string]chatFieldRule{
	"model": fieldTranslated, "messages": fieldTranslated, "max_tokens": fieldTranslated,
	"max_completion_tokens": fieldTranslated, "temperature": fieldTranslated, "top_p": fieldTranslated,
	"stop": fieldTranslated, "stream": fieldTranslated, "stream_options": fieldTranslated,
	"tools": fieldTranslated, "tool_choice": fieldTranslated, "parallel_tool_calls": fieldTranslated,
	"response_format": fieldTranslated, "user": fieldTranslated, "safety_identifier": fieldTranslated,
	"n": fieldTranslated, "store": fieldTranslated, "service_tier": fieldTranslated,
	// Stored-completion metadata and a prompt-cache routing hint: they
	// change nothing in the answer.
	"metadata": fieldIgnored, "prompt_cache_key": fieldIgnored,
	"logprobs": fieldRefused, "top_logprobs": fieldRefused, "audio": fieldRefused, "modalities": fieldRefused,
	"prediction": fieldRefused, "logit_bias": fieldRefused, "presence_penalty": fieldRefused,
	"frequency_penalty": fieldRefused, "seed": fieldRefused, "reasoning_effort": fieldRefused,
	"web_search_options": fieldRefused, "functions": fieldRefused, "function_call": fieldRefused,
	"verbosity": fieldRefused,
}

// isDefault reports whether a refused field's value asks for nothing:
// null, false, 0, "", [], {}, modalities ["text"].
func isDefault(name string, v json.RawMessage) bool {
	s := string(bytes.TrimSpace(v))
	switch s {
	case "null", "false", "0", "0.0", `""`, "[]", "{}":
		return true
	}
	if name == "modalities" {
		var m []string
		return json.Unmarshal(v, &m) == nil && len(m) == 1 && m[0] == "text"
	}
	return false
}

// Anthropic Messages request, as the translation writes it.
type claudeRequest struct {
	Model         string          `json:"model"`
	System        []claudeBlock   `json:"system,omitempty"`
	Messages      []claudeMessage `json:"messages"`
	MaxTokens     int64           `json:"max_tokens"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	Tools         []claudeTool    `json:"tools,omitempty"`
	ToolChoice    map[string]any  `json:"tool_choice,omitempty"`
	Metadata      *claudeMetadata `json:"metadata,omitempty"`
	ServiceTier   string          `json:"service_tier,omitempty"`
}

type claudeMetadata struct {
	UserID string `json:"user_id"`
}

type claudeMessage struct {
	Role    string        `json:"role"`
	Content []claudeBlock `json:"content"`
}

type claudeSource struct {
	Type      string `json:"type"` // base64, url
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// claudeBlock is one content block of a request: text, image, tool_use,
// tool_result.
type claudeBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Source    *claudeSource   `json:"source,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   []claudeBlock   `json:"content,omitempty"`
}

type claudeTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// The OpenAI chat request as the translation reads it.
type chatRequest struct {
	Model string `json:"model"`
	// messages are not decoded here: the translation reads them as the
	// estimator parsed them (estimate.Request.Messages).
	MaxTokens           *int64              `json:"max_tokens"`
	MaxCompletionTokens *int64              `json:"max_completion_tokens"`
	Temperature         *float64            `json:"temperature"`
	TopP                *float64            `json:"top_p"`
	Stop                json.RawMessage     `json:"stop"`
	Stream              bool                `json:"stream"`
	Tools               []chatTool          `json:"tools"`
	ToolChoice          json.RawMessage     `json:"tool_choice"`
	ParallelToolCalls   *bool               `json:"parallel_tool_calls"`
	ResponseFormat      *chatResponseFormat `json:"response_format"`
	User                string              `json:"user"`
	SafetyIdentifier    string              `json:"safety_identifier"`
	N                   *int64              `json:"n"`
	Store               *bool               `json:"store"`
	ServiceTier         string              `json:"service_tier"`
}

type chatResponseFormat struct {
	Type       string          `json:"type"`
	JSONSchema *chatJSONSchema `json:"json_schema"`
}

type chatJSONSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
}

type chatTool struct {
	Type     string            `json:"type"`
	Function *chatToolFunction `json:"function"`
}

type chatToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// claudeTranslation is a chat request translated to Messages, or the
// reasons it does not translate.
type claudeTranslation struct {
	req claudeRequest
	// jsonTool: response_format became a forced tool, whose input is the
	// answer's content (and whose tool_use stop is finish "stop").
	jsonTool bool
	why      []string
	// where names the client's field of chat message i (nil:
	// messages[i]); the Responses API's input items are translated as
	// chat messages, and its refusals name input[k].
	where func(i int) string
	// clientModel is the client's model, sent when no upstream model is
	// given; clientMax: the client set max_tokens (else body sends the
	// candidate's default, ClaudeMaxTokens).
	clientModel string
	clientMax   bool
}

// at is the client's name of chat message i.
func (t *claudeTranslation) at(i int) string {
	if t.where != nil {
		return t.where(i)
	}
	return fmt.Sprintf("messages[%d]", i)
}

func (t *claudeTranslation) refuse(format string, args ...any) {
	if len(t.why) < claudeReasonsMax {
		t.why = append(t.why, fmt.Sprintf(format, args...))
	}
}

// body is the Messages body of the translation for upstreamModel (""
// the client's model) with defaultMax the route's default output, and
// whether response_format went as a forced tool, or why it does not
// translate. The translation is the same for every candidate but for the
// model and the max_tokens sent when the client set none, so one
// translation serves them all (Parsed): only those two are set here, on a
// copy.
func (t *claudeTranslation) body(upstreamModel string, defaultMax int64) ([]byte, bool, error) {
	if len(t.why) > 0 {
		return nil, false, fmt.Errorf("translate to anthropic messages: %s", strings.Join(t.why, "; "))
	}
	req := t.req
	if upstreamModel == "" {
		upstreamModel = t.clientModel
	}
	req.Model = upstreamModel
	if !t.clientMax {
		req.MaxTokens = ClaudeMaxTokens(upstreamModel, defaultMax)
	}
	b, err := json.Marshal(&req)
	if err != nil {
		return nil, false, fmt.Errorf("translate to anthropic messages: %w", err)
	}
	return b, t.jsonTool, nil
}

// translateChatToClaude is the whole request translation: the fields it
// refuses, then the parameters, the tools and the messages. req is the
// body as the estimator parsed it (zero: not parsed, parsed here): its
// messages are translated as they are, not decoded again, and its
// members (estimate.Request.Members, when the parse kept them) are read
// instead of decoding the body's other fields again. The model and the
// default max_tokens are left to body, which sets them per candidate.
func translateChatToClaude(body []byte, req *estimate.Request) *claudeTranslation {
	t := &claudeTranslation{}
	var members []estimate.Member
	if req != nil {
		members = req.Members
	}
	top, err := chatTop(body, members)
	if err != nil {
		t.refuse("a body that is not a JSON object")
		return t
	}
	names := make([]string, 0, len(top))
	for k := range top {
		names = append(names, k)
	}
	sort.Strings(names) // a stable message
	for _, k := range names {
		rule, known := chatFields[k]
		switch {
		case !known:
			t.refuse("the field %s (not a chat completions parameter the translation knows)", k)
		case rule == fieldRefused && !isDefault(k, top[k]):
			t.refuse("%s (Anthropic Messages has no counterpart)", k)
		}
	}
	var in chatRequest
	if err := decodeChatRequest(body, members, &in); err != nil {
		t.refuse("a body whose fields do not have their OpenAI types (%v)", err)
		return t
	}
	if req == nil || req.Format != estimate.FormatOpenAIChat {
		parsed, err := estimate.ParseOpenAIChat(body)
		if err != nil {
			t.refuse("a body that is not a chat completion (%v)", err)
			return t
		}
		req = &parsed
	}
	t.translate(&in, req.Messages)
	return t
}

// translate carries a chat request's parameters, tools and messages (of
// a chat completion, or of the Responses request that means it).
func (t *claudeTranslation) translate(in *chatRequest, msgs []estimate.Message) {
	t.clientModel = in.Model
	t.params(in)
	t.tools(in)
	t.messages(msgs)
}

// chatTop is the body's top-level members by key, as Unmarshal into a
// map of raw messages gives them (the last of a repeated key wins): from
// members when the parser kept them (their keys are what Unmarshal
// decodes them to, their values windows on the body, not copies).
func chatTop(body []byte, members []estimate.Member) (map[string]json.RawMessage, error) {
	if members == nil {
		var top map[string]json.RawMessage
		err := json.Unmarshal(body, &top)
		return top, err
	}
	top := make(map[string]json.RawMessage, len(members))
	for _, mb := range members {
		top[string(mb.Key)] = mb.Value
	}
	return top, nil
}

// chatRequestFields are chatRequest's JSON names, for decodeChatRequest.
var chatRequestFields = []string{"model", "max_tokens", "max_completion_tokens", "temperature", "top_p",
	"stop", "stream", "tools", "tool_choice", "parallel_tool_calls", "response_format", "user", "safety_identifier",
	"n", "store", "service_tier"}

// decodeChatRequest is json.Unmarshal(body, in), from the members the
// parser kept when it kept them (decodeMembers).
func decodeChatRequest(body []byte, members []estimate.Member, in *chatRequest) error {
	if decodeMembers(members, chatRequestFields, in.field) {
		return nil
	}
	*in = chatRequest{}
	return json.Unmarshal(body, in)
}

// field is a pointer to the field of in named name (nil: none).
func (in *chatRequest) field(name string) any {
	switch name {
	case "model":
		return &in.Model
	case "max_tokens":
		return &in.MaxTokens
	case "max_completion_tokens":
		return &in.MaxCompletionTokens
	case "temperature":
		return &in.Temperature
	case "top_p":
		return &in.TopP
	case "stop":
		return &in.Stop
	case "stream":
		return &in.Stream
	case "tools":
		return &in.Tools
	case "tool_choice":
		return &in.ToolChoice
	case "parallel_tool_calls":
		return &in.ParallelToolCalls
	case "response_format":
		return &in.ResponseFormat
	case "user":
		return &in.User
	case "safety_identifier":
		return &in.SafetyIdentifier
	case "n":
		return &in.N
	case "store":
		return &in.Store
	case "service_tier":
		return &in.ServiceTier
	}
	return nil
}

// params carries the sampling and output parameters.
func (t *claudeTranslation) params(in *chatRequest) {
	r := &t.req
	r.Stream = in.Stream
	if in.N != nil && *in.N > 1 {
		t.refuse("n > 1 (n = %d; Anthropic returns one message)", *in.N)
	}
	if in.Store != nil && *in.Store {
		t.refuse("store (Anthropic keeps no stored completions)")
	}
	switch in.ServiceTier {
	case "", "auto", "default":
	default:
		t.refuse("service_tier %q (only auto or default translate)", in.ServiceTier)
	}
	switch {
	case in.MaxCompletionTokens != nil && *in.MaxCompletionTokens > 0:
		r.MaxTokens, t.clientMax = *in.MaxCompletionTokens, true
	case in.MaxTokens != nil && *in.MaxTokens > 0:
		r.MaxTokens, t.clientMax = *in.MaxTokens, true
	default: // none from the client: body sends the candidate's (ClaudeMaxTokens)
	}
	if tp := in.Temperature; tp != nil {
		if *tp > 1 || *tp < 0 || math.IsNaN(*tp) {
			t.refuse("temperature %g (Anthropic accepts 0 to 1, OpenAI 0 to 2; the scales are not the same)", *tp)
		}
		r.Temperature = tp
	}
	r.TopP = in.TopP
	if len(in.Stop) > 0 && string(in.Stop) != "null" {
		var one string
		var many []string
		switch {
		case json.Unmarshal(in.Stop, &one) == nil:
			r.StopSequences = []string{one}
		case json.Unmarshal(in.Stop, &many) == nil:
			r.StopSequences = many
		default:
			t.refuse("stop that is neither a string nor an array of strings")
		}
	}
	if u := in.User; u != "" {
		r.Metadata = &claudeMetadata{UserID: u}
	} else if u := in.SafetyIdentifier; u != "" {
		r.Metadata = &claudeMetadata{UserID: u}
	}
}

// tools carries the function tools, tool_choice and parallel_tool_calls,
// or response_format as one forced tool.
func (t *claudeTranslation) tools(in *chatRequest) {
	r := &t.req
	for i, tl := range in.Tools {
		if tl.Type != "function" || tl.Function == nil {
			t.refuse("tools[%d] of type %q (only function tools translate)", i, tl.Type)
			continue
		}
		schema := tl.Function.Parameters
		if len(schema) == 0 || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		} else if !objectSchema(schema) {
			t.refuse("tools[%d].function.parameters that is not an object schema (Anthropic tool input is an object)", i)
		}
		r.Tools = append(r.Tools, claudeTool{Name: tl.Function.Name, Description: tl.Function.Description, InputSchema: schema})
	}
	t.toolChoice(in)
	t.responseFormat(in)
}

// toolChoice carries tool_choice and parallel_tool_calls.
func (t *claudeTranslation) toolChoice(in *chatRequest) {
	r := &t.req
	if len(in.ToolChoice) > 0 && string(in.ToolChoice) != "null" {
		var s string
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		switch {
		case json.Unmarshal(in.ToolChoice, &s) == nil:
			switch s {
			case "none":
				r.ToolChoice = map[string]any{"type": "none"}
			case "auto":
				r.ToolChoice = map[string]any{"type": "auto"}
			case "required":
				r.ToolChoice = map[string]any{"type": "any"}
			default:
				t.refuse("tool_choice %q", s)
			}
		case json.Unmarshal(in.ToolChoice, &named) == nil && named.Type == "function" && named.Function.Name != "":
			r.ToolChoice = map[string]any{"type": "tool", "name": named.Function.Name}
		default:
			t.refuse("tool_choice %s (only none, auto, required or a named function translate)", clip(in.ToolChoice))
		}
	}
	if p := in.ParallelToolCalls; p != nil && !*p && len(r.Tools) > 0 {
		if r.ToolChoice == nil {
			r.ToolChoice = map[string]any{"type": "auto"}
		}
		if r.ToolChoice["type"] != "none" {
			r.ToolChoice["disable_parallel_tool_use"] = true
		}
	}
}

// responseFormat sends json_schema or json_object as one forced tool
// whose input is the answer (Anthropic has no response_format).
func (t *claudeTranslation) responseFormat(in *chatRequest) {
	r := &t.req
	rf := in.ResponseFormat
	if rf == nil || rf.Type == "" || rf.Type == "text" {
		return
	}
	if len(in.Tools) > 0 {
		t.refuse("response_format %q together with tools (the translation forces a tool to honour response_format)", rf.Type)
		return
	}
	tool := claudeTool{Name: claudeJSONTool, Description: "Answer with a JSON object.", InputSchema: json.RawMessage(`{"type":"object"}`)}
	switch rf.Type {
	case "json_object":
	case "json_schema":
		js := rf.JSONSchema
		if js == nil || len(js.Schema) == 0 {
			t.refuse("response_format json_schema without json_schema.schema")
			return
		}
		if !objectSchema(js.Schema) {
			t.refuse("response_format.json_schema.schema that is not an object schema (Anthropic tool input is an object)")
			return
		}
		tool.InputSchema = js.Schema
		if js.Name != "" {
			tool.Name = js.Name
		}
		tool.Description = "Answer with a JSON object that follows this schema."
		if js.Description != "" {
			tool.Description += " " + js.Description
		}
	default:
		t.refuse("response_format of type %q", rf.Type)
		return
	}
	r.Tools = []claudeTool{tool}
	r.ToolChoice = map[string]any{"type": "tool", "name": tool.Name}
	t.jsonTool = true
}

// objectSchema reports whether a JSON schema describes an object (its
// type is "object"), the only tool input Anthropic accepts.
func objectSchema(schema json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return false
	}
	return s.Type == "object"
}

// clip is a short rendering of raw JSON for a message.
func clip(raw json.RawMessage) string {
	const n = 60
	if len(raw) > n {
		return string(raw[:n]) + "…"
	}
	return string(raw)
}

// messages carries the conversation, as the estimator parsed it: system
// and developer messages into system (in order), user and assistant
// messages as they are, tool results as tool_result blocks of a user
// message. Consecutive messages of one role merge into one message, so
// that tool results follow their tool_use turn as Anthropic requires.
func (t *claudeTranslation) messages(msgs []estimate.Message) {
	r := &t.req
	add := func(role string, blocks []claudeBlock) {
		if len(blocks) == 0 {
			return
		}
		if n := len(r.Messages); n > 0 && r.Messages[n-1].Role == role {
			r.Messages[n-1].Content = append(r.Messages[n-1].Content, blocks...)
			return
		}
		r.Messages = append(r.Messages, claudeMessage{Role: role, Content: blocks})
	}
	switch {
	case len(msgs) > 0:
	case t.where == nil:
		t.refuse("messages that are empty")
	case len(t.why) == 0: // a Responses input whose items were not all refused
		t.refuse("input that is empty")
	}
	for i := range msgs {
		m := &msgs[i]
		if m.Audio {
			t.refuse("audio in %s", t.at(i))
		}
		switch m.Role {
		case "system", "developer":
			r.System = append(r.System, t.content(m.Parts, i, false)...)
		case "user":
			add("user", t.content(m.Parts, i, true))
		case "assistant":
			add("assistant", t.assistant(m, i))
		case "tool":
			if m.ToolCallID == "" {
				t.refuse("%s of role tool without tool_call_id", t.at(i))
			}
			res := claudeBlock{Type: "tool_result", ToolUseID: m.ToolCallID, Content: t.content(m.Parts, i, false)}
			add("user", []claudeBlock{res})
		case "function":
			t.refuse("a function message (%s; legacy function calling, use tools)", t.at(i))
		default:
			t.refuse("%s of role %q", t.at(i), m.Role)
		}
	}
	for i := range r.Messages {
		if r.Messages[i].Role == "user" {
			toolResultsFirst(r.Messages[i].Content)
		}
	}
}

// toolResultsFirst moves a user turn's tool_result blocks ahead of its
// other blocks (keeping the order within each), as Anthropic requires:
// a user message between the tool calls and their results merges into
// the results' turn.
func toolResultsFirst(blocks []claudeBlock) {
	sort.SliceStable(blocks, func(i, j int) bool {
		return blocks[i].Type == "tool_result" && blocks[j].Type != "tool_result"
	})
}

// assistant is an assistant turn's blocks: its text and refusal (the
// estimator's last text part), then its tool calls as tool_use blocks.
func (t *claudeTranslation) assistant(m *estimate.Message, i int) []claudeBlock {
	blocks := t.content(m.Parts, i, false)
	for j, tc := range m.ToolCalls {
		switch tc.Kind {
		case estimate.ToolCallLegacy:
			t.refuse("%s.function_call (legacy function calling, use tools)", t.at(i))
			continue
		case estimate.ToolCallCustom:
			t.refuse("%s.tool_calls[%d] of type \"custom\" (only function tool calls translate)", t.at(i), j)
			continue
		}
		input := json.RawMessage(tc.Arguments)
		if strings.TrimSpace(tc.Arguments) == "" {
			input = json.RawMessage("{}")
		} else if !isJSONObject(input) {
			t.refuse("%s.tool_calls[%d].function.arguments that are not a JSON object", t.at(i), j)
		}
		blocks = append(blocks, claudeBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: input})
	}
	return blocks
}

// isJSONObject reports whether raw is one JSON object.
func isJSONObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// content translates one message's parts into blocks; images only where
// images=true (user turns). Empty text is dropped: Anthropic refuses
// empty text blocks. A part is content[j] of the message (the
// estimator's parts are the content's, in order; a refusal is one more
// text part after them).
func (t *claudeTranslation) content(parts []estimate.Part, i int, images bool) []claudeBlock {
	var out []claudeBlock
	for j, p := range parts {
		switch {
		case p.Type == estimate.PartText:
			if p.Text != "" {
				out = append(out, claudeBlock{Type: "text", Text: p.Text})
			}
		case p.Type == estimate.PartImage && images && p.Image != nil:
			src, ok := imageSource(p.Image.URL)
			if !ok {
				t.refuse("%s.content[%d].image_url that is neither an http(s) URL nor a base64 data: URL of an image", t.at(i), j)
				continue
			}
			out = append(out, claudeBlock{Type: "image", Source: src})
		default:
			t.refuse("%s content (%s.content[%d])", partName(p), t.at(i), j)
		}
	}
	return out
}

// partName is the client's type of a part the translation refuses.
func partName(p estimate.Part) string {
	switch p.Type {
	case estimate.PartImage:
		return "image_url"
	case estimate.PartAudio:
		return "input_audio"
	case estimate.PartDocument:
		return "file"
	}
	var typed struct {
		Type string `json:"type"`
	}
	if p.Type == estimate.PartOther && json.Unmarshal([]byte(p.Text), &typed) == nil && typed.Type != "" {
		return typed.Type
	}
	return string(p.Type)
}

// imageSource is an image URL as Anthropic's source: a data: URL as
// base64 with its media type, an http(s) URL by reference.
func imageSource(u string) (*claudeSource, bool) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		mt, data, ok := strings.Cut(rest, ",")
		mt, b64 := strings.CutSuffix(mt, ";base64")
		if !ok || !b64 || !strings.HasPrefix(mt, "image/") || data == "" {
			return nil, false
		}
		return &claudeSource{Type: "base64", MediaType: mt, Data: data}, true
	}
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		return &claudeSource{Type: "url", URL: u}, true
	}
	return nil, false
}
