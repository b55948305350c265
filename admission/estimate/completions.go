package estimate

import (
	"encoding/json"
	"fmt"
)

// FormatOpenAICompletions is OpenAI's legacy completions API (POST
// /v1/completions).
const FormatOpenAICompletions Format = "openai_completions"

// CompletionsDefaultMaxTokens is the legacy completions API's max_tokens
// when the request does not set it (OpenAI's documented default): the
// provider never generates more, so it is the request's true bound.
const CompletionsDefaultMaxTokens = 16

// Bounds of the legacy completions API's choice counts.
const (
	completionsNMax      = 128
	completionsBestOfMax = 20
	// completionsPromptsMax bounds the prompts of one request (the same
	// bound as embeddings inputs).
	completionsPromptsMax = MaxEmbeddingInputs
)

// ParseOpenAICompletions parses a legacy completions request body. prompt
// is a string, an array of strings, an array of token ids or an array of
// token-id arrays (each array element is one prompt; token arrays are
// counted exactly). The provider answers n choices per prompt and
// generates best_of per prompt, and charges what it generates, so N is
// max(n, best_of) × prompts: the estimate reserves that many outputs.
func ParseOpenAICompletions(body []byte) (Request, error) {
	if e := topLevel(body); e != nil {
		return Request{}, e
	}
	var b struct {
		Model         *string         `json:"model"`
		Prompt        json.RawMessage `json:"prompt"`
		Suffix        *string         `json:"suffix"`
		MaxTokens     json.RawMessage `json:"max_tokens"`
		N             *int64          `json:"n"`
		BestOf        *int64          `json:"best_of"`
		Stream        *bool           `json:"stream"`
		StreamOptions *struct {
			IncludeUsage *bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if e := decode(body, &b, ""); e != nil {
		return Request{}, e
	}
	req := Request{Format: FormatOpenAICompletions, N: 1}
	if e := requireModel(b.Model, b.Model != nil); e != nil {
		return Request{}, e
	}
	req.Model = *b.Model
	prompts, e := parsePrompt(b.Prompt, &req)
	if e != nil {
		return Request{}, e
	}
	if b.Suffix != nil && *b.Suffix != "" {
		req.Input = append(req.Input, *b.Suffix)
	}
	mt, e := maxTokens("max_tokens", b.MaxTokens)
	if e != nil {
		return Request{}, e
	}
	req.MaxTokens = mt
	if mt == 0 {
		req.MaxTokens = CompletionsDefaultMaxTokens
	}
	n, bestOf := int64(1), int64(1)
	if b.N != nil {
		if *b.N < 1 || *b.N > completionsNMax {
			return Request{}, &RequestError{Code: CodeInvalidValue, Param: "n", Message: fmt.Sprintf("n must be between 1 and %d", completionsNMax)}
		}
		n = *b.N
	}
	if b.BestOf != nil {
		if *b.BestOf < 1 || *b.BestOf > completionsBestOfMax {
			return Request{}, &RequestError{Code: CodeInvalidValue, Param: "best_of", Message: fmt.Sprintf("best_of must be between 1 and %d", completionsBestOfMax)}
		}
		if *b.BestOf < n {
			return Request{}, &RequestError{Code: CodeInvalidValue, Param: "best_of", Message: "best_of must be greater than or equal to n"}
		}
		bestOf = *b.BestOf
	}
	req.N = max(n, bestOf) * prompts
	if b.Stream != nil {
		req.Stream = *b.Stream
	}
	if b.StreamOptions != nil && b.StreamOptions.IncludeUsage != nil {
		req.IncludeUsage = *b.StreamOptions.IncludeUsage
	}
	return req, nil
}

// parsePrompt reads prompt into req.Input (texts) and req.InputTokens
// (token arrays) and returns the number of prompts.
func parsePrompt(raw json.RawMessage, req *Request) (int64, *RequestError) {
	switch firstByte(raw) {
	case 0, 'n':
		return 0, &RequestError{Code: CodeMissingField, Param: "prompt", Message: "prompt is required"}
	case '"':
		var s string
		if e := decode(raw, &s, "prompt"); e != nil {
			return 0, e
		}
		req.Input = []string{s}
		return 1, nil
	case '[':
	default:
		return 0, typeErr("prompt", "a string or an array", raw)
	}
	var items []json.RawMessage
	if e := decode(raw, &items, "prompt"); e != nil {
		return 0, e
	}
	if len(items) == 0 {
		return 0, &RequestError{Code: CodeInvalidValue, Param: "prompt", Message: "prompt must not be empty"}
	}
	if c := firstByte(items[0]); c == '-' || (c >= '0' && c <= '9') {
		for i, it := range items { // one pre-tokenized prompt
			if e := tokenID(it, fmt.Sprintf("prompt[%d]", i)); e != nil {
				return 0, e
			}
		}
		req.InputTokens = int64(len(items))
		return 1, nil
	}
	if len(items) > completionsPromptsMax {
		return 0, &RequestError{Code: CodeInvalidValue, Param: "prompt", Message: fmt.Sprintf("prompt must have at most %d items", completionsPromptsMax)}
	}
	for i, it := range items {
		param := fmt.Sprintf("prompt[%d]", i)
		switch firstByte(it) {
		case '"':
			var s string
			if e := decode(it, &s, param); e != nil {
				return 0, e
			}
			req.Input = append(req.Input, s)
		case '[':
			var ids []json.RawMessage
			if e := decode(it, &ids, param); e != nil {
				return 0, e
			}
			for j, id := range ids {
				if e := tokenID(id, fmt.Sprintf("%s[%d]", param, j)); e != nil {
					return 0, e
				}
			}
			req.InputTokens += int64(len(ids))
		default:
			return 0, typeErr(param, "a string or an array of token ids", it)
		}
	}
	return int64(len(items)), nil
}
