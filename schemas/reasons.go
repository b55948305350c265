package schemas

// Reason codes that one component writes and another acts on, defined once
// here so that the ledger, the gateways and analytics use the same words
// (Decision.Reason and Released.Reason are strings on the wire).
const (
	// ReasonNodeLost is the Decision.Reason of a reservation the ledger
	// expired because its gateway stopped heartbeating (see Heartbeat): a
	// grant is given back as a release would give it back, a queued
	// reservation is dropped. It tells analytics a lost gateway from an
	// abandoned grant (hold_ttl_abandoned).
	ReasonNodeLost = "node_lost"
	// ReasonLateGrant is the Released.Reason of a grant the gateway did not
	// dispatch because it arrived too long after the ledger's log time (a
	// stall: the provider counts in wall time, so the backlog would reach it
	// as a burst). It is also the error code the client gets when no new
	// grant fits its deadline.
	ReasonLateGrant = "late_grant"
)
