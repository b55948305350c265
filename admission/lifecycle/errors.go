package lifecycle

import (
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/schemas"
)

// The error contract of every way a request's life can fail. HTTP statuses
// are written as numbers: the package does no HTTP.

// SDKRetries reports whether the official openai and anthropic SDKs retry
// an answer of HTTP status: 408, 409, 429 and every 5xx, at their default
// settings twice, honouring Retry-After. A refusal no retry can fix must
// use another status and carry no Retry-After, or a client hangs through
// retries that cannot succeed; a refusal a retry may fix keeps an honest
// Retry-After.
func SDKRetries(status int) bool {
	return status == 408 || status == 409 || status == 429 || status >= 500
}

// SDKRetriesError reports whether the official SDKs retry e: never when it
// says x-should-retry: false (NoRetry), else by its status.
func SDKRetriesError(e *apierr.Error) bool { return !e.Final() && SDKRetries(e.Status) }

// decisionError turns a refusal by the ledger into the error contract.
func decisionError(d schemas.Decision, ev *schemas.Event) *apierr.Error {
	var e *apierr.Error
	switch {
	case d.Status == schemas.StatusExpired && d.Reason == schemas.ReasonDeadlineBelowService:
		// Queued until what was left of its deadline fell below the
		// route's service time: the same refusal as at arrival, so that a
		// client (and the loadtest) can tell it from a queue timeout.
		e = apierr.New(429, apierr.CodeDeadlineBelowService, fmt.Sprintf(
			"the request waited in the %s queue until its deadline left %d ms, and route %s takes about %d ms to answer (p95 time to first byte plus its output at the route's observed rate), so it was not sent; retry with a longer deadline (X-Sluice-Deadline-Ms or the SDK's timeout)",
			ev.Class, d.Available, ev.Route, d.Needed))
	case d.Status == schemas.StatusExpired:
		e = apierr.New(429, apierr.CodeQueueTimeout, "request waited in the "+ev.Class+" queue past its deadline")
	case d.Status == schemas.StatusConflict:
		e = apierr.New(409, apierr.CodeInvalidRequest, "the ledger saw this request id and attempt with different content")
	case d.Reason == schemas.ReasonPathMissingLevel:
		// The gateway built the path from the key's identity, so the
		// configuration is at fault and no retry can succeed: a 403, which
		// SDKs do not retry, rather than a 429.
		e = apierr.New(403, apierr.CodePathMissingLevel,
			"this key's identity does not name the "+d.LimitPath+" level that scope "+ev.Scope+" requires (ledger required_levels); ask an operator to fix the key's configuration")
	case d.Reason == schemas.ReasonPathUnknownID:
		// As above: the gateway's route or key names an id (a deployment
		// whose provider name drifted from the ledger config) that no
		// limit of the ledger covers; sending it would be ungoverned.
		e = apierr.New(403, apierr.CodePathUnknownID,
			"this request's route names "+d.LimitPath+", which scope "+ev.Scope+" has no limits for (ledger config); ask an operator to fix the route or the ledger config")
	case d.Reason == schemas.ReasonClassNotEntitled, d.Reason == schemas.ReasonPriorityNotEntitled, d.Reason == schemas.ReasonModelNotAllowed:
		// The gateway refuses these itself (services/gateway/entitle.go);
		// the ledger's refusal means the entitlement changed between the
		// gateway's check and the ledger's, or the event did not come
		// through this gateway's check. The same 403 and code either way.
		e = apierr.New(403, string(d.Reason), entitlementMessage(d, ev)+"; ask your Sluice administrator to change the entitlement")
	case d.Reason == schemas.ReasonDeadlineBelowService:
		// Never sent upstream: its client would hang up before the answer.
		e = apierr.New(429, apierr.CodeDeadlineBelowService, fmt.Sprintf(
			"the request's deadline leaves %d ms, and route %s takes about %d ms to answer (p95 time to first byte plus its output at the route's observed rate), so it was not sent; retry with a longer deadline (X-Sluice-Deadline-Ms or the SDK's timeout)",
			d.Available, ev.Route, d.Needed))
	case d.RetryClass == schemas.RetryRequestError:
		// Larger than a bucket can ever hold (exceeds_capacity).
		msg := "request refused by the quota ledger: " + string(d.Reason)
		if d.LimitDimension != "" {
			msg = fmt.Sprintf("request too large for %s %s: it needs %d and the limit is %d, so it can never be admitted; reduce the prompt or max tokens", d.LimitPath, d.LimitDimension, d.Needed, d.Available)
		}
		e = apierr.New(413, apierr.CodeRequestTooLarge, msg)
	case d.RetryClass == schemas.RetryPolicy:
		// A daily quota or spend limit (Sluice's, or the provider's that
		// the ledger recorded): no retry within an SDK's patience fits.
		// OpenAI's 429 insufficient_quota, final (x-should-retry: false).
		msg := "quota exhausted: " + string(d.Reason)
		if d.LimitDimension != "" {
			msg = fmt.Sprintf("quota exhausted on %s %s: needed %d, available %d", d.LimitPath, d.LimitDimension, d.Needed, d.Available)
		}
		e = apierr.New(429, apierr.CodeInsufficientQuota, msg+resetsIn(d.RetryAfterMs))
	default:
		e = rateLimited(d)
	}
	e.Sluice.Type = "local_limit"
	e.Sluice.Limiter = string(d.LimitDimension)
	e.Sluice.LimitPath = d.LimitPath
	if SDKRetriesError(e) {
		e.Sluice.RetryAfterMs = d.RetryAfterMs
	}
	e.Sluice.GatewayDecision = d.GatewayDecision
	e.Sluice.FallbackAllowed = d.FallbackAllowed
	return e
}

