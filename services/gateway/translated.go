package gateway

import (
	"github.com/sluice-dev/sluice/admission/lifecycle"
)

// targetEstimate is the request's estimate on a candidate whose provider
// counts it otherwise than the client's API (zero: the request's): a chat
// completion to an Anthropic provider is the Messages request it is
// translated to — Claude's tokenizer approximation, Anthropic's tool
// framing, the forced tool of a response_format, the max_tokens sent — so
// its reservation, in that provider's scope, is what that provider will
// charge.
func (c *call) targetEstimate(cd candidate) lifecycle.Usage {
	req, ok := c.parsed.CountedAs(cd.prov.Kind, cd.UpstreamModel, c.route.DefaultMaxOutputTokens)
	if !ok {
		return lifecycle.Usage{} // the client's request, or the candidate is Unserved
	}
	e := c.s.est.EstimateRoute(req, c.s.routeEstimate(c.route, c.parsed.Request.MaxTokens))
	return lifecycle.Usage{InputTokens: e.InputTokens, CachedInputTokens: e.CachedInputTokens, OutputTokens: e.OutputTokens}
}
