package estimate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/internal/jsonscan"
)

// MaxTokensLimit is the largest max_tokens / max_completion_tokens value the
// parsers accept; anything above is treated as absurd (invalid_value).
const MaxTokensLimit = 1_000_000

// Format names the API shape a Request was parsed from.
type Format string

// Request formats.
const (
	FormatOpenAIChat        Format = "openai_chat"
	FormatAnthropicMessages Format = "anthropic_messages"
	FormatEmbeddings        Format = "embeddings"
)

// Error codes of RequestError. They are stable: the gateway maps them to its
// 400 error envelope.
const (
	CodeInvalidJSON  = "invalid_json"
	CodeMissingField = "missing_field"
	CodeInvalidType  = "invalid_type"
	CodeInvalidValue = "invalid_value"
)

// RequestError is a malformed request body. Param names the offending field
// in the request's own terms, e.g. "max_tokens" or "messages[2].content".
type RequestError struct {
	Code    string
	Param   string
	Message string
}

func (e *RequestError) Error() string {
	if e.Param == "" {
		return e.Code + ": " + e.Message
	}
	return e.Code + " (" + e.Param + "): " + e.Message
}

// Request is what estimation needs from a chat, messages, embeddings,
// Responses API or legacy completions body.
// Fields the estimator does not need are not kept; the gateway forwards the
// original body untouched.
type Request struct {
	Format Format
	Model  string
	// System holds a top-level system prompt: Anthropic's system, the
	// Responses API's instructions. OpenAI chat system and developer
	// prompts stay in Messages with their role.
	System   []Part
	Messages []Message
	Tools    []Tool
	// ResponseFormat is OpenAI's response_format (nil when absent).
	ResponseFormat *ResponseFormat
	// MaxTokens is max_completion_tokens, else max_tokens (OpenAI), or
	// max_tokens (Anthropic, required). 0 means not set.
	MaxTokens int64
	// N is the number of outputs the provider generates, which the
	// reservation multiplies: chat's n; for legacy completions max(n,
	// best_of) × prompts. At least 1.
	N            int64
	Stream       bool
	IncludeUsage bool // stream_options.include_usage
	// Embeddings input and legacy completions prompts (and suffix): text
	// inputs, and token-array inputs already counted.
	Input       []string
	InputTokens int64
	// Members are the body's top-level members in body order, windows
	// on the body, when the parser took it in one scan (chat completions;
	// nil otherwise). Their keys are plain ASCII, without escapes (the
	// scan takes no other): what encoding/json decodes them to. A
	// provider request that rewrites a member (the upstream model,
	// stream_options) rebuilds the body from them instead of decoding it
	// again (provider.NewRequest).
	Members []Member
}

// Member is one top-level member of a request body: its key between the
// quotes and its value's bytes.
type Member struct {
	Key, Value []byte
}

// Message is one chat message.
type Message struct {
	Role       string
	Name       string
	Parts      []Part
	ToolCalls  []ToolCall // assistant tool calls (OpenAI tool_calls / function_call)
	ToolCallID string
	// Audio: an OpenAI assistant message names an earlier audio answer
	// (audio: {id}), which no count includes; the translation to
	// Anthropic refuses it.
	Audio bool
}

// PartType is the kind of a content part.
type PartType string

// Content part kinds.
const (
	PartText     PartType = "text"
	PartImage    PartType = "image"
	PartDocument PartType = "document" // file / PDF; size unknown
	PartAudio    PartType = "audio"
	PartOther    PartType = "other" // unknown part kinds: Text holds its raw JSON
)

// Part is one content part. Tool use and tool results are flattened into
// text parts (their name, input JSON and result text).
type Part struct {
	Type  PartType
	Text  string
	Image *Image
}

// Image describes an image part as far as the request tells.
type Image struct {
	Detail string // OpenAI: low, high, auto (or "")
	// URL is an http(s) URL or a data: URL; Data is Anthropic's base64
	// source. Both are kept by reference (no copy) to decode dimensions.
	URL       string
	Data      string
	MediaType string
}

// Tool is one tool (function) definition.
type Tool struct {
	Type        string
	Name        string
	Description string
	Parameters  json.RawMessage // JSON schema (OpenAI parameters / Anthropic input_schema)
}

// ToolCall is one assistant tool call in the conversation history.
type ToolCall struct {
	// ID is the call's id (OpenAI tool_calls[].id), which its result
	// names; Kind says which OpenAI shape it came in.
	ID        string
	Kind      ToolCallKind
	Name      string
	Arguments string
}

// ToolCallKind is the shape an OpenAI tool call came in.
type ToolCallKind uint8

// Tool call shapes: a function tool call, a custom tool call (its input
// in Arguments), a legacy function_call of the message.
const (
	ToolCallFunction ToolCallKind = iota
	ToolCallCustom
	ToolCallLegacy
)