// rateLimited is the 429 of a refusal on capacity: a retry may fit.
func rateLimited(d schemas.Decision) *apierr.Error {
	msg := "rate limit exceeded"
	if d.LimitDimension != "" {
		msg = fmt.Sprintf("rate limit exceeded on %s %s: needed %d, available %d", d.LimitPath, d.LimitDimension, d.Needed, d.Available)
	} else if d.Reason != "" {
		msg = "request refused by the quota ledger: " + string(d.Reason)
	}
	return apierr.New(429, apierr.CodeRateLimited, msg)
}

// resetsIn says when a quota resets, in the message: a final refusal
// carries no Retry-After (an SDK would wait for it, or retry at once).
func resetsIn(ms int64) string {
	if ms <= 0 {
		return ""
	}
	s := (ms + 999) / 1000
	if s < 120 {
		return fmt.Sprintf("; it resets in %d s", s)
	}
	return fmt.Sprintf("; it resets in %d min", (s+59)/60)
}

// providerError is the error contract for a provider refusal that will not
// be retried (not retryable, or the ledger refused the retry d). A refusal
// that can never succeed as sent (a request above the provider's limit, a
// spent quota) gets a status SDKs do not retry and no Retry-After.
func providerError(rej schemas.ProviderRejected, ev *schemas.Event, d schemas.Decision) *apierr.Error {
	status, code := 429, apierr.CodeUpstreamRejected
	kind := rej.Kind
	if d.Reason == schemas.ReasonProviderQuotaExhausted || d.Reason == schemas.ReasonQuotaExhausted {
		// The retry met a quota the provider (or Sluice) has spent since.
		kind = schemas.KindQuotaExhausted
	}
	switch kind {
	case schemas.KindOverloaded:
		status, code = 503, apierr.CodeUpstreamOverloaded
	case schemas.KindQuotaExhausted:
		status, code = 429, apierr.CodeInsufficientQuota
	case schemas.KindRequestError:
		// A 429 for a request larger than the provider's whole limit
		// (OpenAI "Request too large"): ParseRejection gives this kind to
		// no other 429 or 5xx.
		status, code = 413, apierr.CodeRequestTooLarge
	}
	msg := fmt.Sprintf("provider %s refused the request (HTTP %d)", ev.Scope, rej.HTTPStatus)
	if rej.Message != "" {
		msg += ": " + rej.Message // already scrubbed of credentials
	}
	if d.Reason != "" {
		msg += "; retry not granted: " + string(d.Reason)
	}
	e := apierr.New(status, code, msg)
	e.Sluice.Type = "provider_limit"
	e.Sluice.Limiter = string(rej.Limiter)
	e.Sluice.Provider = rej.Deployment
	if SDKRetriesError(e) {
		e.Sluice.RetryAfterMs = max(rej.RetryAfterMs, d.RetryAfterMs)
	}
	e.Sluice.GatewayDecision = schemas.GDAdmittedThenProviderReject
	return e
}

