package report

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-dev/sluice/analytics"
)

// Recommendation kinds.
const (
	KindRouteOutputEstimate  = "route_output_estimate"
	KindRouteInputCorrection = "route_input_correction"
	KindBucketCapacity       = "bucket_capacity"
	KindClassDeadline        = "class_deadline"
	KindStrandedQuota        = "stranded_quota"
	// KindProviderStorm: provider 429s that do not persist across the
	// range; advice that no capacity changes for them.
	KindProviderStorm = "provider_storm"
)

// Recommendation is one proposed change with the figures that justify it.
type Recommendation struct {
	Kind        string     `json:"kind"`
	Target      string     `json:"target"`
	Current     float64    `json:"current"`
	Recommended float64    `json:"recommended"`
	Reason      string     `json:"reason"`
	Evidence    []Evidence `json:"evidence"`
	// Effect is what applying it is expected to change, in the figures
	// the evidence gives (so next week's report can check it).
	Effect string `json:"effect,omitempty"`
	// InPatch is false for advice the patch does not carry.
	InPatch bool `json:"in_patch"`
}

// Evidence is one named figure behind a recommendation.
type Evidence struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// PatchSource is the ConfigChanged source of an applied calibration patch.
const PatchSource = "calibration"

// Patch is the config change a report proposes; `sluice config apply`
// shows it as a diff against a gateway configuration and installs it.
type Patch struct {
	Source  string        `json:"source"`
	From    time.Time     `json:"from"`
	To      time.Time     `json:"to"`
	Routes  []RoutePatch  `json:"routes"`
	Buckets []BucketPatch `json:"buckets"`
	Classes []ClassPatch  `json:"classes"`
}

// RoutePatch sets a route's output estimate (the p95 of actual output;
// it caps the output reservation) and reports its bounded input correction
// factor (1 = none).
type RoutePatch struct {
	Route           string  `json:"route"`
	P95OutputTokens int64   `json:"p95_output_tokens,omitempty"`
	InputCorrection float64 `json:"input_correction,omitempty"`
}

// BucketPatch scales the capacity of a scope's buckets of one dimension
// (Bucket "" = every bucket of that dimension in the scope).
type BucketPatch struct {
	Scope          string  `json:"scope"`
	Bucket         string  `json:"bucket,omitempty"`
	Dimension      string  `json:"dimension"`
	CapacityFactor float64 `json:"capacity_factor"`
}

// ClassPatch scales a traffic class's max queue wait.
type ClassPatch struct {
	Class         string  `json:"class"`
	MaxWaitFactor float64 `json:"max_wait_factor"`
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// round3 keeps factors readable and stable in golden files.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func recommend(cur map[string]*analytics.Result, b Bounds, rep *Report) ([]Recommendation, Patch) {
	p := Patch{Source: PatchSource, From: rep.From, To: rep.To, Routes: []RoutePatch{}, Buckets: []BucketPatch{}, Classes: []ClassPatch{}}
	var recs []Recommendation
	recs = recommendRoutes(cur["route_calibration"], b, recs, &p)
	recs = recommendBuckets(cur["scope_429"], b, recs, &p)
	recs = recommendStranded(cur["stranded_quota"], recs)
	recs = recommendClasses(cur["deadline_misses"], cur["queue_wait"], b, recs, &p)
	return recs, p
}

// colF is the number in column col of a result row, NaN without the column.
func colF(res *analytics.Result, row []any, col string) float64 {
	if i := res.Col(col); i >= 0 {
		return toF(row[i])
	}
	return math.NaN()
}

// colS is column col of a result row as text, "" without the column.
func colS(res *analytics.Result, row []any, col string) string {
	if i := res.Col(col); i >= 0 {
		return fmt.Sprint(row[i])
	}
	return ""
}