// ResponseFormat is OpenAI's response_format.
type ResponseFormat struct {
	Type   string // text, json_object, json_schema
	Name   string
	Schema json.RawMessage
}

// Structured reports whether the request asks for structured output
// (json_object or json_schema); a nil ResponseFormat does not.
func (rf *ResponseFormat) Structured() bool {
	return rf != nil && rf.Type != "" && rf.Type != "text"
}

// ---------------------------------------------------------------- helpers

func errJSON(err error) *RequestError {
	msg := err.Error()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		msg = fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	return &RequestError{Code: CodeInvalidJSON, Message: "request body is not valid JSON: " + msg}
}

// decode unmarshals raw into v, turning type mismatches into RequestErrors
// whose Param is prefix + the field path.
func decode(raw []byte, v any, prefix string) *RequestError {
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			param := joinParam(prefix, te.Field)
			return &RequestError{Code: CodeInvalidType, Param: param,
				Message: fmt.Sprintf("%s must be %s, got %s", displayParam(param), jsonTypeName(te.Type.Kind().String()), te.Value)}
		}
		return errJSON(err)
	}
	return nil
}

// decodeString decodes the JSON string raw, which a decoding pass over the
// whole body has already checked: without escapes and in valid UTF-8 it is
// its bytes between the quotes, what json.Unmarshal would return, without
// a second scan.
func decodeString(raw json.RawMessage, param string) (string, *RequestError) {
	if t := bytes.TrimSpace(raw); len(t) >= 2 && t[0] == '"' && t[len(t)-1] == '"' {
		if in := t[1 : len(t)-1]; bytes.IndexByte(in, '\\') < 0 && bytes.IndexByte(in, '"') < 0 && utf8.Valid(in) && !hasControl(in) {
			return string(in), nil
		}
	}
	var s string
	if e := decode(raw, &s, param); e != nil {
		return "", e
	}
	return s, nil
}

// hasControl reports whether b holds a byte JSON does not allow unescaped
// in a string.
func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

func joinParam(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	default:
		return prefix + "." + field
	}
}

func displayParam(p string) string {
	if p == "" {
		return "value"
	}
	return p
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return "of another type"
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

func firstByte(raw json.RawMessage) byte {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return 0
	}
	return t[0]
}

func typeErr(param, want string, raw json.RawMessage) *RequestError {
	got := "null"
	switch firstByte(raw) {
	case '"':
		got = "string"
	case '{':
		got = "object"
	case '[':
		got = "array"
	case 't', 'f':
		got = "boolean"
	case 'n', 0:
		got = "null"
	default:
		got = "number"
	}
	return &RequestError{Code: CodeInvalidType, Param: param, Message: fmt.Sprintf("%s must be %s, got %s", param, want, got)}
}

// topLevel checks the body is a JSON object.
func topLevel(body []byte) *RequestError {
	t := bytes.TrimSpace(body)
	if len(t) == 0 {
		return &RequestError{Code: CodeInvalidJSON, Message: "request body is empty"}
	}
	if !json.Valid(t) {
		var v any
		return errJSON(json.Unmarshal(t, &v))
	}
	if t[0] != '{' {
		return &RequestError{Code: CodeInvalidType, Message: "request body must be a JSON object"}
	}
	return nil
}

func requireModel(model *string, present bool) *RequestError {
	if !present {
		return &RequestError{Code: CodeMissingField, Param: "model", Message: "model is required"}
	}
	if strings.TrimSpace(*model) == "" {
		return &RequestError{Code: CodeInvalidValue, Param: "model", Message: "model must be a non-empty string"}
	}
	return nil
}

// maxTokens validates an optional integer token limit.
func maxTokens(param string, raw json.RawMessage) (int64, *RequestError) {
	if isNull(raw) {
		return 0, nil
	}
	t := bytes.TrimSpace(raw)
	if c := t[0]; c != '-' && (c < '0' || c > '9') {
		return 0, typeErr(param, "an integer", raw)
	}
	n, err := strconv.ParseInt(string(t), 10, 64)
	if err != nil {
		// A float ("100.5", "1e3") or an integer overflowing int64.
		if f, ferr := strconv.ParseFloat(string(t), 64); ferr == nil && f > MaxTokensLimit {
			return 0, &RequestError{Code: CodeInvalidValue, Param: param, Message: fmt.Sprintf("%s must be at most %d", param, MaxTokensLimit)}
		}
		return 0, &RequestError{Code: CodeInvalidType, Param: param, Message: param + " must be an integer"}
	}
	if n < 1 {
		return 0, &RequestError{Code: CodeInvalidValue, Param: param, Message: param + " must be at least 1"}
	}
	if n > MaxTokensLimit {
		return 0, &RequestError{Code: CodeInvalidValue, Param: param, Message: fmt.Sprintf("%s must be at most %d", param, MaxTokensLimit)}
	}
	return n, nil
}

