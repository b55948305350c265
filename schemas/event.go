// Package schemas defines Sluice's versioned event types and their codec.
//
// Every fact Sluice knows travels as an Event on Kafka: the gateway's
// requests, the ledger's decisions, usage reconciliation, provider feedback,
// configuration and time itself (Tick). The ledger is a pure function of the
// events on its partition, so these types are the contract that replay and
// audit depend on: a field keeps its meaning forever (see README.md for the
// versioning rule and the golden-file test that enforces it).
package schemas

// Version is the schema version written by this code. Readers accept any
// version ≥ 1 and skip fields they do not know.
const Version = 1

// Type names an event type. The string values are part of the wire format.
type Type string

// Event types of schema v1 (DESIGN.md §4).
const (
	TypeReserveRequested Type = "ReserveRequested"
	TypeDecision         Type = "Decision"
	TypeDispatched       Type = "Dispatched"
	TypeReconciled       Type = "Reconciled"
	TypeProviderRejected Type = "ProviderRejected"
	TypeProviderObserved Type = "ProviderObserved"
	TypeRetryRequested   Type = "RetryRequested"
	TypeReleased         Type = "Released"
	TypeOutcome          Type = "Outcome"
	TypeConfigChanged    Type = "ConfigChanged"
	TypeTick             Type = "Tick"
	TypeSnapshot         Type = "Snapshot"
	TypeHeartbeat        Type = "Heartbeat"
	// TypeCapacityLearned is written by the ledger service, next to its
	// decisions, when a bucket's learned capacity changes (CapacityLearned).
	TypeCapacityLearned Type = "CapacityLearned"
	// TypeLeaseRequested, TypeLeaseGranted and TypeLeaseReturned are the
	// lease protocol between the scope partitions and the budget partitions
	// that own cross-scope budgets (ledger/budget, README.md there).
	TypeLeaseRequested Type = "LeaseRequested"
	TypeLeaseGranted   Type = "LeaseGranted"
	TypeLeaseReturned  Type = "LeaseReturned"
)

// Types lists every event type of this schema version, in a stable order.
var Types = []Type{
	TypeReserveRequested, TypeDecision, TypeDispatched, TypeReconciled,
	TypeProviderRejected, TypeProviderObserved, TypeRetryRequested,
	TypeReleased, TypeOutcome, TypeConfigChanged, TypeTick, TypeSnapshot,
	TypeHeartbeat, TypeCapacityLearned,
	TypeLeaseRequested, TypeLeaseGranted, TypeLeaseReturned,
}

// Event is the envelope shared by all event types plus exactly one payload,
// the one named by Type. The envelope carries what every consumer needs to
// route, join and explain an event without decoding its payload.
type Event struct {
	V    int    `json:"v"`
	Type Type   `json:"type"`
	ID   string `json:"id"` // unique event id (UUIDv7); dedup key downstream
	// ProducedAtMs is the producer's wall clock in unix milliseconds. It is
	// informational only: the ledger's clock is the log append time.
	ProducedAtMs int64 `json:"produced_at_ms"`

	RequestID string `json:"request_id,omitempty"` // logical request
	Attempt   int32  `json:"attempt,omitempty"`    // 1 for the first attempt
	Node      string `json:"node,omitempty"`       // producing gateway or ledger node
	Scope     string `json:"scope,omitempty"`      // provider scope (Kafka key of sluice.requests)
	Tenant    string `json:"tenant,omitempty"`
	KeyID     string `json:"key_id,omitempty"` // key id, never the key itself
	Route     string `json:"route,omitempty"`  // model profile / route name
	Class     string `json:"class,omitempty"`  // traffic class

	ReserveRequested *ReserveRequested `json:"reserve_requested,omitempty"`
	Decision         *Decision         `json:"decision,omitempty"`
	Dispatched       *Dispatched       `json:"dispatched,omitempty"`
	Reconciled       *Reconciled       `json:"reconciled,omitempty"`
	ProviderRejected *ProviderRejected `json:"provider_rejected,omitempty"`
	ProviderObserved *ProviderObserved `json:"provider_observed,omitempty"`
	RetryRequested   *RetryRequested   `json:"retry_requested,omitempty"`
	Released         *Released         `json:"released,omitempty"`
	Outcome          *Outcome          `json:"outcome,omitempty"`
	ConfigChanged    *ConfigChanged    `json:"config_changed,omitempty"`
	Tick             *Tick             `json:"tick,omitempty"`
	Snapshot         *Snapshot         `json:"snapshot,omitempty"`
	Heartbeat        *Heartbeat        `json:"heartbeat,omitempty"`
	CapacityLearned  *CapacityLearned  `json:"capacity_learned,omitempty"`
	LeaseRequested   *LeaseRequested   `json:"lease_requested,omitempty"`
	LeaseGranted     *LeaseGranted     `json:"lease_granted,omitempty"`
	LeaseReturned    *LeaseReturned    `json:"lease_returned,omitempty"`
}