// recommendRoutes: each route's output estimate and input correction.
func recommendRoutes(rc *analytics.Result, b Bounds, recs []Recommendation, p *Patch) []Recommendation {
	// Routes: output estimate = p95 of actual output; input correction
	// bounded per report and never under the observed p95 of actual ÷
	// estimated input.
	for _, row := range rc.Rows {
		route := colS(rc, row, "route")
		n := colF(rc, row, "n")
		if n < float64(b.MinSamples) {
			continue
		}
		rp := RoutePatch{Route: route}
		outP95, estOut := colF(rc, row, "out_p95"), colF(rc, row, "est_out_mean")
		if outP95 > 0 && math.Abs(estOut-outP95) > 0.05*outP95 {
			// Bounded per report: the new cap is within [1/(1+max),
			// 1+max] of the current mean reservation, so one week's
			// traffic (a burst of short answers) cannot cut it by 60 %.
			capped := math.Ceil(clamp(outP95, estOut/(1+b.OutputChangeMax), estOut*(1+b.OutputChangeMax)))
			rp.P95OutputTokens = int64(capped)
			bound := ""
			if capped != math.Ceil(outP95) {
				bound = fmt.Sprintf(" (bounded to ×[%.2f, %.2f] of the current reservation per report)", 1/(1+b.OutputChangeMax), 1+b.OutputChangeMax)
			}
			recs = append(recs, Recommendation{Kind: KindRouteOutputEstimate, Target: route, Current: math.Round(estOut),
				Recommended: float64(rp.P95OutputTokens), InPatch: true,
				Reason:   fmt.Sprintf("reserves %.0f output tokens on average; 95%% of its responses use at most %.0f%s", estOut, outP95, bound),
				Evidence: []Evidence{{"reconciled attempts", n}, {"p95 actual output tokens", outP95}, {"mean reserved output tokens", round3(estOut)}},
				Effect: fmt.Sprintf("each request reserves %+.0f output tokens (%+.1f%%); on this week's traffic about %s of the responses would use more than the cap",
					capped-estOut, 100*(capped-estOut)/estOut, overCap(capped, outP95))})
		}
		ratio, under := colF(rc, row, "in_ratio"), colF(rc, row, "in_under_p95")
		if ratio > 0 {
			want := 1 / ratio
			lo, hi := 1-b.InputCorrectionMax, 1+b.InputCorrectionMax
			f := clamp(want, lo, hi)
			if under > 0 {
				// Not under the p95 of actual ÷ estimate, and still
				// within the report's bound whatever that p95 says
				// (estimates of 0 made it 1000 once).
				f = clamp(math.Max(f, under), lo, hi)
			}
			f = round3(f)
			if math.Abs(f-1) >= 0.01 {
				rp.InputCorrection = f
				recs = append(recs, Recommendation{Kind: KindRouteInputCorrection, Target: route, Current: 1, Recommended: f, InPatch: true,
					Reason: fmt.Sprintf("input estimates are %.1f%% of actual; correction bounded to ±%.0f%% per report and not under the p95 of actual ÷ estimate",
						100*ratio, 100*b.InputCorrectionMax),
					Evidence: []Evidence{{"reconciled attempts", n}, {"estimated ÷ actual input", round3(ratio)}, {"unbounded factor", round3(want)},
						{"p95 actual ÷ estimated input", round3(under)}},
					Effect: fmt.Sprintf("input estimates go from %.1f%% to about %.1f%% of actual input", 100*ratio, 100*ratio*f)})
			}
		}
		if rp.P95OutputTokens != 0 || rp.InputCorrection != 0 {
			p.Routes = append(p.Routes, rp)
		}
	}
	return recs
}

// recommendBuckets: lower the request buckets of a scope with persistent
// provider 429s; a storm is reported, not patched.
func recommendBuckets(s429 *analytics.Result, b Bounds, recs []Recommendation, p *Patch) []Recommendation {
	// Buckets: provider 429s in a scope mean its local limits admit more
	// than the provider does: lower its request buckets, bounded.
	for _, row := range s429.Rows {
		ratio := colF(s429, row, "ratio")
		if ratio <= b.Provider429Min {
			continue
		}
		scope := colS(s429, row, "scope")
		days, hours, peak := colF(s429, row, "days_with_429"), colF(s429, row, "hours_with_429"), colF(s429, row, "peak_hour_share")
		spread := []Evidence{{"days with 429s", days}, {"hours with 429s", hours}, {"share of the busiest hour", round3(peak)}}
		if !(days >= float64(b.PersistDaysMin)) || !(peak <= b.PeakHourShareMax) {
			// Refusals bunched in a few hours are a storm on the
			// provider's side (or one it announced): cutting the
			// buckets for it would waste a week of capacity.
			recs = append(recs, Recommendation{Kind: KindProviderStorm, Target: scope, Current: 1, Recommended: 1,
				Reason: fmt.Sprintf("the provider rejected %.2f%% of upstream attempts with 429, but on %.0f day(s), %.0f hour(s), %.0f%% in the busiest hour: a transient storm, not a calibration problem; capacity changes only for 429s on at least %d days with no hour over %.0f%% of them",
					100*ratio, days, hours, 100*peak, b.PersistDaysMin, 100*b.PeakHourShareMax),
				Evidence: append([]Evidence{{"upstream attempts", colF(s429, row, "upstream_attempts")}, {"provider 429s", colF(s429, row, "provider_429")}, {"429 ratio", round3(ratio)}}, spread...),
				Effect:   "none: the buckets stay as they are"})
			continue
		}
		f := round3(1 - math.Min(b.CapacityChangeMax, 2*ratio))
		p.Buckets = append(p.Buckets, BucketPatch{Scope: scope, Dimension: "requests", CapacityFactor: f})
		recs = append(recs, Recommendation{Kind: KindBucketCapacity, Target: scope + " requests buckets", Current: 1, Recommended: f, InPatch: true,
			Reason: fmt.Sprintf("the provider rejected %.2f%% of upstream attempts with 429 although the ledger admitted them (a calibration problem): lower the request buckets, at most %.0f%% per report",
				100*ratio, 100*b.CapacityChangeMax),
			Evidence: append([]Evidence{{"upstream attempts", colF(s429, row, "upstream_attempts")}, {"provider 429s", colF(s429, row, "provider_429")}, {"429 ratio", round3(ratio)}}, spread...),
			Effect: fmt.Sprintf("the ledger admits %.1f%% fewer requests per period into %s, so fewer reach the provider only to get a 429 (target: under %.1f%%)",
				100*(1-f), scope, 100*b.Provider429Min)})
	}
	return recs
}

