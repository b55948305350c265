package gateway

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestServiceTimes: the p95 of complete successful answers per route and
// mode (total time, or first byte when streaming), nothing below
// serviceSamplesMin samples, and only the last serviceSamplesMax count.
func TestServiceTimes(t *testing.T) {
	var s serviceTimes
	ok := func(total, first int64, streaming bool) *schemas.Reconciled {
		return &schemas.Reconciled{HTTPStatus: 200, TotalMs: total, FirstByteMs: first, Streaming: streaming}
	}
	type step struct {
		name      string
		observe   []*schemas.Reconciled
		route     string
		streaming bool
		want      int64
	}
	var many []*schemas.Reconciled
	for i := int64(1); i <= 100; i++ {
		many = append(many, ok(i*10, 1, false))
	}
	var recent []*schemas.Reconciled
	for range serviceSamplesMax {
		recent = append(recent, ok(50, 1, false))
	}
	steps := []step{
		{"nothing seen", nil, "r", false, 0},
		{"too few samples", []*schemas.Reconciled{ok(100, 5, false), ok(100, 5, false)}, "r", false, 0},
		{"errors and cut streams are not samples", []*schemas.Reconciled{
			{HTTPStatus: 429, TotalMs: 9000}, {HTTPStatus: 200, TotalMs: 9000, Partial: true}, {HTTPStatus: 200}}, "r", false, 0},
		{"p95 of totals (with the two 100s before)", many, "r", false, 950},
		{"streams learn first bytes apart", []*schemas.Reconciled{
			ok(5000, 40, true), ok(5000, 40, true), ok(5000, 40, true), ok(5000, 40, true),
			ok(5000, 40, true), ok(5000, 40, true), ok(5000, 40, true), ok(5000, 80, true)}, "r", true, 80},
		{"plain requests unchanged by streams", nil, "r", false, 950},
		{"another route", nil, "other", false, 0},
		{"only the last samples count", recent, "r", false, 50},
	}
	defer func() {
		if got := s.expectedMs("r", false, 1000+serviceSampleTTLMs+1); got != 0 {
			t.Errorf("samples older than %d ms still count: %d", serviceSampleTTLMs, got)
		}
	}()
	for _, st := range steps {
		for _, rec := range st.observe {
			s.observe("r", rec, 1000)
		}
		if got := s.expectedMs(st.route, st.streaming, 2000); got != st.want {
			t.Errorf("step %q: expectedMs(%s, %v) = %d, want %d", st.name, st.route, st.streaming, got, st.want)
		}
	}
}