// ---------------------------------------------------------------- OpenAI chat

type openAIChatBody struct {
	Model               *string           `json:"model"`
	Messages            json.RawMessage   `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	Functions           []json.RawMessage `json:"functions"`
	ResponseFormat      json.RawMessage   `json:"response_format"`
	MaxTokens           json.RawMessage   `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage   `json:"max_completion_tokens"`
	N                   *int64            `json:"n"`
	Stream              *bool             `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

type openAIMessage struct {
	Role         *string           `json:"role"`
	Name         *string           `json:"name"`
	Content      json.RawMessage   `json:"content"`
	ToolCalls    []json.RawMessage `json:"tool_calls"`
	FunctionCall *openAIFunction   `json:"function_call"`
	ToolCallID   *string           `json:"tool_call_id"`
	Refusal      *string           `json:"refusal"`
	Audio        json.RawMessage   `json:"audio"`
}

type openAIFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type openAIPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	} `json:"image_url"`
}

// ParseOpenAIChat parses an OpenAI chat-completions request body.
func ParseOpenAIChat(body []byte) (Request, error) {
	if req, ok := parseOpenAIChatScan(body); ok {
		return req, nil
	}
	if req, ok := parseOpenAIChatFast(body); ok {
		return req, nil
	}
	return parseOpenAIChat(body)
}

// parseOpenAIChatScan is parseOpenAIChatFast with one scan of the body
// (jsonscan) in place of encoding/json's four passes over the messages
// (the body's validation and decode, then the messages' own): each member
// of the body and of each message is decoded alone, as Unmarshal decodes
// it into its struct field (plain strings and raw members without
// reflection). Anything it does not take whole, a key it cannot match
// without decoding it included, goes to parseOpenAIChatFast; for every
// body it takes, the result is parseOpenAIChat's (FuzzParseOpenAIChatFast).
func parseOpenAIChatScan(body []byte) (Request, bool) {
	if firstByte(body) != '{' {
		return Request{}, false
	}
	var b openAIChatBody
	ok := true
	var messages []byte
	members := make([]Member, 0, 8)
	if !jsonscan.Object(body, func(key []byte, escaped bool, v []byte) {
		if ok {
			ok = b.member(key, escaped, v, &messages)
			members = append(members, Member{Key: key, Value: v})
		}
	}) || !ok || b.Model == nil || requireModel(b.Model, true) != nil || firstByte(messages) != '[' {
		return Request{}, false
	}
	var room [4]openAIMessage // most bodies have a few messages: no allocation for them
	msgs := room[:0]
	if !jsonscan.Array(messages, func(v []byte) {
		if !ok {
			return
		}
		if firstByte(v) != '{' {
			ok = false
			return
		}
		var m openAIMessage
		ok = jsonscan.Object(v, func(key []byte, escaped bool, mv []byte) {
			if ok {
				ok = m.member(key, escaped, mv)
			}
		}) && ok
		msgs = append(msgs, m)
	}) || !ok || len(msgs) == 0 {
		return Request{}, false
	}
	req := Request{Format: FormatOpenAIChat, N: 1, Model: *b.Model, Messages: make([]Message, 0, len(msgs)), Members: members}
	for i := range msgs {
		msg, e := openAIMessageFrom(&msgs[i], "messages[]")
		if e != nil {
			return Request{}, false
		}
		req.Messages = append(req.Messages, msg)
	}
	if b.finish(&req) != nil {
		return Request{}, false
	}
	return req, true
}

// The fields the fast parse decodes, of a chat body and of a message.
var (
	chatBodyFields = []string{"model", "messages", "tools", "functions", "response_format", "max_tokens",
		"max_completion_tokens", "n", "stream", "stream_options"}
	chatMessageFields = []string{"role", "content", "name", "tool_calls", "function_call", "tool_call_id", "refusal", "audio"}
)

// member decodes one member of a chat body into b as Unmarshal into the
// struct would (the last "messages" is kept raw in *messages); false when
// it fails or the key needs decoding to be matched.
func (b *openAIChatBody) member(key []byte, escaped bool, v []byte, messages *[]byte) bool {
	name, sure := jsonscan.KeyOf(key, escaped, chatBodyFields)
	if !sure {
		return false
	}
	switch name {
	case "":
		return true // not a field: Unmarshal skips it
	case "model":
		return stringPtrMember(v, &b.Model)
	case "messages":
		*messages = v
		return true
	case "max_tokens":
		b.MaxTokens = v // read as a number by finish, not kept
		return true
	case "max_completion_tokens":
		b.MaxCompletionTokens = v
		return true
	case "response_format":
		b.ResponseFormat = append(b.ResponseFormat[:0], v...)
		return true
	case "tools":
		return unmarshalInto(v, &b.Tools)
	case "functions":
		return unmarshalInto(v, &b.Functions)
	case "n":
		return unmarshalInto(v, &b.N)
	case "stream":
		return unmarshalInto(v, &b.Stream)
	}
	return unmarshalInto(v, &b.StreamOptions)
}

// unmarshalInto is json.Unmarshal(v, p) == nil through a copy of *p that
// starts as *p (so a repeated key decodes into what the last one left, as
// Unmarshal into the struct field would): only the copy is handed to
// Unmarshal's interface and moves to the heap, not the whole struct the
// field is in, and only when such a member is there.
func unmarshalInto[T any](v []byte, p *T) bool {
	t := *p
	if json.Unmarshal(v, &t) != nil {
		return false
	}
	*p = t
	return true
}

// member decodes one member of a message into m as Unmarshal into the
// struct would; false when it fails or the key needs decoding to be
// matched.
func (m *openAIMessage) member(key []byte, escaped bool, v []byte) bool {
	name, sure := jsonscan.KeyOf(key, escaped, chatMessageFields)
	if !sure {
		return false
	}
	switch name {
	case "":
		return true
	case "role":
		if r := knownRole(v); r != nil {
			m.Role = r
			return true
		}
		return stringPtrMember(v, &m.Role)
	case "content":
		m.Content = v // the message is read by openAIMessageFrom, which copies what it keeps
		return true
	case "name":
		return stringPtrMember(v, &m.Name)
	case "tool_calls":
		return unmarshalInto(v, &m.ToolCalls)
	case "function_call":
		return unmarshalInto(v, &m.FunctionCall)
	case "tool_call_id":
		return stringPtrMember(v, &m.ToolCallID)
	case "audio":
		m.Audio = v
		return true
	}
	return stringPtrMember(v, &m.Refusal)
}

// chatRoles are the roles a chat message names, for knownRole.
var chatRoles = [...]string{"system", "user", "assistant", "tool", "developer", "function"}

// knownRole is a pointer to the role v (a JSON string checked by jsonscan)
// names when it is one of chatRoles spelled without escapes, as
// stringPtrMember would decode it, but without allocating the string and
// its pointer per message; nil otherwise. The pointer is only read
// (openAIMessageFrom copies the string).
func knownRole(v []byte) *string {
	if len(v) < 2 || v[0] != '"' {
		return nil
	}
	in := v[1 : len(v)-1]
	for i := range chatRoles {
		if string(in) == chatRoles[i] {
			return &chatRoles[i]
		}
	}
	return nil
}

// stringPtrMember decodes a *string member (v checked by jsonscan): null
// sets it nil; a string without escapes in valid UTF-8 is its bytes, as
// Unmarshal returns it; anything else is Unmarshal's.
func stringPtrMember(v []byte, p **string) bool {
	if len(v) >= 2 && v[0] == '"' {
		if in := v[1 : len(v)-1]; bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
			s := string(in)
			*p = &s
			return true
		}
	}
	return unmarshalInto(v, p)
}

// parseOpenAIChatFast parses a well-formed body in two decoding passes (the
// body, then its messages array) instead of one per level (body,
// messages, each message, each content): the request path's largest cost
// in the gateway after the network. Any body it does not take whole (ok
// false) goes to parseOpenAIChat, which names the problem; for every body
// it takes, the result is parseOpenAIChat's (FuzzParseOpenAIChatFast
// checks it). The messages are decoded from their own raw bytes, as the
// slow path does, so a repeated "messages" key means the same: the last.
func parseOpenAIChatFast(body []byte) (Request, bool) {
	if firstByte(body) != '{' {
		return Request{}, false
	}
	var b openAIChatBody
	if json.Unmarshal(body, &b) != nil || b.Model == nil || requireModel(b.Model, true) != nil || firstByte(b.Messages) != '[' {
		return Request{}, false
	}
	var msgs []*openAIMessage
	if json.Unmarshal(b.Messages, &msgs) != nil || len(msgs) == 0 {
		return Request{}, false
	}
	req := Request{Format: FormatOpenAIChat, N: 1, Model: *b.Model, Messages: make([]Message, 0, len(msgs))}
	for _, m := range msgs {
		if m == nil {
			return Request{}, false
		}
		msg, e := openAIMessageFrom(m, "messages[]")
		if e != nil {
			return Request{}, false
		}
		req.Messages = append(req.Messages, msg)
	}
	if b.finish(&req) != nil {
		return Request{}, false
	}
	return req, true
}

// parseOpenAIChat parses body level by level, so that a malformed body
// gets the error that names its first problem.
func parseOpenAIChat(body []byte) (Request, error) {
	if e := topLevel(body); e != nil {
		return Request{}, e
	}
	var b openAIChatBody
	if e := decode(body, &b, ""); e != nil {
		return Request{}, e
	}
	req := Request{Format: FormatOpenAIChat, N: 1}
	if e := requireModel(b.Model, b.Model != nil); e != nil {
		return Request{}, e
	}
	req.Model = *b.Model
	if isNull(b.Messages) {
		return Request{}, &RequestError{Code: CodeMissingField, Param: "messages", Message: "messages is required"}
	}
	var msgs []json.RawMessage
	if firstByte(b.Messages) != '[' {
		return Request{}, typeErr("messages", "an array", b.Messages)
	}
	if e := decode(b.Messages, &msgs, "messages"); e != nil {
		return Request{}, e
	}
	if len(msgs) == 0 {
		return Request{}, &RequestError{Code: CodeInvalidValue, Param: "messages", Message: "messages must contain at least one message"}
	}
	req.Messages = make([]Message, 0, len(msgs))
	for i, raw := range msgs {
		m, e := parseOpenAIMessage(raw, fmt.Sprintf("messages[%d]", i))
		if e != nil {
			return Request{}, e
		}
		req.Messages = append(req.Messages, m)
	}
	if e := b.finish(&req); e != nil {
		return Request{}, e
	}
	return req, nil
}

// finish parses what follows the messages into req.
func (b *openAIChatBody) finish(req *Request) *RequestError {
	for i, raw := range b.Tools {
		t, e := parseOpenAITool(raw, fmt.Sprintf("tools[%d]", i), true)
		if e != nil {
			return e
		}
		req.Tools = append(req.Tools, t)
	}
	for i, raw := range b.Functions {
		t, e := parseOpenAITool(raw, fmt.Sprintf("functions[%d]", i), false)
		if e != nil {
			return e
		}
		req.Tools = append(req.Tools, t)
	}
	if !isNull(b.ResponseFormat) {
		rf, e := parseResponseFormat(b.ResponseFormat)
		if e != nil {
			return e
		}
		req.ResponseFormat = rf
	}
	mt, e := maxTokens("max_tokens", b.MaxTokens)
	if e != nil {
		return e
	}
	mct, e := maxTokens("max_completion_tokens", b.MaxCompletionTokens)
	if e != nil {
		return e
	}
	req.MaxTokens = mt
	if mct > 0 {
		req.MaxTokens = mct
	}
	if b.N != nil {
		if *b.N < 1 || *b.N > 128 {
			return &RequestError{Code: CodeInvalidValue, Param: "n", Message: "n must be between 1 and 128"}
		}
		req.N = *b.N
	}
	if b.Stream != nil {
		req.Stream = *b.Stream
	}
	if b.StreamOptions != nil && b.StreamOptions.IncludeUsage != nil {
		req.IncludeUsage = *b.StreamOptions.IncludeUsage
	}
	return nil
}

func parseOpenAIMessage(raw json.RawMessage, param string) (Message, *RequestError) {
	if firstByte(raw) != '{' {
		return Message{}, typeErr(param, "an object", raw)
	}
	var m openAIMessage
	if e := decode(raw, &m, param); e != nil {
		return Message{}, e
	}
	return openAIMessageFrom(&m, param)
}

// openAIMessageFrom is the Message of a decoded OpenAI message.
func openAIMessageFrom(m *openAIMessage, param string) (Message, *RequestError) {
	if m.Role == nil {
		return Message{}, &RequestError{Code: CodeMissingField, Param: param + ".role", Message: param + ".role is required"}
	}
	msg := Message{Role: *m.Role, Audio: firstByte(m.Audio) != 0 && firstByte(m.Audio) != 'n'}
	if m.Name != nil {
		msg.Name = *m.Name
	}
	if m.ToolCallID != nil {
		msg.ToolCallID = *m.ToolCallID
	}
	switch firstByte(m.Content) {
	case 0, 'n':
		// null content: allowed for assistant messages with tool calls.
	case '"':
		s, e := decodeString(m.Content, param+".content")
		if e != nil {
			return Message{}, e
		}
		msg.Parts = []Part{{Type: PartText, Text: s}}
	case '[':
		parts, e := openAIParts(m.Content, param)
		if e != nil {
			return Message{}, e
		}
		msg.Parts = parts
	default:
		return Message{}, typeErr(param+".content", "a string, an array or null", m.Content)
	}
	if m.Refusal != nil && *m.Refusal != "" {
		msg.Parts = append(msg.Parts, Part{Type: PartText, Text: *m.Refusal})
	}
	calls, e := openAIToolCalls(m.ToolCalls, param)
	if e != nil {
		return Message{}, e
	}
	msg.ToolCalls = calls
	if m.FunctionCall != nil {
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{Kind: ToolCallLegacy, Name: m.FunctionCall.Name, Arguments: m.FunctionCall.Arguments})
	}
	return msg, nil
}

// openAIParts parses an array content's parts (text, refusal, image,
// audio, file); a part of an unknown type counts by its JSON.
func openAIParts(content json.RawMessage, param string) ([]Part, *RequestError) {
	var parts []json.RawMessage
	if e := decode(content, &parts, param+".content"); e != nil {
		return nil, e
	}
	out := make([]Part, 0, len(parts))
	for j, pr := range parts {
		pp := fmt.Sprintf("%s.content[%d]", param, j)
		if firstByte(pr) != '{' {
			return nil, typeErr(pp, "an object", pr)
		}
		var p openAIPart
		if e := decode(pr, &p, pp); e != nil {
			return nil, e
		}
		switch p.Type {
		case "text", "input_text":
			out = append(out, Part{Type: PartText, Text: p.Text})
		case "refusal":
			out = append(out, Part{Type: PartText, Text: p.Refusal})
		case "image_url":
			if p.ImageURL == nil {
				return nil, &RequestError{Code: CodeMissingField, Param: pp + ".image_url", Message: pp + ".image_url is required"}
			}
			out = append(out, Part{Type: PartImage, Image: &Image{URL: p.ImageURL.URL, Detail: p.ImageURL.Detail}})
		case "input_audio":
			out = append(out, Part{Type: PartAudio})
		case "file":
			out = append(out, Part{Type: PartDocument})
		case "":
			return nil, &RequestError{Code: CodeMissingField, Param: pp + ".type", Message: pp + ".type is required"}
		default:
			out = append(out, Part{Type: PartOther, Text: string(pr)})
		}
	}
	return out, nil
}

// openAIToolCalls parses an assistant message's tool calls (function and
// custom).
func openAIToolCalls(raw []json.RawMessage, param string) ([]ToolCall, *RequestError) {
	var out []ToolCall
	for j, tc := range raw {
		var c struct {
			ID       string          `json:"id"`
			Function *openAIFunction `json:"function"`
			Custom   *struct {
				Name  string `json:"name"`
				Input string `json:"input"`
			} `json:"custom"`
		}
		if e := decode(tc, &c, fmt.Sprintf("%s.tool_calls[%d]", param, j)); e != nil {
			return nil, e
		}
		switch {
		case c.Function != nil:
			out = append(out, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		case c.Custom != nil:
			out = append(out, ToolCall{ID: c.ID, Kind: ToolCallCustom, Name: c.Custom.Name, Arguments: c.Custom.Input})
		}
	}
	return out, nil
}

func parseOpenAITool(raw json.RawMessage, param string, wrapped bool) (Tool, *RequestError) {
	if firstByte(raw) != '{' {
		return Tool{}, typeErr(param, "an object", raw)
	}
	type fn struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	if !wrapped { // legacy functions[]
		var f fn
		if e := decode(raw, &f, param); e != nil {
			return Tool{}, e
		}
		return Tool{Type: "function", Name: f.Name, Description: f.Description, Parameters: f.Parameters}, nil
	}
	var t struct {
		Type     string `json:"type"`
		Function *fn    `json:"function"`
		Custom   *struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Format      json.RawMessage `json:"format"`
		} `json:"custom"`
	}
	if e := decode(raw, &t, param); e != nil {
		return Tool{}, e
	}
	switch {
	case t.Function != nil:
		return Tool{Type: "function", Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters}, nil
	case t.Custom != nil:
		return Tool{Type: "custom", Name: t.Custom.Name, Description: t.Custom.Description, Parameters: t.Custom.Format}, nil
	case t.Type == "function":
		return Tool{}, &RequestError{Code: CodeMissingField, Param: param + ".function", Message: param + ".function is required"}
	}
	// Built-in or unknown tool kinds: count the whole definition.
	return Tool{Type: t.Type, Parameters: raw}, nil
}

func parseResponseFormat(raw json.RawMessage) (*ResponseFormat, *RequestError) {
	if firstByte(raw) != '{' {
		return nil, typeErr("response_format", "an object", raw)
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if e := decode(raw, &rf, "response_format"); e != nil {
		return nil, e
	}
	out := &ResponseFormat{Type: rf.Type}
	if rf.Type == "json_schema" {
		if rf.JSONSchema == nil {
			return nil, &RequestError{Code: CodeMissingField, Param: "response_format.json_schema", Message: "response_format.json_schema is required when type is json_schema"}
		}
		out.Name, out.Schema = rf.JSONSchema.Name, rf.JSONSchema.Schema
	}
	return out, nil
}

// ---------------------------------------------------------------- Anthropic

type anthropicBody struct {
	Model     *string           `json:"model"`
	Messages  json.RawMessage   `json:"messages"`
	System    json.RawMessage   `json:"system"`
	Tools     []json.RawMessage `json:"tools"`
	MaxTokens json.RawMessage   `json:"max_tokens"`
	Stream    *bool             `json:"stream"`
}

type anthropicBlock struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	Content  json.RawMessage `json:"content"` // tool_result: string or blocks
	Thinking string          `json:"thinking"`
	Source   *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

// ParseAnthropicMessages parses an Anthropic messages request body.
func ParseAnthropicMessages(body []byte) (Request, error) {
	if e := topLevel(body); e != nil {
		return Request{}, e
	}
	var b anthropicBody
	if e := decode(body, &b, ""); e != nil {
		return Request{}, e
	}
	req := Request{Format: FormatAnthropicMessages, N: 1}
	if e := requireModel(b.Model, b.Model != nil); e != nil {
		return Request{}, e
	}
	req.Model = *b.Model
	if isNull(b.MaxTokens) {
		return Request{}, &RequestError{Code: CodeMissingField, Param: "max_tokens", Message: "max_tokens is required"}
	}
	mt, e := maxTokens("max_tokens", b.MaxTokens)
	if e != nil {
		return Request{}, e
	}
	req.MaxTokens = mt
	if isNull(b.Messages) {
		return Request{}, &RequestError{Code: CodeMissingField, Param: "messages", Message: "messages is required"}
	}
	if firstByte(b.Messages) != '[' {
		return Request{}, typeErr("messages", "an array", b.Messages)
	}
	var msgs []json.RawMessage
	if e := decode(b.Messages, &msgs, "messages"); e != nil {
		return Request{}, e
	}
	if len(msgs) == 0 {
		return Request{}, &RequestError{Code: CodeInvalidValue, Param: "messages", Message: "messages must contain at least one message"}
	}
	if !isNull(b.System) {
		parts, e := parseAnthropicContent(b.System, "system")
		if e != nil {
			return Request{}, e
		}
		req.System = parts
	}
	if req.Messages, e = anthropicMessages(msgs); e != nil {
		return Request{}, e
	}
	if req.Tools, e = anthropicTools(b.Tools); e != nil {
		return Request{}, e
	}
	if b.Stream != nil {
		req.Stream = *b.Stream
	}
	return req, nil
}

// anthropicMessages parses the messages array's elements: a role and
// content (a string or blocks) each.
func anthropicMessages(msgs []json.RawMessage) ([]Message, *RequestError) {
	out := make([]Message, 0, len(msgs))
	for i, raw := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		if firstByte(raw) != '{' {
			return nil, typeErr(param, "an object", raw)
		}
		var m struct {
			Role    *string         `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if e := decode(raw, &m, param); e != nil {
			return nil, e
		}
		if m.Role == nil {
			return nil, &RequestError{Code: CodeMissingField, Param: param + ".role", Message: param + ".role is required"}
		}
		if isNull(m.Content) {
			return nil, &RequestError{Code: CodeMissingField, Param: param + ".content", Message: param + ".content is required"}
		}
		parts, e := parseAnthropicContent(m.Content, param+".content")
		if e != nil {
			return nil, e
		}
		out = append(out, Message{Role: *m.Role, Parts: parts})
	}
	return out, nil
}

