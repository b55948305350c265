package sim

import (
	"strings"
	"testing"
	"time"
)

// TestCapacityStorm: from start to end the provider's capacity is a
// fraction of its limits and only what is above it is refused, in the
// storm's dialect; before and after, the full limits hold.
func TestCapacityStorm(t *testing.T) {
	type want struct {
		ok, refused int
		status      int    // of the refusals
		limitHeader string // the requests-limit header on refusals and successes during the storm ("" = absent)
		retryAfter  bool
		errType     string // error type in the refusal body
	}
	lim := Limits{RPM: 600, Window: Duration(time.Second), WindowMode: WindowBucket}
	for _, tc := range []struct {
		name, provider, dialect, path string
		body                          func() map[string]any
		hdr                           string
		want                          want
	}{
		{"headers", OpenAI, DialectHeaders, pOpenAI, func() map[string]any { return openAIBody("gpt-4o-mini", "hi", 10) },
			"x-ratelimit-limit-requests", want{3, 7, 429, "180", true, "requests"}},
		{"bare 429", OpenAI, DialectBare, pOpenAI, func() map[string]any { return openAIBody("gpt-4o-mini", "hi", 10) },
			"x-ratelimit-limit-requests", want{3, 7, 429, "", false, "requests"}},
		{"anthropic 529", Anthropic, DialectOverloaded, pAnthropic, func() map[string]any { return anthropicBody("claude-haiku-4-5", "hi", 10) },
			"anthropic-ratelimit-requests-limit", want{3, 7, 529, "", false, "overloaded_error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, clk := newSim(t, func(c *Config) {
				setLimits(c, tc.provider, lim)
				c.Storms = []Storm{{Kind: StormCapacity, Provider: tc.provider, Fraction: 0.3, Dialect: tc.dialect,
					Start: Duration(10 * time.Second), End: Duration(20 * time.Second)}}
			})
			burst := func(phase string, wantOK int, during bool) {
				t.Helper()
				ok, refused := 0, 0
				for range 10 {
					rec := do(t, s, "POST", tc.path, tc.body())
					switch rec.Code {
					case 200:
						ok++
						if during && rec.Header().Get(tc.hdr) != tc.want.limitHeader && tc.want.limitHeader != "" {
							t.Errorf("%s: success reports %s %q, want the reduced %q", phase, tc.hdr, rec.Header().Get(tc.hdr), tc.want.limitHeader)
						}
					case tc.want.status:
						refused++
						if got := rec.Header().Get(tc.hdr); got != tc.want.limitHeader {
							t.Errorf("%s: refusal %s %q, want %q", phase, tc.hdr, got, tc.want.limitHeader)
						}
						if (rec.Header().Get("retry-after") != "") != tc.want.retryAfter {
							t.Errorf("%s: retry-after %q, want present=%v", phase, rec.Header().Get("retry-after"), tc.want.retryAfter)
						}
						if !strings.Contains(rec.Body.String(), tc.want.errType) {
							t.Errorf("%s: body %s, want %q", phase, rec.Body, tc.want.errType)
						}
					default:
						t.Fatalf("%s: status %d %s", phase, rec.Code, rec.Body)
					}
				}
				if ok != wantOK || refused != 10-wantOK {
					t.Errorf("%s: %d served, %d refused; want %d and %d", phase, ok, refused, wantOK, 10-wantOK)
				}
			}
			burst("before", 10, false)
			clk.Advance(10 * time.Second)
			burst("during", tc.want.ok, true)
			clk.Advance(time.Second)
			burst("during, a window later", tc.want.ok, true)
			clk.Advance(10 * time.Second)
			burst("after", 10, false)
		})
	}
	if err := (Storm{Kind: StormCapacity, Fraction: 1}).validate(); err == nil {
		t.Error("fraction 1 accepted")
	}
	if err := (Storm{Kind: StormCapacity, Fraction: 0.5, Every: 2}).validate(); err == nil {
		t.Error("every on a capacity storm accepted")
	}
	if err := (Storm{Kind: "429", Fraction: 0.5}).validate(); err == nil {
		t.Error("fraction on a counter storm accepted")
	}
}