// upstreamStatusError is the error contract of a provider status ≥ 400
// that is not a capacity refusal.
func upstreamStatusError(upstreamStatus int, provider, message string) *apierr.Error {
	if upstreamStatus == 401 || upstreamStatus == 403 {
		// The gateway's own credential: the caller cannot fix it, and
		// retrying sends the provider the same refused key again. 502
		// (the fault is upstream of the caller) without a retry invitation.
		e := apierr.New(502, apierr.CodeUpstreamAuth, fmt.Sprintf(
			"provider %s refused Sluice's credential for it (HTTP %d); an operator must fix the provider key, and retrying will not help", provider, upstreamStatus))
		e.NoRetry = true
		e.Sluice.Provider = provider
		return e
	}
	// The caller's request was at fault: keep the provider's status.
	msg := fmt.Sprintf("provider %s answered HTTP %d", provider, upstreamStatus)
	if message != "" {
		msg += ": " + message
	}
	e := apierr.New(upstreamStatus, apierr.CodeUpstreamRequestError, msg)
	e.Sluice.Provider = provider
	return e
}

// transportError answers an attempt that got no answer (grant released).
func transportError(reason schemas.Reason, provider string, deadlineMs int64) *apierr.Error {
	switch reason {
	case schemas.ReasonClientDisconnect:
		return apierr.New(499, apierr.CodeCancelled, "client closed the request")
	case schemas.ReasonDeadline:
		return apierr.New(504, apierr.CodeDeadlineExceeded, fmt.Sprintf("the request's %d ms deadline passed while the provider was answering", deadlineMs))
	}
	// Never echo the transport error: a proxy URL in it may carry a
	// credential. Name the provider instead.
	e := apierr.New(502, apierr.CodeUpstreamError, "provider "+provider+" unreachable or its response was interrupted")
	e.Sluice.Provider = provider
	return e
}

// cancelledWaiting: the client went away while its request waited for
// capacity.
func cancelledWaiting() *apierr.Error {
	e := apierr.New(499, apierr.CodeCancelled, "request cancelled while waiting for capacity")
	e.Sluice.GatewayDecision = schemas.GDQueued
	return e
}

// deadlineWaiting: the deadline passed while the request waited.
func deadlineWaiting(deadlineMs int64) *apierr.Error {
	e := apierr.New(504, apierr.CodeDeadlineExceeded, fmt.Sprintf("no capacity within the request's %d ms deadline", deadlineMs))
	e.Sluice.GatewayDecision = schemas.GDQueuedThenExpired
	return e
}

// ledgerUnavailable: the ledger did not answer in time and no emergency
// admission applied.
func ledgerUnavailable() *apierr.Error {
	e := apierr.New(503, apierr.CodeLedgerUnavailable, "the quota ledger did not answer in time; failing closed (retry shortly)")
	e.Sluice.RetryAfterMs = 1000
	e.Sluice.GatewayDecision = schemas.GDLedgerUnavailable
	return e
}

func fillSluice(e *apierr.Error, ev *schemas.Event) {
	e.Sluice.Scope, e.Sluice.Tenant, e.Sluice.KeyID = ev.Scope, ev.Tenant, ev.KeyID
	e.Sluice.Class, e.Sluice.ModelProfile, e.Sluice.RequestID = ev.Class, ev.Route, ev.RequestID
	if rr := ev.ReserveRequested; rr != nil {
		e.Sluice.EstimatedInput, e.Sluice.EstimatedOutput = rr.InputTokens, rr.OutputTokens
	}
}

// entitlementMessage says which entitlement the ledger found broken, as
// the gateway's refusal says it (Decision.LimitPath names the holder,
// "tenant:batchco").
func entitlementMessage(d schemas.Decision, ev *schemas.Event) string {
	holder := strings.Replace(d.LimitPath, ":", " ", 1)
	switch d.Reason {
	case schemas.ReasonClassNotEntitled:
		return fmt.Sprintf("class %q is not among the classes %s may use (ledger entitlements)", ev.Class, holder)
	case schemas.ReasonPriorityNotEntitled:
		return fmt.Sprintf("the request's priority is above the max_priority of %s (ledger entitlements)", holder)
	}
	return fmt.Sprintf("route %q is not among the models %s may call (ledger entitlements)", ev.Route, holder)
}
