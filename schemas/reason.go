package schemas

// Reason is a Decision.Reason or Released.Reason code: stable and
// machine-readable, part of the wire format like Status. Codes that one
// component writes and another acts on are defined once here, so that the
// ledger, the gateways and analytics use the same words.
type Reason string

// Reasons defined here. (Older reason codes are still string literals in
// ledger/; they move here as they are touched.)
const (
	// ReasonNodeLost is the Decision.Reason of a reservation the ledger
	// expired because its gateway stopped heartbeating (see Heartbeat): a
	// grant is given back as a release would give it back, a queued
	// reservation is dropped. It tells analytics a lost gateway from an
	// abandoned grant (hold_ttl_abandoned).
	ReasonNodeLost Reason = "node_lost"
	// ReasonLateGrant is the Released.Reason of a grant the gateway did not
	// dispatch because it arrived too long after the ledger's log time (a
	// stall: the provider counts in wall time, so the backlog would reach it
	// as a burst). It is also the error code the client gets when no new
	// grant fits its deadline.
	ReasonLateGrant Reason = "late_grant"

	// ReasonPathMissingLevel: the request's path does not name a level
	// that its scope requires (ledger ScopeConfig.RequiredLevels); nothing
	// was reserved. Decision.LimitPath names the missing levels, "/"
	// separated in path order (e.g. "deployment").
	ReasonPathMissingLevel Reason = "path_missing_level"
)
