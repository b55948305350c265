package gateway

import (
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/schemas"
)

// routeEstimate is what the estimator is told of route for a request that
// asked for maxTokens of output (0: not said). The output cap is, in
// order: the calibrated p95_output_tokens; else, on a route with
// learn_output, the p95 the estimator learned from this gateway's
// reconciled answers; then, when the request does not say, the route's
// default reservation if that is lower. The input correction is the
// calibrated one.
//
// The learned p95 only ever lowers the output reservation (the estimator
// takes the minimum with max_tokens and its defaults), and it is never under
// the observed p95. Lowering it is safe where the provider counts actual
// output; where the provider charges max_tokens on arrival (OpenAI, Azure
// TPM) it admits more than the provider allows, which is why learn_output
// is off unless a route turns it on. The ledger's per-bucket provider
// accounting mode (issue 10 item 2) is the other half: a bucket that
// counts max_tokens on arrival should charge the request's max tokens
// whatever this estimate says.
func (s *Server) routeEstimate(route *config.Route, maxTokens int64) estimate.Route {
	p95 := route.P95OutputTokens
	if p95 == 0 && route.LearnOutput {
		if l, ok := s.est.LearnedP95(learnKey(route)); ok {
			p95 = l
		}
	}
	if maxTokens == 0 && (p95 == 0 || route.DefaultMaxOutputTokens < p95) {
		p95 = route.DefaultMaxOutputTokens // the route's default reservation when the request does not say
	}
	return estimate.Route{P95Output: p95, InputCorrection: route.InputCorrection}
}

// learnKey names a route in the learner: its primary candidate's model
// profile, the route of the events (and of the calibration report).
func learnKey(route *config.Route) string {
	if len(route.Candidates) > 0 && route.Candidates[0].Profile != "" {
		return route.Candidates[0].Profile
	}
	return route.Profile
}

// learnOutput feeds a reconciled attempt's actual output to the learner.
// Only complete successful answers count: a cut stream or an error says
// nothing about what the route's answers need. It learns on every route
// (cheap, bounded); routeEstimate decides where the value is used.
func (s *Server) learnOutput(route string, rec *schemas.Reconciled) {
	if rec.Partial || rec.HTTPStatus < 200 || rec.HTTPStatus > 299 {
		return
	}
	s.est.ObserveOutput(route, rec.OutputTokens)
}
