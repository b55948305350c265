package sim

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// What the provider styles share of their rate-limit headers and error
// bodies; each style's own is its dialect (dialects.go), in the file of
// its handlers.

// openAIDuration renders a reset the way OpenAI does ("1s", "6m0s", "12ms"):
// a Go duration string rounded up to whole milliseconds, which
// time.ParseDuration reads back.
func openAIDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d.String()
}

// anthropicReset renders a reset as an RFC 3339 UTC timestamp (rounded up to
// the second) of the moment the limit is fully replenished.
func anthropicReset(now time.Time, d time.Duration) string {
	t := now.Add(d).UTC()
	if t2 := t.Truncate(time.Second); !t2.Equal(t) {
		t = t2.Add(time.Second)
	}
	return t.Format(time.RFC3339)
}

func (s *Server) setRateHeaders(h http.Header, provider string, rv rateView) {
	if s.cfg.Providers[provider].NoRateLimitHeaders {
		return
	}
	dialectOf(provider).rateHeaders(h, rv)
}

// itoa is a count as the headers write it.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

type errCtx struct {
	provider  string
	model     string
	operation string // Azure operation name, e.g. ChatCompletions_Create
	apiVer    string
	id        string
}

// writeRejection sends a 429 or 503 in the provider's format.
func (s *Server) writeRejection(w http.ResponseWriter, ec errCtx, rj *rejection) {
	h := w.Header()
	if rj.status == http.StatusTooManyRequests && !rj.bare {
		s.setRateHeaders(h, ec.provider, rj.rv)
	}
	d := dialectOf(ec.provider)
	if rj.wait > 0 && !s.cfg.Providers[ec.provider].NoRateLimitHeaders {
		d.retryAfter(h, rj.wait)
	}
	overload := rj.storm != nil && (rj.storm.Kind == "503" || rj.storm.Dialect == DialectOverloaded)
	d.rejection(s, w, ec, rj, overload)
}

// echoed is msg with the credential the request presented, when the storm
// echoes it (Storm.EchoKey): a provider (or a proxy in front of one) that
// quotes the key in its error, which the gateway must not pass on.
func (rj *rejection) echoed(msg string) string {
	if rj.echo == "" {
		return msg
	}
	return msg + " (credential presented: " + rj.echo + ")"
}

// presentedKey is the credential of a request in any provider's header
// (or Gemini's ?key=).
func presentedKey(r *http.Request) string {
	if k, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return k
	}
	for _, h := range []string{"api-key", "x-api-key", "x-goog-api-key"} {
		if k := r.Header.Get(h); k != "" {
			return k
		}
	}
	return r.URL.Query().Get("key")
}

func openAIError(msg, typ string, code *string) map[string]any {
	var c any
	if code != nil {
		c = *code
	}
	return map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}}
}

func anthropicError(typ, msg, id string) map[string]any {
	return map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}, "request_id": "req_sim_" + id}
}

func dimDescription(dim string) (desc, unit string) {
	switch dim {
	case DimRequests:
		return "requests per min (RPM)", "requests"
	case DimTokens:
		return "tokens per min (TPM)", "tokens"
	case DimInputTokens:
		return "input tokens per min (ITPM)", "tokens"
	case DimOutputTokens:
		return "output tokens per min (OTPM)", "tokens"
	case DimDaily:
		return "requests per day (RPD)", "requests"
	case DimAcceleration:
		return "request rate acceleration", "requests"
	}
	return dim, "requests"
}

func openAILimitMessage(model string, rj *rejection) (msg, typ string) {
	if rj.deny == nil {
		return fmt.Sprintf("Rate limit reached for %s in organization org-sim. Please try again in %s. (simulated 429 storm)", model, openAIDuration(rj.wait)), "requests"
	}
	d := rj.deny
	if d.dim == DimTooLarge {
		return fmt.Sprintf("Request too large for %s in organization org-sim on tokens per min (TPM): Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully.", model, d.limit, d.demand), "tokens"
	}
	desc, unit := dimDescription(d.dim)
	return fmt.Sprintf("Rate limit reached for %s in organization org-sim on %s: Limit %d, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
		model, desc, d.limit, d.used, d.demand, openAIDuration(d.wait)), unit
}

