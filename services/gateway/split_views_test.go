package gateway

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
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

// TestUsageOfASplitScope: /v1/sluice/usage shows a split scope as the one
// provider scope the caller knows, its tenant's bucket summed over the
// sub-scopes (each holds its share: 1,000 a day is 334 + 333 + 333) and
// listed per sub-scope, its key's
// bucket in the one sub-scope its requests go to, and the deployment's
// limit once (one budget, leased by the sub-scopes), not three times.
func TestUsageOfASplitScope(t *testing.T) {
	// The request's path leaves out the deployment (which would wait for
	// a lease of the budget partition): this is about the views.
	y := strings.Replace(splitYAML(), "0000000000000000000000000000000000000000000000000000000000000000", config.HashKey("sk-t"), 1)
	y = strings.Replace(y, "      partitions: 3\n", "      partitions: 3\n      required_levels: [tenant, key]\n", 1)
	cfg := mustLoad(t, y)
	now := time.Now().UnixMilli()
	ul := newUsageLedger(t, cfg, now)
	keySub := ledger.PartitionScope("s", 3, "k")
	out := ul.apply(usageReserve("r1", keySub, "t", "k", schemas.PathLevel{Level: "tenant", ID: "t"}, schemas.PathLevel{Level: "key", ID: "k"}))
	if len(out) == 0 || out[0].Decision.Status != schemas.StatusGranted {
		t.Fatalf("the request in %s: %+v", keySub, out)
	}
	s := New(cfg, nil, nil, WithLevels(ledgerLevels{ul.l}))
	u := s.usage(cfg, cfg.Lookup("sk-t"), now)

	var day, key *UsageLimit
	for i := range u.Limits {
		switch lim := &u.Limits[i]; {
		case lim.Scope != "s":
			t.Errorf("limit in scope %q, want the provider scope s: %+v", lim.Scope, lim)
		case lim.Dimension == schemas.DimRequestsPerDay:
			day = lim
		case lim.Level == ledger.LevelKey:
			key = lim
		}
	}
	if day == nil || day.Capacity != 1000 || day.Remaining == nil || *day.Remaining != 999 || *day.Used != 1 || day.Source != "ledger_snapshot" || len(day.SubScopes) != 3 {
		t.Fatalf("tenant's daily limit %+v, want 1000 over 3 sub-scopes with 1 used", day)
	}
	// The key's sub-scope is in the ledger's state; the others have seen
	// no request, so no snapshot holds them: they count as full.
	for i, part := range day.SubScopes {
		share := []int64{334, 333, 333}[i]
		if part.Scope != ledger.SubScope("s", i) || part.Capacity != share {
			t.Errorf("sub-scope %d: %+v, want %s of %d", i, part, ledger.SubScope("s", i), share)
		}
		if observed := part.Remaining != nil; observed != (part.Scope == keySub) || observed && *part.Remaining != share-1 || !observed && part.Source != "unobserved" {
			t.Errorf("sub-scope %s: %+v, want %d left in %s only, the others unobserved", part.Scope, part, share-1, keySub)
		}
	}
	if !strings.Contains(day.Summary, "over 3 sub-scopes") {
		t.Errorf("summary %q does not say it sums sub-scopes", day.Summary)
	}
	if key == nil || key.Capacity != 600 || len(key.SubScopes) != 1 || key.SubScopes[0].Scope != keySub {
		t.Errorf("key's limit %+v, want 600 in its own sub-scope %s only", key, keySub)
	}
	if len(u.DailyHeadroom) != 1 || u.DailyHeadroom[0].Scope != "s" || u.DailyHeadroom[0].Capacity != 1000 {
		t.Errorf("daily headroom %+v", u.DailyHeadroom)
	}
	if len(u.ProviderCapacity) != 1 {
		t.Fatalf("provider capacity %+v, want the deployment's limit once", u.ProviderCapacity)
	}
	if pc := u.ProviderCapacity[0]; pc.Scope != "s" || pc.ID != "p" || pc.Configured != 6000 || !slices.Equal(pc.SubScopes, []string{"s#0", "s#1", "s#2"}) {
		t.Errorf("provider capacity %+v, want p's 6000/min over s#0..s#2", pc)
	}
}
