package provider

import (
	"net/http"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/schemas"
)

// anthropic is the adapter of Anthropic: the Messages API passed through,
// and chat completions and the Responses API translated to Messages
// (claude.go, claude_responses.go) and their answers and streams back
// (claude_answer.go, claude_responses_answer.go); the x-api-key credential
// with anthropic-version, anthropic-ratelimit-* headers with RFC 3339
// resets, Anthropic's usage and stream events.
type anthropic struct{}

func init() { register(anthropic{}, schemas.ProviderAnthropic) }

// fields: the Anthropic-Version header, 2023-06-01 unless configured.
func (anthropic) fields() config.KindFields {
	return config.KindFields{DefaultAPIVersion: "2023-06-01"}
}

func (anthropic) serves(a API) bool { return a == APIMessages || a == APIChat || a == APIResponses }

func (anthropic) translated(a API) bool { return a == APIChat || a == APIResponses }

func (anthropic) notServed(_ Kind, a API) string {
	return "an anthropic provider is reached through POST /v1/messages, or POST /v1/chat/completions and POST /v1/responses (translated to Messages); " + a.Path() + " is not translated"
}

func (anthropic) untranslatable(p *Parsed) string {
	if why := p.claudeTranslation().why; len(why) > 0 {
		return "the translation to Anthropic Messages does not support " + strings.Join(why, "; ")
	}
	return ""
}

// countedAs is the Messages request a chat completion or a Responses
// request is translated to: Claude's tokenizer approximation, Anthropic's
// tool framing, the forced tool of a response_format and the max_tokens
// sent are what Anthropic charges.
func (c anthropic) countedAs(p *Parsed, upstreamModel string, defaultMax int64) (estimate.Request, bool) {
	if !c.translated(p.API) {
		return estimate.Request{}, false
	}
	b, _, err := p.claudeMessages(upstreamModel, defaultMax)
	if err != nil {
		return estimate.Request{}, false
	}
	req, err := estimate.ParseAnthropicMessages(b)
	return req, err == nil
}

func (c anthropic) build(p *config.Provider, a Attempt, base string) (built, error) {
	u := base + "/messages"
	if !c.translated(a.API) {
		return passthroughBody(u, a, a.UpstreamModel)
	}
	b, jsonTool, err := a.Parsed.claudeMessages(a.UpstreamModel, a.DefaultMaxTokens)
	if err != nil {
		return built{}, err
	}
	return built{url: u, body: b, jsonTool: jsonTool}, nil
}

func (anthropic) headers(p *config.Provider, a Attempt) [3]header {
	var h [3]header
	if key := p.APIKey(); key != "" {
		h[0] = header{"X-Api-Key", key}
	}
	h[1] = header{"Anthropic-Version", p.APIVersion}
	if a.AnthropicBeta != "" {
		h[2] = header{"Anthropic-Beta", a.AnthropicBeta}
	}
	return h
}

func (anthropic) rateLimits(h http.Header, now time.Time) []schemas.Observation {
	return parseRateLimits(anthropicRateLimitKeys, h, now, resetFromTime)
}

func (anthropic) usage(body []byte) (Usage, bool) {
	u, ok := usageField[anthropicUsage](body, "usage")
	if !ok || u == nil {
		return Usage{}, false
	}
	return u.normalise(), true
}

func (anthropic) feed(s *StreamUsage, event, data []byte) { s.feedAnthropic(event, data) }

// answer translates the message answering a chat completion or a
// Responses request (a Messages answer goes as it came).
func (c anthropic) answer(x Exchange, body []byte, model, id string) ([]byte, bool) {
	if !c.translated(x.API) {
		return nil, false
	}
	translate := ClaudeToOpenAI
	if x.API == APIResponses {
		translate = ClaudeToResponse
	}
	b, err := translate(body, model, id, x.jsonTool)
	return b, err == nil
}

func (c anthropic) translator(x Exchange, model, id string, includeUsage bool, u *StreamUsage) streamTranslator {
	switch {
	case !c.translated(x.API):
		return nil
	case x.API == APIResponses:
		return NewClaudeResponsesStream(model, "resp_"+id, x.jsonTool, u)
	}
	return NewClaudeStream(model, "chatcmpl-"+id, includeUsage, x.jsonTool, u)
}