// Dimension names a quota dimension (DESIGN.md §3).
type Dimension string

// Quota dimensions.
const (
	DimRequests       Dimension = "requests"
	DimInputTokens    Dimension = "input_tokens"
	DimOutputTokens   Dimension = "output_tokens"
	DimTotalTokens    Dimension = "total_tokens"
	DimConcurrency    Dimension = "concurrency"
	DimRequestsPerDay Dimension = "requests_per_day"
	DimSpend          Dimension = "spend"
	DimRamp           Dimension = "ramp"
)

// Dimensions lists every dimension in a stable order.
var Dimensions = []Dimension{
	DimRequests, DimInputTokens, DimOutputTokens, DimTotalTokens,
	DimConcurrency, DimRequestsPerDay, DimSpend, DimRamp,
}

// PathLevel is one level of the bucket hierarchy a request passes through.
type PathLevel struct {
	Level string `json:"level"` // org, tenant, team, key, profile, deployment
	ID    string `json:"id"`
}

// ReserveRequested asks the ledger for capacity for one attempt of a request.
type ReserveRequested struct {
	// Path is the request's bucket path from the widest level to the
	// narrowest; levels without configured buckets are skipped by the ledger.
	Path []PathLevel `json:"path"`

	InputTokens       int64 `json:"input_tokens"`        // estimated prompt tokens
	CachedInputTokens int64 `json:"cached_input_tokens"` // estimated cache reads
	OutputTokens      int64 `json:"output_tokens"`       // reserved completion tokens
	SpendMicros       int64 `json:"spend_micros"`        // estimated cost, micro-units

	// MaxOutputTokens is the output a provider that counts max_tokens on
	// arrival (OpenAI, Azure) charges for this request: its max_tokens.
	// 0 means OutputTokens. Only ledger buckets with accounting
	// max_tokens_on_arrival charge it.
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`

	Streaming bool  `json:"streaming,omitempty"`
	Priority  int32 `json:"priority,omitempty"` // higher first within a class
	// MaxWaitMs is how long the request may wait in a queue, counted from the
	// log time of this event. 0 means the class default.
	MaxWaitMs int64 `json:"max_wait_ms,omitempty"`
	// DeadlineMs is the logical request's total deadline as log-relative
	// milliseconds from its first attempt; retries are not granted past it.
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
	// MaxAttempts bounds the attempts of the logical request (retry budget).
	MaxAttempts int32 `json:"max_attempts,omitempty"`

	FallbackAllowed bool   `json:"fallback_allowed,omitempty"`
	IdempotencyKey  string `json:"idempotency_key,omitempty"`
	// EmergencyAdmitted marks a request the gateway admitted under its local
	// emergency cap because the ledger did not answer in time.
	EmergencyAdmitted bool `json:"emergency_admitted,omitempty"`
	// Degraded marks an emergency admission made in the gateway's degraded
	// mode: within its share of the last known capacity while no ledger
	// answered (docs/gateway.md, "Degraded mode"). It always comes with
	// EmergencyAdmitted, so a ledger that predates the field charges it the
	// same way; a newer one names it in its decision (GDDegradedAdmitted).
	Degraded bool `json:"degraded,omitempty"`
	// PromptFamily groups requests that share a system prompt and tool
	// definitions: the caller's X-Sluice-Prompt-Family, or a stable hash the
	// gateway computes. Analytics breaks estimation error down by it.
	PromptFamily string `json:"prompt_family,omitempty"`
	// ClientRetryCount is how many times the client had already retried
	// this request itself before this one reached the gateway: the
	// official OpenAI and Anthropic SDKs send it as X-Stainless-Retry-Count
	// (0 on the first try). Analytics counts client retries with it; the
	// ledger does not use it. 0: the first try, or not known.
	ClientRetryCount int32 `json:"client_retry_count,omitempty"`
	// ServicePriorMs is the longest expected service time a ledger named
	// in refusing an earlier attempt of this request for its deadline
	// (Decision.Needed of deadline_below_service_time): the same route on
	// another scope, often in another partition. A fallback's scope whose
	// route has too few samples to know its own time takes it instead
	// (ledger/service.go). 0: none.
	ServicePriorMs int64 `json:"service_prior_ms,omitempty"`
}

// Status is a reservation's state as decided by the ledger.
type Status string

// Reservation statuses. Each word has exactly this meaning everywhere.
const (
	StatusGranted    Status = "granted"
	StatusQueued     Status = "queued"
	StatusDenied     Status = "denied"
	StatusExpired    Status = "expired"   // queued past its max wait or deadline; nothing was held
	StatusCancelled  Status = "cancelled" // queued and withdrawn by the caller
	StatusReleased   Status = "released"
	StatusReconciled Status = "reconciled"
	// StatusConflict: the same request id and attempt arrived with different
	// content; nothing was reserved.
	StatusConflict Status = "conflict"
	// StatusHoldExpired: granted, and the hold ended without a reconcile
	// or release: its hold TTL passed (hold_ttl_abandoned) or its gateway
	// stopped heartbeating (node_lost). Older ledgers wrote StatusExpired
	// for this too; Decision.HoldExpired reads both.
	StatusHoldExpired Status = "hold_expired"
)

// GatewayDecision is the normalised "who said no, and when" value carried by
// every decision and every error (DESIGN.md §1).
type GatewayDecision string

// GatewayDecision values.
const (
	GDAdmitted                   GatewayDecision = "admitted"
	GDQueued                     GatewayDecision = "queued"
	GDQueuedThenAdmitted         GatewayDecision = "queued_then_admitted"
	GDRejectedLocally            GatewayDecision = "rejected_locally"
	GDQueuedThenExpired          GatewayDecision = "queued_then_expired"
	GDAdmittedThenProviderReject GatewayDecision = "admitted_then_provider_rejected"
	GDLedgerUnavailable          GatewayDecision = "ledger_unavailable"
	GDEmergencyAdmitted          GatewayDecision = "emergency_admitted"
	// GDDegradedAdmitted: admitted by the gateway itself in degraded mode
	// (ReserveRequested.Degraded), charged by the ledger when it was back.
	GDDegradedAdmitted GatewayDecision = "degraded_admitted"
	GDRejectedPolicy   GatewayDecision = "rejected_policy"
	// GDLateGrant: the ledger granted, but the grant reached the gateway
	// too long after the ledger's log time to be dispatched (a stall); the
	// gateway released it and could not reserve again within the deadline.
	GDLateGrant GatewayDecision = "late_grant"
)

// Decision is the ledger's answer to a reservation (or a later change of it,
// such as a queued request becoming granted or expiring).
type Decision struct {
	Status Status `json:"status"`
	Reason Reason `json:"reason,omitempty"` // stable machine-readable code

	// The limiting bucket, when capacity decided the outcome.
	LimitPath      string    `json:"limit_path,omitempty"` // e.g. "tenant:acme/key:k1"
	LimitDimension Dimension `json:"limit_dimension,omitempty"`
	Needed         int64     `json:"needed,omitempty"`
	Available      int64     `json:"available,omitempty"`

	RetryAfterMs    int64           `json:"retry_after_ms,omitempty"`
	Borrowed        bool            `json:"borrowed,omitempty"`
	GatewayDecision GatewayDecision `json:"gateway_decision"`
	FallbackAllowed bool            `json:"fallback_allowed,omitempty"`
	// RetryClass classifies a refusal for the central retry policy.
	RetryClass RetryClass `json:"retry_class,omitempty"`

	// Where the input that caused this decision sits in the log, so replay
	// can line recorded decisions up with re-derived ones.
	InputPartition int32 `json:"input_partition"`
	InputOffset    int64 `json:"input_offset"`
	LogTimeMs      int64 `json:"log_time_ms"`
	// HoldTTLMs is how long a grant stays held without a reconcile before
	// the ledger expires it as abandoned.
	HoldTTLMs int64 `json:"hold_ttl_ms,omitempty"`
	// SendAtMs is when a grant should leave the gateway, in log time:
	// LogTimeMs + the ledger's learn.pace_delivery_ms, set when the
	// grant's path has a requests bucket whose window holds at most one
	// request (the ledger spaces such grants one provider interval apart
	// in log time, and the varying delay from grant to gateway would
	// otherwise bring two of them closer at the provider). The gateway
	// holds the attempt until then by its own clock, never longer than
	// the allowance. 0: send at once.
	SendAtMs int64 `json:"send_at_ms,omitempty"`
	// Shadow is what the shadow buckets on the request's path (limits
	// evaluated, never enforced) would have decided about this grant; nil
	// when the path has none. Only grants carry it.
	Shadow *ShadowVerdict `json:"shadow,omitempty"`
}

// ShadowVerdict is a shadow limit set's verdict on one grant. A shadow
// bucket is charged only by the grants it covers, so its level is the one
// it would have if it were enforced (except that enforcing it would also
// have changed the traffic behind it).
type ShadowVerdict struct {
	// Limited is true when a shadow bucket could not cover the grant: had
	// the shadow limits been enforced, the request would have been queued
	// or denied.
	Limited bool `json:"limited,omitempty"`
	// Reason is capacity (the bucket was short) or exceeds_capacity (the
	// request is larger than the bucket can ever hold); empty when not
	// limited.
	Reason Reason `json:"reason,omitempty"`
	// The first shadow bucket that could not cover it, in path order.
	LimitPath      string    `json:"limit_path,omitempty"`
	LimitDimension Dimension `json:"limit_dimension,omitempty"`
	Needed         int64     `json:"needed,omitempty"`
	Available      int64     `json:"available,omitempty"`
	// Buckets is how many shadow buckets the grant passed.
	Buckets int32 `json:"buckets"`
}

// HoldExpired reports whether d ended a grant without a reconcile or
// release. It reads the decisions of older ledgers too, which wrote
// StatusExpired for both meanings: theirs is a hold that expired unless its
// gateway decision says the request was still queued.
func (d *Decision) HoldExpired() bool {
	return d.Status == StatusHoldExpired || (d.Status == StatusExpired && d.GatewayDecision != GDQueuedThenExpired)
}

// Dispatched records that an attempt left for the provider.
type Dispatched struct {
	Provider   ProviderKind `json:"provider"`
	Deployment string       `json:"deployment"`
	Model      string       `json:"model"` // upstream model name
	QueueMs    int64        `json:"queue_ms"`
	Fallback   bool         `json:"fallback,omitempty"`
}

// Reconciled replaces an attempt's estimate with its actual usage.
type Reconciled struct {
	InputTokens       int64 `json:"input_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	SpendMicros       int64 `json:"spend_micros"`
	HTTPStatus        int32 `json:"http_status"`
	FirstByteMs       int64 `json:"first_byte_ms"`
	TotalMs           int64 `json:"total_ms"`
	Streaming         bool  `json:"streaming,omitempty"`
	// Partial is true when the usage was counted from an interrupted stream.
	Partial bool `json:"partial,omitempty"`
	// EstimatedInputTokens and EstimatedOutputTokens repeat the estimate so
	// analytics can compute estimation error from this event alone.
	EstimatedInputTokens  int64 `json:"estimated_input_tokens"`
	EstimatedOutputTokens int64 `json:"estimated_output_tokens"`
}

