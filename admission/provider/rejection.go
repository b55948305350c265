package provider

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/schemas"
)

// MaxMessageBytes bounds ProviderRejected.Message.
const MaxMessageBytes = 512

// errorBody is the union of the providers' error shapes:
//
//	OpenAI/Azure: {"error":{"message","type","param","code"}}
//	Anthropic:    {"type":"error","error":{"type","message","details":{"error_code"}},"request_id"}
//	Gemini:       {"error":{"code":429,"message","status","details":[{"@type",...}]}}
//	Vertex AI:    the Gemini shape wrapped in a one-element array
type errorBody struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	Error     *struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"` // string (OpenAI) or number (Gemini)
		Status  string          `json:"status"`
		Details json.RawMessage `json:"details"` // array (Gemini) or object (Anthropic)
	} `json:"error"`
}

type googleDetail struct {
	Type       string `json:"@type"`
	RetryDelay string `json:"retryDelay"`
	Violations []struct {
		QuotaMetric string `json:"quotaMetric"`
		QuotaID     string `json:"quotaId"`
	} `json:"violations"`
	Reason   string            `json:"reason"`
	Metadata map[string]string `json:"metadata"`
}

// ParseRejection turns a provider's error response into a ProviderRejected.
// ok is false for non-error statuses (< 400) that carry no Gemini
// RESOURCE_EXHAUSTED body.
//
// Kind: 429 → rate_limited, except quota exhaustion (OpenAI
// insufficient_quota or a per-day limit, Anthropic
// enforced_spend_limit_reached, Gemini per-day QuotaFailure) →
// quota_exhausted, and OpenAI "Request too large" (can never fit the
// limit) → request_error; 503, 529, other 5xx and Anthropic overloaded_error
// → overloaded; other 4xx → request_error. RetryAfterMs comes from the
// headers (ParseRetryAfter), else Gemini RetryInfo.retryDelay, else the
// message ("try again in 6s", "retry after 6 seconds"), else the reset of an
// exhausted dimension in the rate-limit headers.
//
// The message and the provider request id are cut of sec's literal
// credentials first (Secrets.Redact: a key the provider echoes, whatever
// its shape), then of anything that looks like one (ScrubMessage): they
// go to the client, the logs and the ProviderRejected event.
func ParseRejection(kind Kind, status int, h http.Header, body []byte, now time.Time, sec Secrets) (schemas.ProviderRejected, bool) {
	var eb errorBody
	parseErrorBody(body, &eb)
	s := readRejection(&eb)
	if status < 400 && !s.exhausted {
		return schemas.ProviderRejected{}, false
	}
	if status < 400 {
		status = http.StatusTooManyRequests
	}
	r := schemas.ProviderRejected{HTTPStatus: int32(min(max(status, 0), 999))}
	r.Kind = s.kind(status)
	r.Limiter = s.limiter()
	obs := ParseRateLimitHeaders(kind, h, now)
	r.RetryAfterMs = s.retryAfterMs(h, now, r.Kind, obs)
	if r.Limiter == "" && r.Kind == schemas.KindRateLimited {
		for _, o := range obs {
			if o.Remaining == 0 {
				r.Limiter = o.Dimension
				break
			}
		}
	}
	r.ProviderRequestID = requestID(h, eb.RequestID, sec)
	r.Message = rejectionMessage(&eb, s.msg, body, sec)
	return r, true
}

// rejection is what an error body says, read once from whichever
// provider's shape it has (errorBody, their union). The steps after it need
// no provider kind: the values they look for (insufficient_quota,
// overloaded_error, RESOURCE_EXHAUSTED…) each belong to one provider.
type rejection struct {
	msg, lmsg, etype, code string
	// exhausted is Gemini's RESOURCE_EXHAUSTED status, a rejection even
	// under a status below 400.
	exhausted bool
	// From Gemini's details: the QuotaFailure or ErrorInfo limiter, whether
	// it is a per-day quota, and RetryInfo's delay (-1: none).
	googleLimiter schemas.Dimension
	perDay        bool
	retryInfoMs   int64
	// spendLimit is Anthropic's enforced_spend_limit_reached.
	spendLimit bool
}

// readRejection reads the error body's fields and its details, which are
// an array for Gemini and an object for Anthropic.
func readRejection(eb *errorBody) rejection {
	s := rejection{retryInfoMs: -1}
	var gstatus string
	var details json.RawMessage
	if eb.Error != nil {
		s.msg, s.etype, gstatus, details = eb.Error.Message, eb.Error.Type, eb.Error.Status, eb.Error.Details
		s.code = rawString(eb.Error.Code)
	}
	s.exhausted = gstatus == "RESOURCE_EXHAUSTED"
	s.lmsg = strings.ToLower(s.msg)
	if len(details) > 0 && bytes.TrimSpace(details)[0] == '[' {
		var gd []googleDetail
		_ = json.Unmarshal(details, &gd)
		s.readGoogleDetails(gd)
	}
	if len(details) > 0 && bytes.TrimSpace(details)[0] == '{' {
		var ad struct {
			ErrorCode string `json:"error_code"`
		}
		_ = json.Unmarshal(details, &ad)
		s.spendLimit = ad.ErrorCode == "enforced_spend_limit_reached"
	}
	return s
}

