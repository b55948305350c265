package lifecycle

import (
	"testing"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/schemas"
)

// TestRefusalsSDKsRetryOnlyWhenARetryCanHelp: every refusal's status,
// code and Retry-After. One that can never succeed as sent (above a limit,
// quota or spend spent) answers with a status the official SDKs do not
// retry (SDKRetries false) and without Retry-After; one a retry may fix
// keeps its status and an honest Retry-After.
func TestRefusalsSDKsRetryOnlyWhenARetryCanHelp(t *testing.T) {
	ev := &schemas.Event{Scope: "openai-main", Class: "interactive"}
	rej := func(kind schemas.RejectionKind, ra int64) schemas.ProviderRejected {
		return schemas.ProviderRejected{HTTPStatus: 429, Kind: kind, RetryAfterMs: ra, Message: "m"}
	}
	tests := []struct {
		name     string
		err      *apierr.Error
		status   int
		code     string
		retryMs  int64
		sdkRetry bool
	}{
		{"local capacity", decisionError(schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonWaitExceedsMax,
			LimitDimension: schemas.DimRequests, RetryClass: schemas.RetryCapacity, RetryAfterMs: 1500}, ev), 429, apierr.CodeRateLimited, 1500, true},
		{"local request above a bucket's capacity", decisionError(schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonExceedsCapacity,
			LimitDimension: schemas.DimInputTokens, LimitPath: "tenant/t", Needed: 900, Available: 500, RetryClass: schemas.RetryRequestError}, ev), 413, apierr.CodeRequestTooLarge, 0, false},
		{"local daily quota", decisionError(schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonQuotaExhausted,
			LimitDimension: schemas.DimRequestsPerDay, RetryClass: schemas.RetryPolicy, RetryAfterMs: 3_600_000}, ev), 429, apierr.CodeInsufficientQuota, 0, false},
		{"provider quota recorded by the ledger", decisionError(schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonProviderQuotaExhausted,
			RetryClass: schemas.RetryPolicy, RetryAfterMs: 60_000}, ev), 429, apierr.CodeInsufficientQuota, 0, false},
		{"queue timeout", decisionError(schemas.Decision{Status: schemas.StatusExpired, RetryAfterMs: 200}, ev), 429, apierr.CodeQueueTimeout, 200, true},
		{"provider rate limit, retry refused", providerError(rej(schemas.KindRateLimited, 2000),
			ev, schemas.Decision{Reason: schemas.ReasonRetryBudgetExhausted, RetryAfterMs: 500}), 429, apierr.CodeUpstreamRejected, 2000, true},
		{"provider overloaded, retry refused", providerError(schemas.ProviderRejected{HTTPStatus: 503, Kind: schemas.KindOverloaded, RetryAfterMs: 1000},
			ev, schemas.Decision{Reason: schemas.ReasonDeadlineExceeded}), 503, apierr.CodeUpstreamOverloaded, 1000, true},
		{"provider request too large", providerError(rej(schemas.KindRequestError, 60_000), ev, schemas.Decision{}), 413, apierr.CodeRequestTooLarge, 0, false},
		{"provider quota exhausted", providerError(rej(schemas.KindQuotaExhausted, 37_000), ev, schemas.Decision{}), 429, apierr.CodeInsufficientQuota, 0, false},
		{"retry met a spent provider quota", providerError(rej(schemas.KindRateLimited, 1000),
			ev, schemas.Decision{Reason: schemas.ReasonProviderQuotaExhausted, RetryAfterMs: 3_600_000}), 429, apierr.CodeInsufficientQuota, 0, false},
		{"provider refused the gateway's credential", upstreamStatusError(401, "openai-main", "Incorrect API key"), 502, apierr.CodeUpstreamAuth, 0, false},
		{"provider forbids the gateway's credential", upstreamStatusError(403, "openai-main", ""), 502, apierr.CodeUpstreamAuth, 0, false},
		{"provider refused the caller's request", upstreamStatusError(400, "openai-main", "bad temperature"), 400, apierr.CodeUpstreamRequestError, 0, false},
		{"provider failed", upstreamStatusError(500, "openai-main", ""), 500, apierr.CodeUpstreamRequestError, 0, true},
	}
	for _, tc := range tests {
		e := tc.err
		if e.Status != tc.status || e.Code != tc.code || e.Sluice.RetryAfterMs != tc.retryMs || SDKRetriesError(e) != tc.sdkRetry {
			t.Errorf("%s: got %d %s retry_after_ms=%d (SDKs retry: %v), want %d %s retry_after_ms=%d (%v)", tc.name,
				e.Status, e.Code, e.Sluice.RetryAfterMs, SDKRetriesError(e), tc.status, tc.code, tc.retryMs, tc.sdkRetry)
		}
	}
}