// ProviderRejected reports a provider refusal (429, 503, quota exhausted).
type ProviderRejected struct {
	HTTPStatus        int32         `json:"http_status"`
	Kind              RejectionKind `json:"kind"`
	Limiter           Dimension     `json:"limiter,omitempty"` // dimension if the provider said
	RetryAfterMs      int64         `json:"retry_after_ms,omitempty"`
	ProviderRequestID string        `json:"provider_request_id,omitempty"`
	Deployment        string        `json:"deployment,omitempty"`
	Message           string        `json:"message,omitempty"` // provider message, credentials scrubbed
}

// Observation is one dimension's state as a provider's headers reported it.
type Observation struct {
	Dimension Dimension `json:"dimension"`
	Limit     int64     `json:"limit,omitempty"`
	Remaining int64     `json:"remaining"`
	ResetMs   int64     `json:"reset_ms,omitempty"` // time until reset/full, ms
}

// ProviderObserved carries remaining/reset levels from provider headers.
type ProviderObserved struct {
	Deployment   string        `json:"deployment,omitempty"`
	Observations []Observation `json:"observations"`
}

// Sources of a learned capacity (CapacityLearned.Source).
const (
	// LearnedHeaders: the provider's rate-limit headers reported the limit.
	LearnedHeaders = "headers"
	// LearnedRefusal: a refusal without rate-limit headers lowered it
	// (multiplicative decrease).
	LearnedRefusal = "refusal"
	// LearnedSuccess: sustained success raised it (additive increase).
	LearnedSuccess = "success"
	// LearnedRemaining: headers that report what remains but no limit
	// (Azure OpenAI) bounded it: the limit is at most the remaining count
	// plus what the ledger granted in the provider's minute.
	LearnedRemaining = "remaining"
)