// readGoogleDetails reads Gemini's QuotaFailure, RetryInfo and ErrorInfo
// details. A per-day violation names the limiter over a per-minute one,
// since it is the one that will not lift soon.
func (s *rejection) readGoogleDetails(gd []googleDetail) {
	for _, d := range gd {
		switch {
		case strings.HasSuffix(d.Type, "google.rpc.QuotaFailure"):
			for _, v := range d.Violations {
				dim, day := googleQuotaDim(v.QuotaID + " " + v.QuotaMetric)
				s.perDay = s.perDay || day
				if s.googleLimiter == "" || day {
					s.googleLimiter = dim
				}
			}
		case strings.HasSuffix(d.Type, "google.rpc.RetryInfo"):
			if ms, ok := ParseDurationMs(d.RetryDelay); ok {
				s.retryInfoMs = ms
			}
		case strings.HasSuffix(d.Type, "google.rpc.ErrorInfo"):
			if q := d.Metadata["quota_limit"] + " " + d.Metadata["quota_metric"]; strings.TrimSpace(q) != "" {
				dim, day := googleQuotaDim(q)
				s.perDay = s.perDay || day
				if s.googleLimiter == "" {
					s.googleLimiter = dim
				}
			}
		}
	}
}

// kind classifies the rejection as ParseRejection's doc says. A 429 that
// is really a quota (it will not lift within minutes) or a request that can
// never fit must not be retried like a rate limit, and Anthropic's
// overloaded_error is an overload whatever its status.
func (s *rejection) kind(status int) schemas.RejectionKind {
	switch {
	case status == http.StatusTooManyRequests || s.exhausted:
		k := schemas.KindRateLimited
		switch {
		case s.code == "insufficient_quota" || s.etype == "insufficient_quota" || s.spendLimit || s.perDay ||
			strings.Contains(s.lmsg, "per day") || strings.Contains(s.lmsg, "(rpd)") || strings.Contains(s.lmsg, "(tpd)"):
			k = schemas.KindQuotaExhausted
		case strings.HasPrefix(s.lmsg, "request too large"):
			k = schemas.KindRequestError
		}
		if s.etype == "overloaded_error" {
			k = schemas.KindOverloaded
		}
		return k
	case status == 529 || status >= 500 || s.etype == "overloaded_error":
		return schemas.KindOverloaded
	default:
		return schemas.KindRequestError
	}
}

// limiter is the dimension the body names: Gemini's details first, else
// the error type or message; a requests limit the message calls per day is
// the per-day dimension. Empty when the body does not say (the headers may).
func (s *rejection) limiter() schemas.Dimension {
	l := s.googleLimiter
	if l == "" {
		l = limiterFromMessage(s.etype, s.lmsg)
	}
	if l == schemas.DimRequests && (strings.Contains(s.lmsg, "per day") || strings.Contains(s.lmsg, "(rpd)")) {
		l = schemas.DimRequestsPerDay
	}
	return l
}

// retryAfterMs is the wait the provider asks for, from the most explicit
// source that has one: the headers, Gemini's RetryInfo, the message; for a
// rate limit with none of those, Anthropic-style, the latest reset of an
// exhausted dimension in the rate-limit headers. 0: none.
func (s *rejection) retryAfterMs(h http.Header, now time.Time, k schemas.RejectionKind, obs []schemas.Observation) int64 {
	if ms, ok := ParseRetryAfter(h, now); ok {
		return ms
	}
	if s.retryInfoMs >= 0 {
		return s.retryInfoMs
	}
	if ms, ok := retryFromMessage(s.msg); ok {
		return ms
	}
	var ms int64
	if k == schemas.KindRateLimited {
		for _, o := range obs {
			if o.Remaining == 0 && o.ResetMs > ms {
				ms = o.ResetMs
			}
		}
	}
	return ms
}

// rejectionMessage is the message as it may leave Sluice. A body that is no
// error document gives ScrubMessage's window of it, cut on no partial
// secret; an error message is redacted of sec's credentials. Both are then
// scrubbed of anything that looks like a credential.
func rejectionMessage(eb *errorBody, msg string, body []byte, sec Secrets) string {
	if msg == "" && eb.Error == nil && len(body) > 0 {
		msg = sec.Window(string(body[:min(len(body), 2*MaxMessageBytes+sec.maxLen())]), 2*MaxMessageBytes)
	} else {
		msg = sec.Redact(msg)
	}
	return ScrubMessage(msg)
}

func parseErrorBody(body []byte, eb *errorBody) {
	t := bytes.TrimSpace(body)
	if len(t) == 0 {
		return
	}
	if t[0] == '[' { // Vertex AI wraps the error in an array
		var arr []json.RawMessage
		if json.Unmarshal(t, &arr) != nil || len(arr) == 0 {
			return
		}
		t = arr[0]
	}
	if json.Unmarshal(t, eb) != nil {
		*eb = errorBody{}
	}
}

func rawString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.TrimSpace(string(raw))
}

