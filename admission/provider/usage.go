package provider

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/sluice-dev/sluice/internal/jsonscan"
)

// Usage is a response's token usage in Sluice's normalised terms.
//
// InputTokens counts every prompt token, cached or not (OpenAI's
// prompt_tokens semantics); for Anthropic it is input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens. CachedInputTokens
// (cache reads) and CacheWriteInputTokens are subsets of InputTokens.
// OutputTokens includes reasoning/thinking tokens.
type Usage struct {
	InputTokens           int64 `json:"input_tokens"`
	CachedInputTokens     int64 `json:"cached_input_tokens"`
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens,omitempty"`
	OutputTokens          int64 `json:"output_tokens"`
	ReasoningTokens       int64 `json:"reasoning_tokens,omitempty"` // part of OutputTokens
}

// openAIUsage covers chat completions, embeddings and the Responses API.
type openAIUsage struct {
	PromptTokens            *int64            `json:"prompt_tokens"`
	CompletionTokens        int64             `json:"completion_tokens"`
	PromptTokensDetails     *cachedDetails    `json:"prompt_tokens_details"`
	CompletionTokensDetails *reasoningDetails `json:"completion_tokens_details"`
	// Responses API names.
	InputTokens         *int64            `json:"input_tokens"`
	OutputTokens        int64             `json:"output_tokens"`
	InputTokensDetails  *cachedDetails    `json:"input_tokens_details"`
	OutputTokensDetails *reasoningDetails `json:"output_tokens_details"`
}

type cachedDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

type reasoningDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

func (u *openAIUsage) normalise() (Usage, bool) {
	var out Usage
	switch {
	case u.PromptTokens != nil:
		out.InputTokens = *u.PromptTokens
		out.OutputTokens = u.CompletionTokens
		if d := u.PromptTokensDetails; d != nil {
			out.CachedInputTokens = d.CachedTokens
		}
		if d := u.CompletionTokensDetails; d != nil {
			out.ReasoningTokens = d.ReasoningTokens
		}
	case u.InputTokens != nil:
		out.InputTokens = *u.InputTokens
		out.OutputTokens = u.OutputTokens
		if d := u.InputTokensDetails; d != nil {
			out.CachedInputTokens = d.CachedTokens
		}
		if d := u.OutputTokensDetails; d != nil {
			out.ReasoningTokens = d.ReasoningTokens
		}
	default:
		return Usage{}, false
	}
	return out.clean(), true
}

type anthropicUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

func (u *anthropicUsage) normalise() Usage {
	return Usage{
		InputTokens:           u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens,
		CachedInputTokens:     u.CacheReadInputTokens,
		CacheWriteInputTokens: u.CacheCreationInputTokens,
		OutputTokens:          u.OutputTokens,
	}.clean()
}

type geminiUsage struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
}

func (u *geminiUsage) normalise() Usage {
	return Usage{
		InputTokens:       u.PromptTokenCount + u.ToolUsePromptTokenCount,
		CachedInputTokens: u.CachedContentTokenCount,
		OutputTokens:      u.CandidatesTokenCount + u.ThoughtsTokenCount,
		ReasoningTokens:   u.ThoughtsTokenCount,
	}.clean()
}

// clean clamps nonsense (negative counts, cached > input) from a provider.
func (u Usage) clean() Usage {
	for _, p := range []*int64{&u.InputTokens, &u.CachedInputTokens, &u.CacheWriteInputTokens, &u.OutputTokens, &u.ReasoningTokens} {
		*p = max(*p, 0)
	}
	u.CachedInputTokens = min(u.CachedInputTokens, u.InputTokens)
	u.CacheWriteInputTokens = min(u.CacheWriteInputTokens, u.InputTokens)
	u.ReasoningTokens = min(u.ReasoningTokens, u.OutputTokens)
	return u
}

// ParseUsage reads the usage of a non-streaming response body: OpenAI,
// Azure and OpenAI-compatible `usage` (chat, embeddings, Responses API),
// Anthropic `usage`, Gemini `usageMetadata`. ok is false when the body
// carries no usage.
func ParseUsage(kind Kind, body []byte) (Usage, bool) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return Usage{}, false
	}
	return adapterOf(kind).usage(body)
}

// usageField decodes body's top-level member name into a *T as
// json.Unmarshal into struct{ F *T `json:"name"` } would: nil when there is
// none, ok false when Unmarshal would fail. It decodes only that member
// (jsonscan checks the rest in one pass) instead of the whole answer, and
// takes Unmarshal itself for what the scan does not decide
// (FuzzParseUsageFast compares the two).
func usageField[T any](body []byte, name string) (u *T, ok bool) {
	if u, ok, decided := usageFieldFast[T](body, name); decided {
		return u, ok
	}
	return usageFieldSlow[T](body, name)
}

