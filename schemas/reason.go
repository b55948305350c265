package schemas

// Reason is a Decision.Reason or Released.Reason code: stable and
// machine-readable, part of the wire format like Status. Every code that
// one component writes and another reads (the ledger, the gateways,
// analytics, dashboards) is defined here and nowhere else.
type Reason string

// Reasons of a queued decision: what the request waits for.
const (
	ReasonCapacity        Reason = "capacity"              // a bucket on the path cannot cover it yet
	ReasonCooldownLimited Reason = "cooldown_rate_limited" // the scope cools down after a provider 429
	// ReasonCooldownOverloaded: the scope cools down after a provider 503/529.
	ReasonCooldownOverloaded Reason = "cooldown_overloaded"
	// ReasonWaitingBehind: it would fit, but an earlier or higher-priority
	// request in the same scope waits for the same capacity.
	ReasonWaitingBehind Reason = "waiting_behind_earlier_request"
	ReasonReclaimed     Reason = "borrowing_reclaimed" // borrowed capacity is being returned to guaranteed traffic
	ReasonRetryBackoff  Reason = "retry_backoff"       // a retry waits out its backoff and Retry-After floor
	// ReasonBudgetLease: a cross-scope budget on its path has room, but
	// this scope's lease of it does not; the scope has asked the budget
	// partition for more (ledger/budget). Decision.LimitPath names the
	// budget and the lease ("budget:<id>/lease:<holder>").
	ReasonBudgetLease Reason = "budget_lease"
)

// Reasons of a denied decision.
const (
	// ReasonExceedsCapacity: the request is larger than a bucket can ever
	// hold; no wait makes it fit.
	ReasonExceedsCapacity Reason = "exceeds_capacity"
	// ReasonQuotaExhausted: a fixed or rolling window (daily quota, spend)
	// is spent until after the request's wait.
	ReasonQuotaExhausted Reason = "quota_exhausted"
	// ReasonBudgetExhausted: a cross-scope budget (a tenant's daily spend
	// over every provider, say) has less left than the request costs, by
	// its budget partition's last word. Decision.LimitPath names the
	// budget and the lease that refused it.
	ReasonBudgetExhausted Reason = "budget_exhausted"
	ReasonNoCapacity      Reason = "no_capacity"      // no capacity and no time left to wait
	ReasonQueueFull       Reason = "queue_full"       // the class queue is at its max depth
	ReasonWaitExceedsMax  Reason = "wait_exceeds_max" // it would fit only after the class's max wait
	// ReasonDeadlineExceeded: the request's deadline passes before it
	// could be granted (also an expired queued request, see below).
	ReasonDeadlineExceeded Reason = "deadline_exceeded"
	// ReasonProviderQuotaExhausted: the provider said its quota is spent;
	// what was queued behind it is denied.
	ReasonProviderQuotaExhausted Reason = "provider_quota_exhausted"
	ReasonNotRetryable           Reason = "not_retryable"            // a retry asked for a non-retryable failure
	ReasonRetryAttemptsExhausted Reason = "retry_attempts_exhausted" // the request's max attempts are used
	ReasonRetryBudgetExhausted   Reason = "retry_budget_exhausted"   // the scope's retry ratio is spent
	ReasonBadAttempt             Reason = "bad_attempt"              // a retry's attempt number does not follow its previous one
	ReasonUnknownPrevious        Reason = "unknown_previous_attempt" // a retry of an attempt the ledger never saw
	ReasonLedgerFull             Reason = "ledger_full"              // reservations_max live reservations
	ReasonNodeLimit              Reason = "node_limit"               // nodes_max bucket nodes
	ReasonMalformedEvent         Reason = "malformed_event"          // the payload does not match the type
	ReasonUnknownScope           Reason = "unknown_scope"
	ReasonUnknownClass           Reason = "unknown_class"

	// ReasonPathMissingLevel: the request's path does not name a level
	// that its scope requires (ledger ScopeConfig.RequiredLevels); nothing
	// was reserved. Decision.LimitPath names the missing levels, "/"
	// separated in path order (e.g. "deployment").
	ReasonPathMissingLevel Reason = "path_missing_level"
	// ReasonPathUnknownID: a level that the request's scope requires names
	// an id that the ledger config limits by id only and does not list
	// (e.g. a deployment id with no buckets): the path would charge none
	// of the level's limits. Nothing was reserved; never retryable.
	// Decision.LimitPath names the unknown level:id, "/" separated.
	ReasonPathUnknownID Reason = "path_unknown_id"
	// ReasonDeadlineBelowService: the request's remaining deadline is
	// shorter than its route's expected service time (the ledger's learned
	// p95 time to first byte plus its output at the route's observed
	// rate): granted, it would be sent upstream and abandoned by its client
	// before the answer. Decision.Needed is the expected service time in
	// ms, Decision.Available the deadline's remaining ms; retry class
	// deadline_exceeded (the ledger does not retry it, a client with a
	// longer deadline may). Also the reason of a queued request that
	// expired once its remaining deadline fell below that time.
	ReasonDeadlineBelowService Reason = "deadline_below_service_time"
	// ReasonClassNotEntitled, ReasonPriorityNotEntitled and
	// ReasonModelNotAllowed: the request asked for a traffic class, a
	// priority or a route outside an entitlement of its tenant, team or key
	// (ledger Config.Entitlements, the gateway's allowed_classes,
	// max_priority and allowed_models). The gateway refuses such a request
	// itself; the ledger refuses one that did not come through a gateway
	// (a forged event), so a header cannot promote a request either way.
	// Nothing was reserved; never retryable (retry class request_error).
	// Decision.LimitPath names the entitlement's holder ("tenant:batchco",
	// "key:batch-key", "partner:p1"). The codes are the gateway's 403 codes.
	ReasonClassNotEntitled    Reason = "class_not_entitled"
	ReasonPriorityNotEntitled Reason = "priority_not_entitled"
	ReasonModelNotAllowed     Reason = "model_not_allowed"
)