// googleQuotaDim maps a quota id / metric (e.g.
// "GenerateContentInputTokensPerModelPerMinute-FreeTier",
// "generativelanguage.googleapis.com/generate_content_free_tier_requests")
// to a dimension, and reports whether it is a per-day quota.
func googleQuotaDim(q string) (schemas.Dimension, bool) {
	l := strings.ToLower(q)
	day := strings.Contains(l, "perday") || strings.Contains(l, "per_day") || strings.Contains(l, "per day")
	switch {
	case strings.Contains(l, "inputtoken") || strings.Contains(l, "input_token"):
		return schemas.DimInputTokens, day
	case strings.Contains(l, "outputtoken") || strings.Contains(l, "output_token"):
		return schemas.DimOutputTokens, day
	case strings.Contains(l, "token"):
		return schemas.DimTotalTokens, day
	case strings.Contains(l, "request"):
		if day {
			return schemas.DimRequestsPerDay, true
		}
		return schemas.DimRequests, false
	}
	return "", day
}

func limiterFromMessage(etype, lmsg string) schemas.Dimension {
	switch etype { // OpenAI 429: error.type is "tokens" or "requests"
	case "tokens":
		return schemas.DimTotalTokens
	case "requests":
		return schemas.DimRequests
	}
	switch {
	case strings.Contains(lmsg, "input tokens per minute"):
		return schemas.DimInputTokens
	case strings.Contains(lmsg, "output tokens per minute"):
		return schemas.DimOutputTokens
	case strings.Contains(lmsg, "tokens per min"), strings.Contains(lmsg, "token rate limit"):
		return schemas.DimTotalTokens
	case strings.Contains(lmsg, "requests per min"), strings.Contains(lmsg, "call rate limit"), strings.Contains(lmsg, "requests per day"):
		return schemas.DimRequests
	}
	return ""
}

var (
	reTryAgainIn  = regexp.MustCompile(`(?i)(?:try again|retry) in ([0-9][0-9.hmsuµ]*s)\b`)
	reRetryAfterN = regexp.MustCompile(`(?i)retry after ([0-9]+(?:\.[0-9]+)?) seconds?`)
)

func retryFromMessage(msg string) (int64, bool) {
	if len(msg) > 8192 {
		msg = msg[:8192]
	}
	if m := reTryAgainIn.FindStringSubmatch(msg); m != nil {
		return ParseDurationMs(m[1])
	}
	if m := reRetryAfterN.FindStringSubmatch(msg); m != nil {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil {
			return ceilMs(f * 1000), true
		}
	}
	return 0, false
}

func requestID(h http.Header, fromBody string, sec Secrets) string {
	id := fromBody
	for _, name := range []string{"X-Request-Id", "Request-Id", "Apim-Request-Id", "X-Ms-Request-Id"} {
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			id = v
			break
		}
	}
	return truncateUTF8(ScrubMessage(sec.Redact(id)), 128)
}

var scrubRules = []struct {
	re   *regexp.Regexp
	repl string
}{
	// key=value style secrets (query strings, JSON-ish, headers in text).
	{regexp.MustCompile(`(?i)\b((?:x-)?api[-_]?key|key|access[-_]?token|token|secret|password|authorization|x-goog-api-key|api-key)(["']?\s*[:=]\s*["']?)(?:bearer\s+)?[^\s"'&,;)]+`), "${1}${2}[REDACTED]"},
	{regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]+`), "Bearer [REDACTED]"},
	{regexp.MustCompile(`\bsk-[A-Za-z0-9_\-*.]+`), "sk-[REDACTED]"},
	{regexp.MustCompile(`\bAIza[0-9A-Za-z_\-]{20,}`), "[REDACTED]"},
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+`), "[REDACTED]"},
	{regexp.MustCompile(`\b[0-9a-fA-F]{32,}\b`), "[REDACTED]"},
}

// reLongToken finds long opaque tokens; those mixing letters and digits are
// redacted as likely credentials (Azure keys, opaque tokens).
var reLongToken = regexp.MustCompile(`[A-Za-z0-9_\-+/]{40,}`)

// ScrubMessage removes anything that looks like a credential (sk-… keys,
// Bearer tokens, key=… parameters, Google API keys, JWTs, long hex or
// mixed alphanumeric tokens), collapses control characters and truncates the
// result to MaxMessageBytes at a UTF-8 boundary.
func ScrubMessage(s string) string {
	if s == "" {
		return ""
	}
	// Bound the regex work, but scrub a window larger than the result so a
	// secret straddling the truncation point is still recognised.
	if len(s) > 2*MaxMessageBytes {
		s = s[:2*MaxMessageBytes]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	for _, r := range scrubRules {
		s = r.re.ReplaceAllString(s, r.repl)
	}
	s = reLongToken.ReplaceAllStringFunc(s, func(tok string) string {
		if strings.ContainsAny(tok, "0123456789") && strings.IndexFunc(tok, isLetter) >= 0 {
			return "[REDACTED]"
		}
		return tok
	})
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return truncateUTF8(strings.TrimSpace(s), MaxMessageBytes)
}

func isLetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