// CapacityLearned records a change of the capacity one provider bucket
// enforces, learned from the provider (ledger/README.md, "Capacity learned
// from the provider"). The ledger derives it deterministically from the
// ProviderObserved, ProviderRejected and Reconciled records of its
// partition, so replay derives the same record byte for byte; it is written
// to sluice.decisions in the transaction of the input that caused it, for
// explain, dashboards and audit. Consumers that route decisions ignore it.
type CapacityLearned struct {
	Level     string    `json:"level"` // "deployment", or "scope" for the scope root
	ID        string    `json:"id"`    // the deployment id (or scope name)
	Dimension Dimension `json:"dimension"`
	PeriodMs  int64     `json:"period_ms"`
	// ConfiguredCapacity is the configured capacity per period, the bound
	// the learned one never exceeds; 0: none configured (headers only).
	ConfiguredCapacity int64 `json:"configured_capacity,omitempty"`
	// PreviousCapacity and LearnedCapacity are the enforced capacity per
	// period before and after; learned = configured means the bucket is
	// back at its configured bound.
	PreviousCapacity int64  `json:"previous_capacity"`
	LearnedCapacity  int64  `json:"learned_capacity"`
	Source           string `json:"source"` // headers, refusal, success, remaining
	// ReportedLimit is the limit the headers reported, per period (headers),
	// or the one remaining + granted bounds it by (remaining).
	ReportedLimit  int64 `json:"reported_limit,omitempty"`
	InputPartition int32 `json:"input_partition"`
	InputOffset    int64 `json:"input_offset"`
	LogTimeMs      int64 `json:"log_time_ms"`
}

