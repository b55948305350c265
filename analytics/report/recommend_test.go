package report

import (
	"testing"

	"github.com/sluice-dev/sluice/analytics"
)

// TestRecommendBoundsEveryFactor: whatever one week's figures say, a
// report moves a route's input correction by at most ±10 % and its output
// estimate within [0.8, 1.25] of the current reservation. The first row
// is issue 22's hand-made log: 40 exact requests, 4 of them retries whose
// estimate read 0, so the p95 of actual ÷ estimate was 1000 (and the
// report proposed input_correction 1000, which config apply rejected).
func TestRecommendBoundsEveryFactor(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		outP95, estOut, inRatio, under float64
		wantIn                         float64
		wantOut                        int64
	}{
		{"retries read as estimate 0", 200, 200, 1.0, 1000, 1.1, 0}, // was 1000
		{"p95 under the bound", 200, 200, 0.5, 3, 1.1, 0},
		{"output cut bounded", 351, 900, 1, 1, 0, 720},
		{"output raise bounded", 2000, 400, 1, 1, 0, 500},
		{"output within the bound", 360, 400, 1, 1, 0, 360},
		{"input lowered", 200, 200, 1.5, 0.5, 0.9, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := &analytics.Result{Columns: []string{"route", "n", "out_p95", "est_out_mean", "in_p95", "in_ratio", "in_under_p95"},
				Rows: [][]any{{"r", int64(40), tc.outP95, tc.estOut, 1000.0, tc.inRatio, tc.under}}}
			empty := func(cols ...string) *analytics.Result { return &analytics.Result{Columns: cols} }
			cur := map[string]*analytics.Result{"route_calibration": rc, "scope_429": empty("scope", "ratio"),
				"stranded_quota": empty("scope"), "deadline_misses": empty("class"), "queue_wait": empty("class")}
			recs, p := recommend(cur, Bounds{}.withDefaults(), &Report{})
			var in float64
			var out int64
			for _, r := range p.Routes {
				in, out = r.InputCorrection, r.P95OutputTokens
			}
			if in != tc.wantIn || out != tc.wantOut {
				t.Errorf("input_correction %v, p95_output_tokens %d; want %v, %d (%+v)", in, out, tc.wantIn, tc.wantOut, recs)
			}
			for _, r := range recs {
				if r.Effect == "" || len(r.Evidence) == 0 {
					t.Errorf("%s %s: no evidence or expected effect", r.Kind, r.Target)
				}
			}
		})
	}
}

// TestRecommendNoCapacityCutForAStorm: 429s bunched in one hour (a storm)
// give advice and no patch; the same ratio spread over the week lowers
// the request buckets.
func TestRecommendNoCapacityCutForAStorm(t *testing.T) {
	empty := func(cols ...string) *analytics.Result { return &analytics.Result{Columns: cols} }
	for _, tc := range []struct {
		name              string
		days, hours, peak float64
		wantCut           bool
	}{
		{"one-hour storm", 1, 1, 1, false},
		{"two days", 2, 5, 0.3, false},
		{"bunched over the week", 5, 6, 0.8, false},
		{"persistent", 7, 60, 0.05, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s429 := &analytics.Result{Columns: []string{"scope", "upstream_attempts", "provider_429", "ratio", "days_with_429", "hours_with_429", "peak_hour_share"},
				Rows: [][]any{{"openai:x", int64(1000), int64(50), 0.05, tc.days, tc.hours, tc.peak}}}
			cur := map[string]*analytics.Result{"route_calibration": empty("route"), "scope_429": s429,
				"stranded_quota": empty("scope"), "deadline_misses": empty("class"), "queue_wait": empty("class")}
			recs, p := recommend(cur, Bounds{}.withDefaults(), &Report{})
			if cut := len(p.Buckets) > 0; cut != tc.wantCut {
				t.Errorf("capacity cut %v, want %v: %+v", cut, tc.wantCut, recs)
			}
			if len(recs) != 1 || recs[0].Effect == "" {
				t.Errorf("want one recommendation with its effect: %+v", recs)
			}
		})
	}
}
