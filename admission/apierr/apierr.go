// Package apierr is Sluice's one error contract: every refusal, local or
// provider, is an OpenAI-style error envelope (Anthropic-style on
// /v1/messages) that carries the normalised Sluice object saying which
// limiter refused, where, and — the key field — gateway_decision.
//
// Codes are stable: clients and dashboards match on them.
//
// The package is pure (statuses are numbers, no net/http) because the
// lifecycle, a pure state machine, builds its errors; writing one as an
// HTTP answer is package httperr's.
package apierr

import "github.com/sluice-dev/sluice/schemas"

// Stable error codes.
const (
	CodeInvalidJSON    = "invalid_json"
	CodeInvalidRequest = "invalid_request"
	CodeBodyTooLarge   = "body_too_large"
	// CodeRequestTooLarge: the request needs more than a limit can ever
	// hold (Sluice's bucket or the provider's whole per-minute limit).
	CodeRequestTooLarge = "request_too_large"
	CodeMissingKey      = "missing_api_key"
	CodeInvalidKey      = "invalid_api_key"
	CodeKeyDisabled     = "api_key_disabled"
	CodePaused          = "paused"
	CodeModelNotFound   = "model_not_found"
	CodeRateLimited     = "rate_limit_exceeded"
	CodeQueueTimeout    = "queue_timeout"
	// CodeInsufficientQuota: a daily quota or spend limit (Sluice's or the
	// provider's) is spent. OpenAI's own code and status for a spent quota
	// (429 insufficient_quota), so code that catches RateLimitError for
	// quota keeps working; it carries x-should-retry: false, so the SDKs,
	// which retry other 429s, make one attempt (docs/gateway.md).
	CodeInsufficientQuota = "insufficient_quota"
	CodeLedgerUnavailable = "ledger_unavailable"
	CodeUpstreamError     = "upstream_error"
	CodeUpstreamRejected  = "upstream_rate_limited"
	CodeMethodNotAllowed  = "method_not_allowed"
	CodeNotFound          = "not_found"
	CodeCancelled         = "cancelled"
	// The request parsers' codes (admission/estimate), used as they are.
	CodeMissingField = "missing_field"
	CodeInvalidType  = "invalid_type"
	CodeInvalidValue = "invalid_value"

	CodeInvalidHeader        = "invalid_header"
	CodeUnsupportedAPI       = "unsupported_api"
	CodeIdempotencyInFlight  = "idempotency_in_flight"
	CodeIdempotencyReused    = "idempotency_key_reused"
	CodeDeadlineExceeded     = "deadline_exceeded"
	CodeUpstreamRequestError = "upstream_request_error"
	CodeUpstreamOverloaded   = "upstream_overloaded"
	// CodeUpstreamAuth: the provider refused the gateway's own credential
	// (HTTP 401/403). The caller cannot fix it and no retry helps until an
	// operator does: 502 with x-should-retry: false.
	CodeUpstreamAuth = "upstream_auth_error"
	CodeInternal     = "internal_error"
	// CodeLateGrant: the ledger's grant reached the gateway too late to be
	// dispatched (a stall) and no new grant fit the request's deadline.
	CodeLateGrant = string(schemas.ReasonLateGrant)
	// CodePathMissingLevel: the key's bucket path lacks a level its scope
	// requires (a configuration problem no retry can fix).
	CodePathMissingLevel = string(schemas.ReasonPathMissingLevel)
	// CodePathUnknownID: the key's bucket path names, at a level its
	// scope requires, an id the ledger config does not know (e.g. a
	// provider deployment with no limits): a configuration problem no retry
	// can fix.
	CodePathUnknownID = string(schemas.ReasonPathUnknownID)
	// CodeDeadlineBelowService: the request's deadline leaves less time
	// than its route takes to answer (the ledger's learned service time);
	// it was not sent upstream. A 429: a retry with a longer deadline, or
	// once the route is faster, may succeed.
	CodeDeadlineBelowService = string(schemas.ReasonDeadlineBelowService)
	// CodeClassNotEntitled, CodePriorityNotEntitled, CodeModelNotAllowed:
	// the request asked for a traffic class, a priority or a model outside
	// what its key, team or tenant is entitled to (403; the message names
	// the entitlement and who holds it).
	// The ledger's refusals of the same rule carry the same codes as
	// reasons (schemas.ReasonClassNotEntitled, …).
	CodeClassNotEntitled    = string(schemas.ReasonClassNotEntitled)
	CodePriorityNotEntitled = string(schemas.ReasonPriorityNotEntitled)
	CodeModelNotAllowed     = string(schemas.ReasonModelNotAllowed)
)