// RetryRequested asks the ledger whether, and when, a failed attempt may be
// retried; the ledger answers with a Decision for the next attempt.
type RetryRequested struct {
	PreviousAttempt int32      `json:"previous_attempt"`
	Reason          RetryClass `json:"reason"` // the retry class of the failure
	RetryAfterMs    int64      `json:"retry_after_ms,omitempty"`
}

// Released gives back a reservation without usage (or with partial usage).
type Released struct {
	Reason       Reason `json:"reason"` // client_disconnect, deadline, cancel, error, ledger_timeout, late_grant
	InputTokens  int64  `json:"input_tokens,omitempty"`
	OutputTokens int64  `json:"output_tokens,omitempty"`
}

// Outcome is the final status of a logical request, for analytics.
type Outcome struct {
	Status          OutcomeStatus   `json:"status"`
	HTTPStatus      int32           `json:"http_status"`
	Attempts        int32           `json:"attempts"`
	QueueMs         int64           `json:"queue_ms"`
	TotalMs         int64           `json:"total_ms"`
	ErrorCode       string          `json:"error_code,omitempty"`
	GatewayDecision GatewayDecision `json:"gateway_decision,omitempty"`
	InputTokens     int64           `json:"input_tokens,omitempty"`
	OutputTokens    int64           `json:"output_tokens,omitempty"`
}

