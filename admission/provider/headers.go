// Package provider holds the parsing side of Sluice's provider adapters:
// rate-limit headers into schemas.Observation, Retry-After, refusals into
// schemas.ProviderRejected, and usage from responses and streams. Everything
// here is a pure function of headers and bodies; none of it returns errors
// for missing or malformed provider data, it just reports less. See README.md
// for each provider's headers and formats and their sources.
package provider

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// Kind names a provider API flavour (the kinds are schemas.ProviderKinds).
type Kind = schemas.ProviderKind

// maxMs bounds every parsed delay and reset (31 days): a provider never
// means a longer wait, and a bound at the point of parsing keeps a
// far-future date or a huge number from overflowing anywhere downstream.
const maxMs = int64(31 * 24 * 3600 * 1000)

// maxCount bounds parsed limit and remaining counts; larger is garbage.
const maxCount = int64(1e15)

// ParseRateLimitHeaders maps a response's rate-limit headers to observations,
// one per dimension whose remaining value is present and valid, in the order
// of schemas.Dimensions. Missing or malformed headers yield fewer
// observations, never an error.
//
//   - OpenAI / OpenAI-compatible / Azure: x-ratelimit-{limit,remaining,reset}-{requests,tokens};
//     resets are durations ("6m0s", "12ms"; bare numbers are seconds).
//   - Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset};
//     resets are RFC 3339 times, converted to milliseconds from now.
//   - Gemini: no rate-limit headers (nil).
func ParseRateLimitHeaders(kind Kind, h http.Header, now time.Time) []schemas.Observation {
	return adapterOf(kind).rateLimits(h, now)
}

// parseRateLimits is ParseRateLimitHeaders over one kind's header names,
// whose resets reset reads.
func parseRateLimits(keys []rateLimitKeys, h http.Header, now time.Time, reset func(string, time.Time) (int64, bool)) []schemas.Observation {
	var out []schemas.Observation
	for _, k := range keys {
		o, ok := observation(k.dim, h.Get(k.limit), h.Get(k.remaining))
		if !ok {
			continue
		}
		if ms, ok := reset(h.Get(k.reset), now); ok {
			o.ResetMs = ms
		}
		if out == nil {
			out = make([]schemas.Observation, 0, len(keys)) // one allocation for all (nil still when none)
		}
		out = append(out, o)
	}
	return out
}

// rateLimitKeys are one dimension's rate-limit header names, canonical, so
// that Header.Get finds them without building and canonicalising a key per
// call (six allocations per answer before).
type rateLimitKeys struct {
	dim                     schemas.Dimension
	limit, remaining, reset string
}

func newRateLimitKeys(dim schemas.Dimension, limit, remaining, reset string) rateLimitKeys {
	return rateLimitKeys{dim: dim, limit: http.CanonicalHeaderKey(limit),
		remaining: http.CanonicalHeaderKey(remaining), reset: http.CanonicalHeaderKey(reset)}
}

// Anthropic's and OpenAI's, in the order of schemas.Dimensions.
var (
	anthropicRateLimitKeys = func() []rateLimitKeys {
		var out []rateLimitKeys
		for _, d := range []struct {
			name string
			dim  schemas.Dimension
		}{
			{"requests", schemas.DimRequests},
			{"input-tokens", schemas.DimInputTokens},
			{"output-tokens", schemas.DimOutputTokens},
			{"tokens", schemas.DimTotalTokens},
		} {
			p := "Anthropic-Ratelimit-" + d.name + "-"
			out = append(out, newRateLimitKeys(d.dim, p+"Limit", p+"Remaining", p+"Reset"))
		}
		return out
	}()
	openAIRateLimitKeys = []rateLimitKeys{
		newRateLimitKeys(schemas.DimRequests, "X-Ratelimit-Limit-requests", "X-Ratelimit-Remaining-requests", "X-Ratelimit-Reset-requests"),
		newRateLimitKeys(schemas.DimTotalTokens, "X-Ratelimit-Limit-tokens", "X-Ratelimit-Remaining-tokens", "X-Ratelimit-Reset-tokens"),
	}
)

