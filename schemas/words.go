package schemas

// Plain words for the typed vocabulary: what a person reads where a code
// would otherwise stand (the live view, explanations). The codes stay the
// wire format; these sentences are for people and may be reworded at any
// time. Every code of reason.go, kinds.go and event.go has its words here,
// once: words_test.go reads those files and fails on a code without them.

var reasonWords = map[Reason]string{
	ReasonCapacity:           "waiting for capacity: a limit on its path cannot cover it yet",
	ReasonCooldownLimited:    "waiting: the provider answered 429 and the scope is cooling down",
	ReasonCooldownOverloaded: "waiting: the provider is overloaded (503/529) and the scope is cooling down",
	ReasonWaitingBehind:      "waiting behind an earlier or higher-priority request for the same capacity",
	ReasonReclaimed:          "waiting: borrowed capacity is being given back to guaranteed traffic",
	ReasonRetryBackoff:       "a retry waiting out its backoff and the provider's Retry-After",
	ReasonBudgetLease:        "waiting: its budget has room, but this provider's share of it is used up until the budget partition sends more",

	ReasonExceedsCapacity:        "larger than the limit can ever hold: no wait makes it fit",
	ReasonQuotaExhausted:         "the daily quota or spend limit is used up until after the request's wait",
	ReasonBudgetExhausted:        "its budget across every provider has less left than the request costs",
	ReasonNoCapacity:             "no capacity now and no time left to wait for it",
	ReasonQueueFull:              "the class's queue is full",
	ReasonWaitExceedsMax:         "it would fit only after the longest wait its class allows",
	ReasonDeadlineExceeded:       "its deadline passes before it could be served",
	ReasonProviderQuotaExhausted: "the provider said its quota is used up",
	ReasonNotRetryable:           "a retry of a failure that retrying cannot fix",
	ReasonRetryAttemptsExhausted: "the request used all of its attempts",
	ReasonRetryBudgetExhausted:   "the scope's retry budget is spent",
	ReasonBadAttempt:             "a retry whose attempt number does not follow the previous one",
	ReasonUnknownPrevious:        "a retry of an attempt the ledger never saw",
	ReasonLedgerFull:             "the ledger holds as many reservations as it may",
	ReasonNodeLimit:              "the ledger holds as many limit buckets as it may",
	ReasonMalformedEvent:         "the gateway sent an event that does not match its type",
	ReasonUnknownScope:           "no quota is configured for this provider scope",
	ReasonUnknownClass:           "the traffic class is not configured",
	ReasonPathMissingLevel:       "the request does not name a level its scope requires",
	ReasonPathUnknownID:          "the request names an id its scope's limits do not know at a required level",
	ReasonDeadlineBelowService:   "its deadline leaves less time than its route takes to answer",
	ReasonClassNotEntitled:       "the traffic class is outside its tenant's, team's or key's entitlement",
	ReasonPriorityNotEntitled:    "the priority is above its tenant's, team's or key's entitlement",
	ReasonModelNotAllowed:        "the model is outside its tenant's, team's or key's allowed models",

	ReasonInvalidRequest:      "the gateway sent an invalid reservation",
	ReasonRequestIDTooLong:    "the request id is too long",
	ReasonPathTooLong:         "the request's limit path is too long",
	ReasonInvalidInputTokens:  "the input token estimate is invalid",
	ReasonInvalidCachedTokens: "the cached input token estimate is invalid",
	ReasonInvalidOutputTokens: "the output token reservation is invalid",
	ReasonInvalidSpend:        "the spend estimate is invalid",
	ReasonInvalidMaxWait:      "the maximum wait is invalid",
	ReasonInvalidDeadline:     "the deadline is invalid",
	ReasonInvalidMaxAttempts:  "the maximum number of attempts is invalid",

	ReasonSameIDDifferentContent: "the same request id arrived twice with different content",
	ReasonMaxWaitExceeded:        "waited the longest its class allows without being served",
	ReasonHoldAbandoned:          "granted, but never settled: its hold timed out and the estimate stays charged",
	ReasonNodeLost:               "its gateway stopped answering, so the ledger ended it",
	ReasonReleasedWhileQueued:    "withdrawn by the caller while it waited",
	ReasonEmergencyCap:           "admitted by the gateway under its emergency cap (the ledger did not answer)",
	ReasonDegradedMode:           "admitted by the gateway in degraded mode, within its share of the last known capacity (no ledger answered); charged when the ledger was back",

	ReasonClientDisconnect: "the client went away",
	ReasonDeadline:         "its deadline passed",
	ReasonCancel:           "the gateway stopped waiting (client gone or deadline passed)",
	ReasonError:            "the attempt failed before or during the provider call",
	ReasonLedgerTimeout:    "the ledger did not answer in time",
	ReasonLateGrant:        "granted too late to send without causing a burst at the provider",
}

