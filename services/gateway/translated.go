package gateway

import (
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/admission/lifecycle"
	"github.com/sluice-dev/sluice/admission/provider"
	"github.com/sluice-dev/sluice/schemas"
)

// targetEstimate is the request's estimate on a candidate whose provider
// counts it otherwise than the client's API (zero: the request's): a chat
// completion to an Anthropic provider is the Messages request it is
// translated to — Claude's tokenizer approximation, Anthropic's tool
// framing, the forced tool of a response_format, the max_tokens sent — so
// its reservation, in that provider's scope, is what that provider will
// charge.
func (c *call) targetEstimate(cd candidate) lifecycle.Usage {
	if !c.api.Translated(cd.prov.Kind) || cd.prov.Kind != schemas.ProviderAnthropic {
		return lifecycle.Usage{}
	}
	b, err := provider.ClaudeMessagesBody(c.api, c.body, cd.UpstreamModel, c.route.DefaultMaxOutputTokens)
	if err != nil {
		return lifecycle.Usage{} // the candidate is Unserved
	}
	req, err := estimate.ParseAnthropicMessages(b)
	if err != nil {
		return lifecycle.Usage{}
	}
	e := c.s.est.EstimateRoute(req, c.s.routeEstimate(c.route, c.req.MaxTokens))
	return lifecycle.Usage{InputTokens: e.InputTokens, CachedInputTokens: e.CachedInputTokens, OutputTokens: e.OutputTokens}
}