func observation(dim schemas.Dimension, limit, remaining string) (schemas.Observation, bool) {
	rem, ok := parseCount(remaining)
	if !ok {
		return schemas.Observation{}, false
	}
	o := schemas.Observation{Dimension: dim, Remaining: rem}
	if l, ok := parseCount(limit); ok {
		o.Limit = l
	}
	return o, true
}

// parseCount parses a non-negative integer header value. Negative values
// (Azure sends -1 when it has no data) and garbage are rejected.
func parseCount(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(f) || f < 0 || f > float64(maxCount) {
			return 0, false
		}
		n = int64(f)
	}
	if n < 0 || n > maxCount {
		return 0, false
	}
	return n, true
}

// resetFromTime parses an RFC 3339 reset time into ms from now (0 if past).
// A bare number is taken as seconds, a duration string as a duration.
func resetFromTime(s string, now time.Time) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return ParseDurationMs(s)
	}
	return untilMs(t, now), true
}

// untilMs is the time from now until t in whole ms, rounded up, in
// [0, maxMs]. t.Sub saturates at ±292 years, so the bound is applied
// before rounding (rounding a saturated duration up would overflow).
func untilMs(t, now time.Time) int64 {
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	if d >= time.Duration(maxMs)*time.Millisecond {
		return maxMs
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// ParseDurationMs parses a provider duration such as "1s", "6m0s", "12ms",
// "1h2m3.5s", "0s", "1d2h", "500us" or a bare number of seconds ("20",
// "0.5") into whole milliseconds, rounding up. It never panics; ok is false
// for anything else.
func ParseDurationMs(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 64 {
		return 0, false
	}
	// Bare seconds; a unit letter (h, m, s) is in no number ParseFloat
	// takes, so "6ms" skips the attempt and the error it allocates.
	if !strings.ContainsAny(s, "hmsHMS") {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			if math.IsNaN(f) || f < 0 {
				return 0, false
			}
			return ceilMs(f * 1000), true
		}
	}
	var total float64 // milliseconds
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		if i == 0 {
			return 0, false
		}
		v, err := strconv.ParseFloat(s[:i], 64)
		if err != nil {
			return 0, false
		}
		s = s[i:]
		j := 0
		for j < len(s) && !(s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
			j++
		}
		var unit float64
		switch strings.ToLower(strings.TrimSpace(s[:j])) {
		case "d":
			unit = 86400e3
		case "h":
			unit = 3600e3
		case "m":
			unit = 60e3
		case "s":
			unit = 1e3
		case "ms":
			unit = 1
		case "us", "µs", "μs":
			unit = 1e-3
		case "ns":
			unit = 1e-6
		default:
			return 0, false
		}
		s = s[j:]
		total += v * unit
	}
	return ceilMs(total), true
}

// ceilMs rounds ms up to a whole number in [0, maxMs] (NaN gives 0).
func ceilMs(ms float64) int64 {
	if ms >= float64(maxMs) {
		return maxMs
	}
	if !(ms > 0) {
		return 0
	}
	return int64(math.Ceil(ms - 1e-9))
}

// ParseRetryAfter returns how long to wait, in ms, from the most precise
// header present: retry-after-ms, then x-ms-retry-after-ms (both
// milliseconds), then Retry-After as delay-seconds (integer or decimal) or an
// HTTP-date (RFC 9110 IMF-fixdate; the obsolete RFC 850 and asctime forms are
// accepted too). A date in the past gives 0.
func ParseRetryAfter(h http.Header, now time.Time) (int64, bool) {
	for _, name := range []string{"Retry-After-Ms", "X-Ms-Retry-After-Ms"} {
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && !math.IsNaN(f) {
				return ceilMs(f), true
			}
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f < 0 || math.IsNaN(f) {
			return 0, false
		}
		return ceilMs(f * 1000), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return untilMs(t, now), true
	}
	return 0, false
}