var retryClassWords = map[RetryClass]string{
	RetryCapacity:     "retry later: out of capacity for now",
	RetryOverload:     "retry later: the provider or the ledger is overloaded",
	RetryPolicy:       "do not retry: a quota, spend limit or retry budget says no",
	RetryRequestError: "do not retry: the request itself must change",
	RetryDeadline:     "do not retry: no time is left",
}

var gatewayDecisionWords = map[GatewayDecision]string{
	GDAdmitted:                   "admitted at once",
	GDQueued:                     "queued",
	GDQueuedThenAdmitted:         "queued, then admitted",
	GDRejectedLocally:            "refused by Sluice before reaching the provider",
	GDQueuedThenExpired:          "queued, then timed out in the queue",
	GDAdmittedThenProviderReject: "admitted, then refused by the provider",
	GDLedgerUnavailable:          "refused: the ledger did not answer",
	GDEmergencyAdmitted:          "admitted under the gateway's emergency cap",
	GDDegradedAdmitted:           "admitted by the gateway in degraded mode (no ledger answered), charged as debt later",
	GDRejectedPolicy:             "refused by policy (paused, disabled or not allowed)",
	GDLateGrant:                  "granted too late to send within the deadline",
}

var statusWords = map[Status]string{
	StatusGranted:     "granted",
	StatusQueued:      "queued",
	StatusDenied:      "denied",
	StatusExpired:     "expired in the queue",
	StatusCancelled:   "cancelled while queued",
	StatusReleased:    "released",
	StatusReconciled:  "reconciled with actual usage",
	StatusConflict:    "conflicting duplicate",
	StatusHoldExpired: "hold ended without being settled",
}

var dimensionWords = map[Dimension]string{
	DimRequests:       "requests",
	DimInputTokens:    "input tokens",
	DimOutputTokens:   "output tokens",
	DimTotalTokens:    "total tokens",
	DimConcurrency:    "concurrent requests",
	DimRequestsPerDay: "requests per day",
	DimSpend:          "spend",
	DimRamp:           "traffic growth",
}

// words returns m's words for code, or the code itself when it has none (a
// code of a newer writer, or none at all).
func words[K ~string](m map[K]string, code K) string {
	if w, ok := m[code]; ok {
		return w
	}
	return string(code)
}

// Words is r in plain words, for people; the code itself when unknown.
func (r Reason) Words() string { return words(reasonWords, r) }

// Words is c in plain words, for people; the code itself when unknown.
func (c RetryClass) Words() string { return words(retryClassWords, c) }

// Words is g in plain words, for people; the code itself when unknown.
func (g GatewayDecision) Words() string { return words(gatewayDecisionWords, g) }

// Words is s in plain words, for people; the code itself when unknown.
func (s Status) Words() string { return words(statusWords, s) }

// Words is d in plain words, for people; the code itself when unknown.
func (d Dimension) Words() string { return words(dimensionWords, d) }