func anthropicLimitMessage(rj *rejection) string {
	if rj.deny == nil {
		return "Number of concurrent connections has exceeded your rate limit. Please try again later. (simulated 429 storm)"
	}
	d := rj.deny
	switch d.dim {
	case DimTooLarge:
		return fmt.Sprintf("This request would exceed your organization's rate limit of %d tokens per minute on its own (requested %d). Reduce the prompt length or the maximum tokens requested.", d.limit, d.demand)
	case DimAcceleration:
		return "Your request rate increased too quickly (acceleration limit). Please ramp up your traffic gradually."
	case DimDaily:
		return fmt.Sprintf("This request would exceed your organization's rate limit of %d requests per day.", d.limit)
	}
	desc, _ := dimDescription(d.dim)
	return fmt.Sprintf("This request would exceed the rate limit for your organization of %d %s. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage.", d.limit, desc)
}

// geminiQuotaError builds Gemini's RESOURCE_EXHAUSTED body with a
// google.rpc.QuotaFailure and a google.rpc.RetryInfo (retryDelay "Ns"). A
// storm 429 carries neither, like Vertex AI's bare "Resource exhausted".
func (s *Server) geminiQuotaError(model string, rj *rejection) map[string]any {
	if rj.deny == nil {
		return map[string]any{"error": map[string]any{
			"code": 429, "message": rj.echoed("Resource exhausted. Please try again later."), "status": "RESOURCE_EXHAUSTED",
		}}
	}
	tier := s.cfg.Providers[Gemini].GeminiTier
	sfx, metricTier := "", ""
	if tier != "" {
		sfx = "-" + tier
		metricTier = map[string]string{"FreeTier": "free_tier_", "PaidTier": "paid_tier_"}[tier]
	}
	d := rj.deny
	var quotaID, metric string
	switch d.dim {
	case DimDaily:
		quotaID, metric = "GenerateRequestsPerDayPerProjectPerModel"+sfx, "generate_content_"+metricTier+"requests"
	case DimRequests, DimAcceleration:
		quotaID, metric = "GenerateRequestsPerMinutePerProjectPerModel"+sfx, "generate_content_"+metricTier+"requests"
	case DimOutputTokens:
		quotaID, metric = "GenerateContentOutputTokensPerModelPerMinute"+sfx, "generate_content_"+metricTier+"output_token_count"
	default:
		quotaID, metric = "GenerateContentInputTokensPerModelPerMinute"+sfx, "generate_content_"+metricTier+"input_token_count"
	}
	delay := int64(retryAfterSecondsInt(rj.wait))
	msg := fmt.Sprintf("You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: generativelanguage.googleapis.com/%s, limit: %d, model: %s\nPlease retry in %ds.", metric, d.limit, model, delay)
	return map[string]any{"error": map[string]any{
		"code":    429,
		"message": msg,
		"status":  "RESOURCE_EXHAUSTED",
		"details": []any{
			map[string]any{
				"@type": "type.googleapis.com/google.rpc.QuotaFailure",
				"violations": []any{map[string]any{
					"quotaMetric":     "generativelanguage.googleapis.com/" + metric,
					"quotaId":         quotaID,
					"quotaDimensions": map[string]any{"location": "global", "model": model},
					"quotaValue":      strconv.FormatInt(d.limit, 10),
				}},
			},
			map[string]any{
				"@type": "type.googleapis.com/google.rpc.Help",
				"links": []any{map[string]any{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}},
			},
			map[string]any{
				"@type":      "type.googleapis.com/google.rpc.RetryInfo",
				"retryDelay": fmt.Sprintf("%ds", delay),
			},
		},
	}}
}

func retryAfterSecondsInt(d time.Duration) int {
	n, _ := strconv.Atoi(retryAfterSeconds(d))
	return n
}

// writeBadRequest sends a 400 in the provider's format.
func (s *Server) writeBadRequest(w http.ResponseWriter, provider, msg string) {
	s.badRequest(provider)
	dialectOf(provider).badRequest(w, msg)
}
