package schemas

import "strconv"

// SubScopeSep joins a split scope's name and a sub-scope's index in the
// sub-scope's name, "<scope>#<i>" (ledger.SubScope).
const SubScopeSep = "#"

// SubScopesMax bounds how many sub-scopes a scope is split into
// (ledger.ScopeConfig.Partitions).
const SubScopesMax = 64

// splitIndexDigits is the most digits of a sub-scope's index.
var splitIndexDigits = len(strconv.Itoa(SubScopesMax - 1))

// SplitScopeOf is ledger.SplitOf, for a name or a record key (without
// copying it: the partitioner of sluice.requests calls it per record).
// It lives here, below the ledger, so that internal/bus reads a
// sub-scope's name as the ledger does: ok false when name is not
// "<scope>#<i>" with one "#", a non-empty scope and i a decimal below
// SubScopesMax without leading zeros.
func SplitScopeOf[S ~string | ~[]byte](name S) (scope S, i int, ok bool) {
	j := -1
	for k := 0; k < len(name); k++ {
		if name[k] != SubScopeSep[0] {
			continue
		}
		if j >= 0 {
			return name, 0, false
		}
		j = k
	}
	if j <= 0 {
		return name, 0, false
	}
	d := name[j+1:]
	if len(d) == 0 || len(d) > splitIndexDigits || len(d) > 1 && d[0] == '0' {
		return name, 0, false
	}
	for k := 0; k < len(d); k++ {
		if d[k] < '0' || d[k] > '9' {
			return name, 0, false
		}
		i = i*10 + int(d[k]-'0')
	}
	if i >= SubScopesMax {
		return name, 0, false
	}
	return name[:j], i, true
}
