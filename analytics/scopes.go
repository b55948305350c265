package analytics

import "github.com/sluice-dev/sluice/ledger"

// A hot deployment split over N ledger partitions (ledger scopes[].
// partitions) decides its requests in N sub-scopes "<scope>#<i>"
// (ledger.SubScope), and its events carry the sub-scope. The report's
// tables by scope (scope_429, stranded_quota, stranded_by_owner,
// daily_headroom, shadow_limits) fold the sub-scopes back into the
// deployment: one row per deployment, summed over its sub-scopes, and
// joined to the deployment's buckets as its ConfigChanged states them
// (the ledger document names the split scope, not its sub-scopes). The
// queries spell the fold as SubScopeFoldSQL; DeploymentScope is the
// same in Go (TestSubScopeFoldIsSplitOf).

// SubScopeFoldSQL is the ClickHouse expression of DeploymentScope over
// the column scope: ledger.SplitOf's rule (a name with no other '#', then
// '#' and an index below 64 without leading zeros) as a regular
// expression, which 18.16 and 26.x both run.
const SubScopeFoldSQL = `replaceRegexpOne(scope, '^([^#]+)#([0-9]|[1-5][0-9]|6[0-3])$', '\\1')`

// DeploymentScope is the scope a ledger scope's events belong to in the
// report: the split scope of a sub-scope, else the scope itself.
func DeploymentScope(scope string) string {
	s, _, _ := ledger.SplitOf(scope)
	return s
}