// anthropicTools parses the tool definitions: custom tools by their input
// schema, server tools (web_search, bash, …) by their whole definition.
func anthropicTools(tools []json.RawMessage) ([]Tool, *RequestError) {
	var out []Tool
	for i, raw := range tools {
		param := fmt.Sprintf("tools[%d]", i)
		if firstByte(raw) != '{' {
			return nil, typeErr(param, "an object", raw)
		}
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		if e := decode(raw, &t, param); e != nil {
			return nil, e
		}
		if t.InputSchema == nil { // server tools (web_search, bash, …): count the definition
			out = append(out, Tool{Type: t.Type, Name: t.Name, Parameters: raw})
			continue
		}
		out = append(out, Tool{Type: "custom", Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return out, nil
}

func parseAnthropicContent(raw json.RawMessage, param string) ([]Part, *RequestError) {
	switch firstByte(raw) {
	case '"':
		var s string
		if e := decode(raw, &s, param); e != nil {
			return nil, e
		}
		return []Part{{Type: PartText, Text: s}}, nil
	case '[':
	default:
		return nil, typeErr(param, "a string or an array", raw)
	}
	var blocks []json.RawMessage
	if e := decode(raw, &blocks, param); e != nil {
		return nil, e
	}
	parts := make([]Part, 0, len(blocks))
	for j, br := range blocks {
		pp := fmt.Sprintf("%s[%d]", param, j)
		if firstByte(br) != '{' {
			return nil, typeErr(pp, "an object", br)
		}
		var b anthropicBlock
		if e := decode(br, &b, pp); e != nil {
			return nil, e
		}
		switch b.Type {
		case "text":
			parts = append(parts, Part{Type: PartText, Text: b.Text})
		case "thinking":
			parts = append(parts, Part{Type: PartText, Text: b.Thinking})
		case "redacted_thinking":
		case "image":
			img := &Image{}
			if b.Source != nil {
				img.Data, img.URL, img.MediaType = b.Source.Data, b.Source.URL, b.Source.MediaType
			}
			parts = append(parts, Part{Type: PartImage, Image: img})
		case "document":
			if b.Source != nil && b.Source.Type == "text" {
				parts = append(parts, Part{Type: PartText, Text: b.Source.Data})
			} else {
				parts = append(parts, Part{Type: PartDocument})
			}
		case "tool_use", "server_tool_use":
			parts = append(parts, Part{Type: PartText, Text: b.Name}, Part{Type: PartText, Text: string(b.Input)})
		case "tool_result":
			if !isNull(b.Content) {
				inner, e := parseAnthropicContent(b.Content, pp+".content")
				if e != nil {
					return nil, e
				}
				parts = append(parts, inner...)
			}
		case "":
			return nil, &RequestError{Code: CodeMissingField, Param: pp + ".type", Message: pp + ".type is required"}
		default:
			parts = append(parts, Part{Type: PartOther, Text: string(br)})
		}
	}
	return parts, nil
}

// ---------------------------------------------------------------- embeddings

// MaxEmbeddingInputs is OpenAI's limit on the number of inputs per request.
const MaxEmbeddingInputs = 2048

// ParseEmbeddings parses an OpenAI embeddings request body. input may be a
// string, an array of strings, an array of token ids or an array of token-id
// arrays; token arrays are counted exactly (their length).
func ParseEmbeddings(body []byte) (Request, error) {
	if e := topLevel(body); e != nil {
		return Request{}, e
	}
	var b struct {
		Model *string         `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	if e := decode(body, &b, ""); e != nil {
		return Request{}, e
	}
	req := Request{Format: FormatEmbeddings, N: 1}
	if e := requireModel(b.Model, b.Model != nil); e != nil {
		return Request{}, e
	}
	req.Model = *b.Model
	if isNull(b.Input) {
		return Request{}, &RequestError{Code: CodeMissingField, Param: "input", Message: "input is required"}
	}
	switch firstByte(b.Input) {
	case '"':
		var s string
		if e := decode(b.Input, &s, "input"); e != nil {
			return Request{}, e
		}
		req.Input = []string{s}
		return req, nil
	case '[':
	default:
		return Request{}, typeErr("input", "a string or an array", b.Input)
	}
	if e := embeddingItems(&req, b.Input); e != nil {
		return Request{}, e
	}
	return req, nil
}

// embeddingItems parses an array input: one flat array of token ids, or
// items that are each a string or an array of token ids.
func embeddingItems(req *Request, input json.RawMessage) *RequestError {
	var items []json.RawMessage
	if e := decode(input, &items, "input"); e != nil {
		return e
	}
	if len(items) == 0 {
		return &RequestError{Code: CodeInvalidValue, Param: "input", Message: "input must not be empty"}
	}
	// A flat array of token ids is one input.
	if c := firstByte(items[0]); c == '-' || (c >= '0' && c <= '9') {
		for i, it := range items {
			if e := tokenID(it, fmt.Sprintf("input[%d]", i)); e != nil {
				return e
			}
		}
		req.InputTokens = int64(len(items))
		return nil
	}
	if len(items) > MaxEmbeddingInputs {
		return &RequestError{Code: CodeInvalidValue, Param: "input", Message: fmt.Sprintf("input must have at most %d items", MaxEmbeddingInputs)}
	}
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		switch firstByte(it) {
		case '"':
			var s string
			if e := decode(it, &s, param); e != nil {
				return e
			}
			req.Input = append(req.Input, s)
		case '[':
			var ids []json.RawMessage
			if e := decode(it, &ids, param); e != nil {
				return e
			}
			for j, id := range ids {
				if e := tokenID(id, fmt.Sprintf("%s[%d]", param, j)); e != nil {
					return e
				}
			}
			req.InputTokens += int64(len(ids))
		default:
			return typeErr(param, "a string or an array of token ids", it)
		}
	}
	return nil
}

func tokenID(raw json.RawMessage, param string) *RequestError {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil {
		return typeErr(param, "an integer token id", raw)
	}
	if n < 0 {
		return &RequestError{Code: CodeInvalidValue, Param: param, Message: param + " must be a non-negative token id"}
	}
	return nil
}
