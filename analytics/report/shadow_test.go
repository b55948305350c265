package report

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/analytics"
)

// TestShadowSummary: the sentence says plainly what enforcing the shadow
// limits would have changed, counting each group's evaluated grants once.
func TestShadowSummary(t *testing.T) {
	cols := []string{"scope", "tenant", "class", "limit_path", "dimension", "grants", "evaluated", "would_refuse"}
	res := func(rows ...[]any) *analytics.Result { return &analytics.Result{Columns: cols, Rows: rows} }
	for _, tc := range []struct {
		name     string
		cur, old *analytics.Result
		want     []string
	}{
		{"no shadow limits", res(), res(), []string{"No grant passed a shadow limit"}},
		{"all covered", res([]any{"s", "a", "c", "", "", int64(10), int64(10), int64(0)}), res(),
			[]string{"would have changed nothing", "all 10 grants"}},
		{"some refused", res(
			[]any{"s", "a", "c", "", "", int64(6), int64(10), int64(0)},
			[]any{"s", "a", "c", "org:o/tenant:a", "output_tokens", int64(4), int64(10), int64(4)},
			[]any{"s", "b", "c", "org:o", "input_tokens", int64(1), int64(10), int64(1)},
			[]any{"s", "b", "c", "", "", int64(9), int64(10), int64(0)}),
			res([]any{"s", "a", "c", "org:o/tenant:a", "output_tokens", int64(1), int64(4), int64(1)}),
			[]string{"queued or denied 5 of the 20 grants", "(25.0 %)", "at s org:o/tenant:a (output_tokens): 4", "The week before: 25.0 %"}},
	} {
		got := shadowSummary(tc.cur, tc.old)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", tc.name, got, w)
			}
		}
	}
}