// ConfigChanged installs a new configuration at this log position. Ledger
// holds the ledger's own config document (ledger.Config as JSON) so that this
// package stays independent of the ledger.
type ConfigChanged struct {
	ConfigVersion string `json:"config_version"`
	Source        string `json:"source,omitempty"` // file path, calibration report, admin API, …
	// Actor is who made the change (an operator, a partner token's name,
	// "calibration"), and Reason why; both are for the audited config
	// history and never affect a decision.
	Actor  string `json:"actor,omitempty"`
	Reason string `json:"reason,omitempty"`
	Ledger []byte `json:"ledger"` // JSON document, base64 on the wire
	// Change says in one line what an admin API change did (e.g.
	// "key.revoke tenant=acme key=acme-app"), for the audited history.
	Change string `json:"change,omitempty"`
	// Admission is the admin API's document (tenants, teams, keys as
	// SHA-256 hashes, partners; services/admin.State as JSON). It travels
	// only on the admin topic that gateways read, never on sluice.requests:
	// the ledger needs only Ledger, and the request log is copied to
	// analytics whole.
	Admission []byte `json:"admission,omitempty"`
	// KeyID and Signature authenticate the change (internal/configsig):
	// an Ed25519 signature by the admin writer over every other field.
	// A ledger that holds the public key refuses a ConfigChanged without
	// a valid one, so a gateway, which can write sluice.requests but
	// holds no private key, cannot reconfigure the ledger.
	KeyID     string `json:"key_id,omitempty"`
	Signature []byte `json:"signature,omitempty"`
	// Seq orders the changes an admin writer signs: strictly increasing
	// (the writer's clock in nanoseconds, bumped past the last one it
	// signed), and covered by the signature. A ledger refuses a signed
	// change whose Seq is below that of the change in force, so an old,
	// validly signed change re-appended by whoever can write the topic
	// cannot roll the config back. 0 on unsigned changes.
	Seq uint64 `json:"seq,omitempty"`
}

// Tick advances a partition's clock through the log while work is pending.
type Tick struct {
	Reason string `json:"reason,omitempty"`
}

// Snapshot is a ledger partition's serialized state and the input offset it
// reflects (all inputs before InputOffset are applied).
type Snapshot struct {
	Partition   int32  `json:"partition"`
	InputOffset int64  `json:"input_offset"`
	LogTimeMs   int64  `json:"log_time_ms"`
	State       []byte `json:"state"`
}

// Heartbeat says that the gateway named by the envelope's Node is alive.
// A gateway sends one periodically, keyed by each scope in which it holds
// grants or waits for decisions, so that every ledger partition holding its
// reservations sees it. A partition that has seen a node's heartbeat and
// then none for its node_liveness_ms of log time releases that node's
// grants and expires its queued reservations (reason node_lost) instead of
// holding them until the hold TTL. It has no fields yet; later versions may
// add some (readers skip what they do not know).
type Heartbeat struct{}
