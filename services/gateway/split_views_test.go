package gateway

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/reserve"
)

// splitYAML is minimalYAML with scope s split over 3 partitions and a
// deployment limit of provider p (a split scope's deployment limits must
// name their deployment).
func splitYAML() string {
	return strings.Replace(minimal("600"), "    - name: s\n", "    - name: s\n      partitions: 3\n", 1) +
		"        - {level: tenant, id: t, dimension: requests_per_day, capacity: 1000}\n" +
		"        - {level: deployment, id: p, dimension: requests, capacity: 6000, period_ms: 60000}\n"
}

// TestReadinessChecksASplitScopesSubScopes: the probe and the readiness
// checks name the partitions that decide requests, a split scope's
// sub-scopes, not the unsplit scope (whose partition no ledger scope
// holds); the route is usable while any sub-scope answers.
func TestReadinessChecksASplitScopesSubScopes(t *testing.T) {
	cfg := mustLoad(t, splitYAML())
	if got, want := scopes(cfg), []string{"s#0", "s#1", "s#2"}; !slices.Equal(got, want) {
		t.Fatalf("scopes = %v, want %v", got, want)
	}
	const now = 1_000_000
	names := func(cs []Check) (out []string) {
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	// No sub-scope answers: three failed checks, nothing fresh.
	cs, fresh := roundTripChecks(cfg, reserve.Health{}, now, nil)
	if want := []string{"ledger_round_trip:s#0", "ledger_round_trip:s#1", "ledger_round_trip:s#2"}; !slices.Equal(names(cs), want) {
		t.Fatalf("checks %v, want %v", names(cs), want)
	}
	if len(fresh) != 3 || fresh["s#0"] || fresh["s#1"] || fresh["s#2"] || fresh["s"] {
		t.Errorf("fresh = %v, want three stale sub-scopes", fresh)
	}
	// One sub-scope answers: its check passes, and the route is usable.
	h := reserve.Health{Probing: true, DecisionsOK: true, RoundTripMs: map[string]int64{"s#1": now - 10, "s": now}}
	cs, fresh = roundTripChecks(cfg, h, now, nil)
	if !cs[1].OK || cs[0].OK || cs[2].OK || !fresh["s#1"] {
		t.Errorf("checks %+v, want only s#1 fresh (a round trip of the unsplit name proves nothing)", cs)
	}
	s := New(cfg, nil, nil)
	r := s.readiness(cfg, h, now)
	if !r.Ready || r.Checks[len(r.Checks)-1].Name != "usable_route" || !r.Checks[len(r.Checks)-1].OK {
		t.Errorf("readiness %+v, want ready through s#1", r)
	}
	r = s.readiness(cfg, reserve.Health{Probing: true, DecisionsOK: true, RoundTripMs: map[string]int64{"s": now}}, now)
	if r.Ready {
		t.Errorf("readiness %+v: ready on a round trip of the unsplit scope, which decides nothing", r)
	}
}
