package provider

import (
	"bytes"
	"encoding/json"

	"github.com/sluice-dev/sluice/schemas"
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
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    int64  `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
	// Responses API names.
	InputTokens        *int64 `json:"input_tokens"`
	OutputTokens       int64  `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
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
	switch kind {
	case schemas.ProviderAnthropic:
		var b struct {
			Usage *anthropicUsage `json:"usage"`
		}
		if json.Unmarshal(body, &b) != nil || b.Usage == nil {
			return Usage{}, false
		}
		return b.Usage.normalise(), true
	case schemas.ProviderGemini:
		var b struct {
			UsageMetadata *geminiUsage `json:"usageMetadata"`
		}
		if json.Unmarshal(body, &b) != nil || b.UsageMetadata == nil {
			return Usage{}, false
		}
		return b.UsageMetadata.normalise(), true
	default:
		var b struct {
			Usage *openAIUsage `json:"usage"`
		}
		if json.Unmarshal(body, &b) != nil || b.Usage == nil {
			return Usage{}, false
		}
		return b.Usage.normalise()
	}
}