// recommendStranded: advice where stranded quota turned demand away.
func recommendStranded(sq *analytics.Result, recs []Recommendation) []Recommendation {
	// Stranded quota that turned demand away is advice, not a patch: the
	// route estimates above are the fix; a larger bucket would let the
	// provider see more than it allows.
	for _, row := range sq.Rows {
		pct, refused := colF(sq, row, "pct_of_capacity"), colF(sq, row, "refused")
		if pct < 5 || refused == 0 {
			continue
		}
		target := colS(sq, row, "scope") + " " + colS(sq, row, "bucket") + " " + colS(sq, row, "dimension")
		recs = append(recs, Recommendation{Kind: KindStrandedQuota, Target: target, Current: round3(pct), Recommended: round3(pct),
			Reason:   fmt.Sprintf("%.1f%% of the bucket sat reserved and unused while it queued or denied %.0f attempts: correct the route estimates rather than the bucket size", pct, refused),
			Evidence: []Evidence{{"stranded token·s", round3(colF(sq, row, "stranded_token_s"))}, {"% of capacity", round3(pct)}, {"attempts queued or denied here", refused}},
			Effect:   "none by itself (advice): the route estimates and the holds' owners (see stranded quota by tenant, route and class) are where the capacity comes back"})
	}
	return recs
}

// recommendClasses: raise the max wait of a class that misses deadlines.
func recommendClasses(dm, qw *analytics.Result, b Bounds, recs []Recommendation, p *Patch) []Recommendation {
	// Classes: deadline misses above the threshold raise the class's max
	// queue wait, bounded.
	p99 := map[string]float64{}
	for _, row := range qw.Rows {
		p99[colS(qw, row, "class")] = colF(qw, row, "p99_ms")
	}
	for _, row := range dm.Rows {
		ratio := colF(dm, row, "miss_ratio")
		if ratio <= b.DeadlineMissMin {
			continue
		}
		class := colS(dm, row, "class")
		f := round3(1 + math.Min(b.DeadlineRaiseMax, 5*ratio))
		p.Classes = append(p.Classes, ClassPatch{Class: class, MaxWaitFactor: f})
		recs = append(recs, Recommendation{Kind: KindClassDeadline, Target: class, Current: 1, Recommended: f, InPatch: true,
			Reason: fmt.Sprintf("%.1f%% of %s requests missed their deadline or expired queued: raise the class's max wait, at most +%.0f%% per report",
				100*ratio, class, 100*b.DeadlineRaiseMax),
			Evidence: []Evidence{{"requests", colF(dm, row, "requests")}, {"misses", colF(dm, row, "misses")}, {"miss ratio", round3(ratio)},
				{"p99 queue wait ms (dispatched)", p99[class]}, {"deadline ms", colF(dm, row, "deadline_ms_max")}},
			Effect: fmt.Sprintf("%s requests may wait %.0f%% longer in the queue before they expire; fewer expire queued, at the price of a longer wait", class, 100*(f-1))})
	}
	return recs
}

// overCap says how many responses would exceed an output cap: 5 % at the
// p95 itself, more when the bound kept the cap under it.
func overCap(capped, p95 float64) string {
	if capped >= p95 {
		return "5 % or less"
	}
	return "more than 5 %"
}