// Reasons of a ReserveRequested the ledger refused as malformed: one code
// per field, so that a gateway bug is told from another at a glance. (Until
// the vocabulary moved here they all came out as "invalid_request", which
// ReasonInvalidRequest still names for readers of old logs.)
const (
	ReasonInvalidRequest      Reason = "invalid_request" // written by older ledgers only
	ReasonRequestIDTooLong    Reason = "request_id_too_long"
	ReasonPathTooLong         Reason = "path_too_long"
	ReasonInvalidInputTokens  Reason = "invalid_input_tokens"
	ReasonInvalidCachedTokens Reason = "invalid_cached_input_tokens" // negative or above input_tokens
	ReasonInvalidOutputTokens Reason = "invalid_output_tokens"
	ReasonInvalidSpend        Reason = "invalid_spend_micros"
	ReasonInvalidMaxWait      Reason = "invalid_max_wait_ms"
	ReasonInvalidDeadline     Reason = "invalid_deadline_ms"
	ReasonInvalidMaxAttempts  Reason = "invalid_max_attempts"
)

// Reasons of the other decisions.
const (
	// ReasonSameIDDifferentContent is the reason of a conflict decision.
	ReasonSameIDDifferentContent Reason = "same_id_different_content"
	// ReasonMaxWaitExceeded: a queued request expired at its class's max
	// wait (StatusExpired; ReasonDeadlineExceeded when its deadline passed).
	ReasonMaxWaitExceeded Reason = "max_wait_exceeded"
	// ReasonHoldAbandoned: a grant's hold TTL passed with no reconcile or
	// release (StatusHoldExpired); the estimate stays charged.
	ReasonHoldAbandoned Reason = "hold_ttl_abandoned"
	// ReasonNodeLost is the reason of a reservation the ledger ended
	// because its gateway stopped heartbeating (see Heartbeat): a grant is
	// given back as a release would give it back (StatusHoldExpired), a
	// queued reservation is dropped (StatusExpired). It tells analytics a
	// lost gateway from an abandoned grant (hold_ttl_abandoned).
	ReasonNodeLost Reason = "node_lost"
	// ReasonReleasedWhileQueued: the caller withdrew a queued request
	// (StatusCancelled).
	ReasonReleasedWhileQueued Reason = "released_while_queued"
	// ReasonEmergencyCap is the reason of a grant the gateway made itself,
	// under its emergency cap, because the ledger did not answer.
	ReasonEmergencyCap Reason = "emergency_cap"
	// ReasonDegradedMode is the reason of a grant the gateway made itself
	// in degraded mode, within its share of the last known capacity,
	// because no ledger answered (ReserveRequested.Degraded).
	ReasonDegradedMode Reason = "degraded_mode"
)

// Reasons of a Released event: why a gateway gave a reservation back.
const (
	ReasonClientDisconnect Reason = "client_disconnect" // the client went away
	ReasonDeadline         Reason = "deadline"          // the request's deadline passed
	ReasonCancel           Reason = "cancel"            // the gateway stopped waiting (client or deadline) while queued
	ReasonError            Reason = "error"             // the attempt failed before or during the upstream call
	// ReasonLedgerTimeout: the ledger did not answer within the answer
	// bound; the gateway gave up on the reservation.
	ReasonLedgerTimeout Reason = "ledger_timeout"
	// ReasonLateGrant is the Released.Reason of a grant the gateway did not
	// dispatch because it arrived too long after the ledger's log time (a
	// stall: the provider counts in wall time, so the backlog would reach it
	// as a burst). It is also the error code the client gets when no new
	// grant fits its deadline.
	ReasonLateGrant Reason = "late_grant"
)
