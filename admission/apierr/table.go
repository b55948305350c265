package apierr

// Spec is one row of the error contract: a stable code, the HTTP status it
// is answered with, the OpenAI error type New gives that status, whether no
// retry can ever help (Final: x-should-retry: false whatever the status),
// and what it means. The code constants stay the names callers use; the
// table is where a code's whole contract is read, and Final is derived
// from it.
type Spec struct {
	Code   string
	Status int // the status it is answered with; a few codes take another (Statuses)
	Type   string
	Final  bool
	// Statuses lists the other statuses some answers of the code take
	// (invalid_request is 409 for a replayed request id with other
	// content; upstream_request_error carries the provider's status: 0).
	Statuses []int
	Meaning  string
}

// Retryable reports whether a retry of the same request can succeed when
// the code is answered with status: not a Final code, and not a 4xx other
// than 408, 409 and 429 (Error.Final's rule).
func (s Spec) Retryable(status int) bool {
	return !(&Error{Status: status, Code: s.Code}).Final()
}

// Table is every code of the error contract, in the order docs/gateway.md
// and docs/admin-api.md give them.
var Table = []Spec{
	// The request itself.
	{Code: CodeInvalidJSON, Status: 400, Type: "invalid_request_error", Meaning: "the body is not JSON"},
	{Code: CodeInvalidRequest, Status: 400, Type: "invalid_request_error", Statuses: []int{409}, Meaning: "the request cannot be served as sent (409: the ledger saw its request id and attempt with other content)"},
	{Code: CodeMissingField, Status: 400, Type: "invalid_request_error", Meaning: "a required field is missing (param names it)"},
	{Code: CodeInvalidType, Status: 400, Type: "invalid_request_error", Meaning: "a field has the wrong JSON type (param names it)"},
	{Code: CodeInvalidValue, Status: 400, Type: "invalid_request_error", Statuses: []int{409}, Meaning: "a field's value is out of its range or set (param names it; 409 from the admin API: a team still holds keys)"},
	{Code: CodeInvalidHeader, Status: 400, Type: "invalid_request_error", Meaning: "a Sluice or provider header cannot be read"},
	{Code: CodeUnsupportedAPI, Status: 400, Type: "invalid_request_error", Meaning: "the route's provider cannot serve this API, or a field does not translate"},
	{Code: CodeBodyTooLarge, Status: 413, Type: "invalid_request_error", Meaning: "the body is over the gateway's size limit"},
	{Code: CodeRequestTooLarge, Status: 413, Type: "invalid_request_error", Final: true, Meaning: "the request needs more than a limit can ever hold (Sluice's bucket or the provider's whole per-minute limit)"},
	{Code: CodeMethodNotAllowed, Status: 405, Type: "invalid_request_error", Meaning: "the path does not take this method"},
	{Code: CodeNotFound, Status: 404, Type: "not_found_error", Meaning: "no such path, request or resource"},
	{Code: CodeModelNotFound, Status: 404, Type: "not_found_error", Meaning: "no route serves the model"},
	{Code: CodeIdempotencyInFlight, Status: 409, Type: "invalid_request_error", Meaning: "a request with the same Idempotency-Key is still in flight"},
	{Code: CodeIdempotencyReused, Status: 409, Type: "invalid_request_error", Final: true, Meaning: "the Idempotency-Key was used for another body"},
	{Code: CodeCancelled, Status: 499, Type: "invalid_request_error", Meaning: "the caller went away before the answer"},
	// Identity and entitlement.
	{Code: CodeMissingKey, Status: 401, Type: "authentication_error", Meaning: "no API key was sent"},
	{Code: CodeInvalidKey, Status: 401, Type: "authentication_error", Meaning: "the API key is not known"},
	{Code: CodeKeyDisabled, Status: 401, Type: "authentication_error", Statuses: []int{409}, Meaning: "the API key is disabled or revoked (409 from the admin API: a revoked key cannot be changed)"},
	{Code: CodePaused, Status: 403, Type: "permission_error", Meaning: "the key, team or tenant is paused by an operator"},
	{Code: CodePathMissingLevel, Status: 403, Type: "permission_error", Final: true, Meaning: "the key's bucket path lacks a level its scope requires (a configuration problem)"},
	{Code: CodePathUnknownID, Status: 403, Type: "permission_error", Final: true, Meaning: "the key's bucket path names an id the ledger config does not know (a configuration problem)"},
	{Code: CodeClassNotEntitled, Status: 403, Type: "permission_error", Final: true, Meaning: "the traffic class asked for is outside the key's, team's or tenant's entitlement"},
	{Code: CodePriorityNotEntitled, Status: 403, Type: "permission_error", Final: true, Meaning: "the priority asked for is outside the entitlement"},
	{Code: CodeModelNotAllowed, Status: 403, Type: "permission_error", Final: true, Meaning: "the model is outside the entitlement"},
	// Capacity.
	{Code: CodeRateLimited, Status: 429, Type: "rate_limit_error", Meaning: "a Sluice bucket is empty now; Retry-After says when it refills"},
	{Code: CodeQueueTimeout, Status: 429, Type: "rate_limit_error", Meaning: "the request waited in its class's queue past its deadline"},
	{Code: CodeDeadlineBelowService, Status: 429, Type: "rate_limit_error", Meaning: "the deadline is shorter than the route's learned service time; not sent upstream"},
	{Code: CodeInsufficientQuota, Status: 429, Type: "insufficient_quota", Final: true, Meaning: "a daily quota or spend limit (Sluice's or the provider's) is spent"},
	{Code: CodeUpstreamRejected, Status: 429, Type: "rate_limit_error", Meaning: "the provider answered 429"},
	// Availability.
	{Code: CodeLedgerUnavailable, Status: 503, Type: "api_error", Meaning: "no ledger answered within ledger_timeout_ms or the request's deadline"},
	{Code: CodeLateGrant, Status: 503, Type: "api_error", Meaning: "the grant came too late to dispatch and no new one fit the deadline"},
	{Code: CodeDeadlineExceeded, Status: 504, Type: "api_error", Meaning: "the request's deadline passed: no capacity in time, or the provider still answering"},
	{Code: CodeUpstreamError, Status: 502, Type: "api_error", Meaning: "the provider could not be reached or answered badly"},
	{Code: CodeUpstreamRequestError, Status: 0, Type: "", Meaning: "the provider refused the request; the answer carries the provider's own status"},
	{Code: CodeUpstreamOverloaded, Status: 503, Type: "api_error", Meaning: "the provider is overloaded (503/529)"},
	{Code: CodeUpstreamAuth, Status: 502, Type: "api_error", Final: true, Meaning: "the provider refused the gateway's own credential; an operator must fix it"},
	{Code: CodeInternal, Status: 500, Type: "api_error", Meaning: "a fault of the gateway's own"},
	// The admin API and the tenant usage endpoint (admin.go).
	{Code: CodeMissingAdminToken, Status: 401, Type: "authentication_error", Meaning: "no operator or partner token was presented"},
	{Code: CodeInvalidAdminToken, Status: 401, Type: "authentication_error", Meaning: "the token is neither the operator's nor a partner's"},
	{Code: CodeOperatorRequired, Status: 403, Type: "permission_error", Meaning: "the call is the operator's only"},
	{Code: CodeVersionConflict, Status: 409, Type: "invalid_request_error", Meaning: "base_version is not the current version: read again and re-apply"},
	{Code: CodeAlreadyExists, Status: 409, Type: "invalid_request_error", Meaning: "a tenant, team, key or partner with that id exists"},
	{Code: CodeAllotmentExceeded, Status: 400, Type: "invalid_request_error", Meaning: "a partner's sub-tenant limits would exceed its allotment"},
	{Code: CodeEntitlementExceeded, Status: 403, Type: "permission_error", Meaning: "a partner tried to grant beyond its own entitlement"},
	{Code: CodeInvalidConfig, Status: 400, Type: "invalid_request_error", Meaning: "the change would produce a config the gateway or the ledger refuses"},
	{Code: CodeNotAdminWriter, Status: 403, Type: "permission_error", Meaning: "this gateway does not hold the config-signing key: send the change to the admin writer"},
}

// Lookup returns the table's row for code.
func Lookup(code string) (Spec, bool) {
	s, ok := byCode[code]
	return s, ok
}

var byCode = func() map[string]Spec {
	m := make(map[string]Spec, len(Table))
	for _, s := range Table {
		m[s.Code] = s
	}
	return m
}()
