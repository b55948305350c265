package schemas

// Reason is a Decision.Reason code: stable and machine-readable, part of
// the wire format like Status.
type Reason string

// Decision reasons defined here. (Older reason codes are still string
// literals in ledger/; they move here as they are touched.)
const (
	// ReasonPathMissingLevel: the request's path does not name a level
	// that its scope requires (ledger ScopeConfig.RequiredLevels); nothing
	// was reserved. Decision.LimitPath names the missing levels, "/"
	// separated in path order (e.g. "deployment").
	ReasonPathMissingLevel Reason = "path_missing_level"
)