func usageFieldFast[T any](body []byte, name string) (u *T, ok, decided bool) {
	var found [2][]byte
	vals := found[:0]
	undecided := false
	if !jsonscan.Object(body, func(key []byte, escaped bool, value []byte) {
		match, sure := jsonscan.KeyIs(key, escaped, name)
		if !sure {
			undecided = true
		} else if match {
			vals = append(vals, value)
		}
	}) || undecided {
		return nil, false, false
	}
	// A repeated member decodes into what the earlier ones left, as
	// Unmarshal does into a struct's pointer field (null sets it nil).
	for _, v := range vals {
		if ou, isOpenAI := any(&u).(**openAIUsage); isOpenAI {
			if ok, decided := decodeOpenAIUsage(v, ou); decided {
				if !ok {
					return nil, false, true
				}
				continue
			}
		}
		if json.Unmarshal(v, &u) != nil {
			return nil, false, true
		}
	}
	return u, true, true
}

// decodeOpenAIUsage decodes v (a value jsonscan.Object checked) into *u as
// json.Unmarshal(v, u) does, without reflection: members matched by name
// (ASCII case folded), integers into the int64 fields, null leaving an
// int64 as it was and setting a pointer nil, anything else a failure (ok
// false). decided is false for what it leaves to Unmarshal: a key with an
// escape or a non-ASCII byte.
func decodeOpenAIUsage(v []byte, u **openAIUsage) (ok, decided bool) {
	switch v[0] {
	case 'n':
		*u = nil
		return true, true
	case '{':
	default:
		return false, true
	}
	if *u == nil {
		*u = new(openAIUsage)
	}
	d := *u
	ok, decided = true, true
	jsonscan.Object(v, func(key []byte, escaped bool, val []byte) {
		if !ok || !decided {
			return
		}
		name, sure := jsonscan.KeyOf(key, escaped, openAIUsageKeys)
		if !sure {
			decided = false
			return
		}
		switch name {
		case "prompt_tokens":
			ok = intPtrInto(val, &d.PromptTokens)
		case "input_tokens":
			ok = intPtrInto(val, &d.InputTokens)
		case "completion_tokens":
			ok = intInto(val, &d.CompletionTokens)
		case "output_tokens":
			ok = intInto(val, &d.OutputTokens)
		case "prompt_tokens_details":
			ok, decided = detailInto(val, &d.PromptTokensDetails, "cached_tokens", cachedField)
		case "input_tokens_details":
			ok, decided = detailInto(val, &d.InputTokensDetails, "cached_tokens", cachedField)
		case "completion_tokens_details":
			ok, decided = detailInto(val, &d.CompletionTokensDetails, "reasoning_tokens", reasoningField)
		case "output_tokens_details":
			ok, decided = detailInto(val, &d.OutputTokensDetails, "reasoning_tokens", reasoningField)
		}
	})
	return ok, decided
}

// openAIUsageKeys are openAIUsage's JSON names.
var openAIUsageKeys = []string{"prompt_tokens", "input_tokens", "completion_tokens", "output_tokens",
	"prompt_tokens_details", "input_tokens_details", "completion_tokens_details", "output_tokens_details"}

func cachedField(d *cachedDetails) *int64       { return &d.CachedTokens }
func reasoningField(d *reasoningDetails) *int64 { return &d.ReasoningTokens }

// detailInto decodes a details member (a *T whose one int64 field, named
// name, is field's): null sets it nil, an object fills it, anything else
// fails.
func detailInto[T any](val []byte, p **T, name string, field func(*T) *int64) (ok, decided bool) {
	switch val[0] {
	case 'n':
		*p = nil
		return true, true
	case '{':
	default:
		return false, true
	}
	if *p == nil {
		*p = new(T)
	}
	n := field(*p)
	ok, decided = true, true
	jsonscan.Object(val, func(key []byte, escaped bool, v []byte) {
		if !ok || !decided {
			return
		}
		match, sure := jsonscan.KeyIs(key, escaped, name)
		switch {
		case !sure:
			decided = false
		case match:
			ok = intInto(v, n)
		}
	})
	return ok, decided
}

// intInto decodes an int64 member as Unmarshal does: an integer literal
// that fits, or null (no change).
func intInto(val []byte, p *int64) bool {
	if val[0] == 'n' {
		return true
	}
	n, ok := parseInt(val)
	if ok {
		*p = n
	}
	return ok
}

// intPtrInto decodes a *int64 member: null sets it nil.
func intPtrInto(val []byte, p **int64) bool {
	if val[0] == 'n' {
		*p = nil
		return true
	}
	n, ok := parseInt(val)
	if ok {
		*p = &n
	}
	return ok
}

// parseInt is strconv.ParseInt(string(b), 10, 64) on a JSON number, without
// the string.
func parseInt(lit []byte) (int64, bool) {
	b := lit
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 { // 18 digits always fit; longer ones to strconv
		n, err := strconv.ParseInt(string(lit), 10, 64)
		return n, err == nil
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false // a fraction or an exponent: not an int64 to Unmarshal
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// usageFieldSlow is usageField with encoding/json alone (name is "usage"
// or "usageMetadata").
func usageFieldSlow[T any](body []byte, name string) (*T, bool) {
	if name == "usageMetadata" {
		var b struct {
			U *T `json:"usageMetadata"`
		}
		if json.Unmarshal(body, &b) != nil {
			return nil, false
		}
		return b.U, true
	}
	var b struct {
		U *T `json:"usage"`
	}
	if json.Unmarshal(body, &b) != nil {
		return nil, false
	}
	return b.U, true
}
