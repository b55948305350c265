package gateway

import (
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/schemas"
)

// TestRouteEstimateUsesLearnedP95OnlyWhereAllowed: the learned p95 caps the
// output only on a learn_output route without a calibrated value; partial
// and failed answers are not learned.
func TestRouteEstimateUsesLearnedP95OnlyWhereAllowed(t *testing.T) {
	s := &Server{est: estimate.New(estimate.Options{Learn: estimate.LearnOptions{MinSamples: 5}})}
	for i := 0; i < 10; i++ {
		s.learnOutput("m", &schemas.Reconciled{HTTPStatus: 200, OutputTokens: 300})
		s.learnOutput("m", &schemas.Reconciled{HTTPStatus: 200, OutputTokens: 4000, Partial: true})
		s.learnOutput("m", &schemas.Reconciled{HTTPStatus: 500, OutputTokens: 4000})
	}
	learned, ok := s.est.LearnedP95("m")
	if !ok || learned < 300 || learned > 310 {
		t.Fatalf("learned %d, %v: partial or failed answers were learned", learned, ok)
	}
	route := func(learn bool, p95 int64) *config.Route {
		return &config.Route{Model: "m", Profile: "m", DefaultMaxOutputTokens: 4096, P95OutputTokens: p95, LearnOutput: learn,
			InputCorrection: 1.05, Candidates: []config.Candidate{{Profile: "m"}}}
	}
	for _, tc := range []struct {
		name      string
		route     *config.Route
		maxTokens int64
		want      int64
	}{
		{"learning off: the default reservation", route(false, 0), 0, 4096},
		{"learning off, max_tokens given: unknown p95", route(false, 0), 2000, 0},
		{"learning on: the learned p95", route(true, 0), 0, learned},
		{"learning on, max_tokens given: the learned p95", route(true, 0), 2000, learned},
		{"calibrated value wins", route(true, 800), 2000, 800},
	} {
		got := s.routeEstimate(tc.route, tc.maxTokens)
		if got.P95Output != tc.want || got.InputCorrection != 1.05 {
			t.Errorf("%s: %+v, want p95 %d and the route's input correction", tc.name, got, tc.want)
		}
	}
	other := &config.Route{Model: "x", Profile: "x", DefaultMaxOutputTokens: 4096, LearnOutput: true}
	if got := s.routeEstimate(other, 0); got.P95Output != 4096 {
		t.Errorf("a route with nothing learned: %+v", got)
	}
}
