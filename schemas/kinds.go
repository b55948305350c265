package schemas

// RetryClass classifies a failure for the central retry policy (DESIGN.md
// §1): whether a retry may help, and why not. It is carried by
// Decision.RetryClass and RetryRequested.Reason.
type RetryClass string

// Retry classes.
const (
	RetryCapacity     RetryClass = "retryable_capacity"    // out of capacity now; later it may fit
	RetryOverload     RetryClass = "retryable_overload"    // the provider or the ledger is overloaded
	RetryPolicy       RetryClass = "non_retryable_policy"  // a daily quota, spend limit or retry budget says no
	RetryRequestError RetryClass = "non_retryable_request" // the request itself is at fault
	RetryDeadline     RetryClass = "deadline_exceeded"     // no time is left
)

// Retryable reports whether a failure of class c may be retried at all (the
// ledger still decides whether and when).
func (c RetryClass) Retryable() bool { return c == RetryCapacity || c == RetryOverload }

// RejectionKind is ProviderRejected.Kind: how a provider refused.
type RejectionKind string

// Rejection kinds.
const (
	KindRateLimited    RejectionKind = "rate_limited"    // a 429 on a rate (retryable)
	KindOverloaded     RejectionKind = "overloaded"      // 503, 529, other 5xx (retryable)
	KindQuotaExhausted RejectionKind = "quota_exhausted" // a per-day quota or spend limit (not retryable)
	KindRequestError   RejectionKind = "request_error"   // the request can never succeed as sent
)

// RetryClass is the retry class of a provider refusal of kind k.
func (k RejectionKind) RetryClass() RetryClass {
	switch k {
	case KindRateLimited:
		return RetryCapacity
	case KindOverloaded:
		return RetryOverload
	case KindQuotaExhausted:
		return RetryPolicy
	}
	return RetryRequestError
}

// ProviderKind names a provider API flavour: how the gateway builds the
// upstream request and reads the response, its usage, its rate-limit
// headers and its rejections. It is the `kind` of a gateway provider and
// Dispatched.Provider.
type ProviderKind string

// Provider kinds.
const (
	ProviderOpenAI           ProviderKind = "openai"
	ProviderAzure            ProviderKind = "azure"
	ProviderAnthropic        ProviderKind = "anthropic"
	ProviderGemini           ProviderKind = "gemini"
	ProviderOpenAICompatible ProviderKind = "openai_compatible" // spoken like OpenAI
)

// ProviderKinds lists every provider kind in a stable order.
var ProviderKinds = []ProviderKind{ProviderOpenAI, ProviderAzure, ProviderAnthropic, ProviderGemini, ProviderOpenAICompatible}

// OutcomeStatus is Outcome.Status: how a logical request ended for its
// client.
type OutcomeStatus string

// Outcome statuses.
const (
	OutcomeSuccess   OutcomeStatus = "success"
	OutcomeCancelled OutcomeStatus = "cancelled" // the client went away
	OutcomeTimeout   OutcomeStatus = "timeout"   // its deadline or queue wait passed
	OutcomeFailure   OutcomeStatus = "failure"   // any other final error
)