// RetryAfterPatienceMs is the longest Retry-After an SDK is left to sleep
// through. The Anthropic SDK (2.14) sleeps for any Retry-After, so a 429
// saying "come back in an hour" held a messages.create call for two hours
// (two retries); the OpenAI SDK (3.57) ignores one over 120 s and retries
// at once, refused again. A longer wait is the caller's code to decide: the
// answer keeps its Retry-After and says x-should-retry: false.
const RetryAfterPatienceMs = 60_000

// finalCodes are refusals no retry can fix whatever their status (the
// table's Final rows): a status the SDKs retry (409, 429, 5xx) would
// otherwise make them try again, each attempt refused the same way.
var finalCodes = func() map[string]bool {
	m := map[string]bool{}
	for _, s := range Table {
		if s.Final {
			m[s.Code] = true
		}
	}
	return m
}()

// Final reports whether no retry of the same request can succeed: NoRetry,
// a code in finalCodes, or a 4xx other than 408 (timeout), 409 (conflict:
// an Idempotency-Key still in flight) and 429 (capacity). Write sends such
// an answer with x-should-retry: false, which the official OpenAI and
// Anthropic SDKs obey before their status rules.
func (e *Error) Final() bool {
	if e.NoRetry || finalCodes[e.Code] {
		return true
	}
	s := e.Status
	return s >= 400 && s < 500 && s != 408 && s != 409 && s != 429
}

// HeaderRequestID is the response header naming the request: the gateway
// sets it on every answer, before routing.
const HeaderRequestID = "X-Sluice-Request-Id"

// Sluice is the normalised object attached to every error.
type Sluice struct {
	Type            string                  `json:"type"` // local_limit, provider_limit, request, auth, unavailable
	Limiter         string                  `json:"limiter,omitempty"`
	LimitPath       string                  `json:"limit_path,omitempty"`
	Scope           string                  `json:"scope,omitempty"`
	Provider        string                  `json:"provider,omitempty"`
	ModelProfile    string                  `json:"model_profile,omitempty"`
	RetryAfterMs    int64                   `json:"retry_after_ms,omitempty"`
	Tenant          string                  `json:"tenant,omitempty"`
	KeyID           string                  `json:"key_id,omitempty"`
	Class           string                  `json:"class,omitempty"`
	EstimatedInput  int64                   `json:"estimated_input_tokens,omitempty"`
	EstimatedOutput int64                   `json:"estimated_output_tokens,omitempty"`
	GatewayDecision schemas.GatewayDecision `json:"gateway_decision,omitempty"`
	FallbackAllowed bool                    `json:"fallback_allowed"`
	RequestID       string                  `json:"request_id,omitempty"`
}

// Error is one refusal.
type Error struct {
	Status int `json:"-"`
	// NoRetry marks an error no retry can fix beyond those Final already
	// knows by status and code (it then says x-should-retry: false).
	NoRetry bool   `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"` // OpenAI error type
	Param   string `json:"param,omitempty"`
	Code    string `json:"code"`
	Sluice  Sluice `json:"sluice"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// New builds an error with the OpenAI type implied by the HTTP status.
func New(status int, code, msg string) *Error {
	t := "invalid_request_error"
	switch {
	case status == 401:
		t = "authentication_error"
	case status == 403:
		t = "permission_error"
	case status == 404:
		t = "not_found_error"
	case status == 429:
		t = "rate_limit_error"
	case status >= 500:
		t = "api_error"
	}
	if code == CodeInsufficientQuota {
		t = CodeInsufficientQuota // OpenAI's type for it too
	}
	st := "request"
	switch status {
	case 401, 403:
		st = "auth"
	case 503:
		st = "unavailable"
	}
	return &Error{Status: status, Message: msg, Type: t, Code: code, Sluice: Sluice{Type: st}}
}
