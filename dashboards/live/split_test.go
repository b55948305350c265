package live

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// TestProjectionSumsASplitScope: events of a split scope's sub-scopes
// ("sim-openai#0", "sim-openai#1", ledger/split.go) are shown under the
// provider scope: a key's series sums the sub-scopes it listed, in flight
// included; a decision names the sub-scope that decided it; the
// provider's report stands for the scope; a name that only looks split
// (no index) stays as it is.
func TestProjectionSumsASplitScope(t *testing.T) {
	c := newClock()
	p := NewProjection(60*time.Second, c.Now)
	in := func(scope string, evs ...*schemas.Event) []*schemas.Event {
		for _, ev := range evs {
			ev.Scope = scope
		}
		return evs
	}
	p.Apply(in("sim-openai#0", reserve("t", "k", "r1"), granted("t", "k", "r1"))...)
	// The same key's requests in another sub-scope (the scope was split
	// differently since) are the same series.
	p.Apply(in("sim-openai#1", reserve("t", "k", "r2"), granted("t", "k", "r2"), reconciled("t", "k", "r2", 100, 90, 50, 40))...)
	p.Apply(in("sim-openai#1", observedEv("t", 500))...)
	p.Apply(in("odd#name", reserve("t", "k", "r3"))...)
	c.Advance(time.Second)
	s := p.Snapshot()

	var split *SeriesRow
	for i := range s.Series {
		switch r := &s.Series[i]; r.Scope {
		case "sim-openai":
			split = r
		case "odd#name":
			if r.SubScopes != nil {
				t.Errorf("odd#name is not a sub-scope: %+v", r)
			}
		default:
			t.Errorf("series in scope %q: %+v", r.Scope, r)
		}
	}
	if split == nil || split.Received != 2 || split.Granted != 2 || split.Reconciled != 1 || split.InFlight != 1 ||
		!slices.Equal(split.SubScopes, []string{"sim-openai#0", "sim-openai#1"}) {
		t.Fatalf("split series %+v, want two of each over sim-openai#0 and #1, one in flight", split)
	}
	if len(s.RecentDecisions) != 2 || s.RecentDecisions[0].Scope != "sim-openai" || s.RecentDecisions[0].SubScope != "sim-openai#1" ||
		s.RecentDecisions[1].SubScope != "sim-openai#0" {
		t.Errorf("decisions %+v, want scope sim-openai with the deciding sub-scope", s.RecentDecisions)
	}
	if len(s.ProviderObserved) != 1 || s.ProviderObserved[0].Scope != "sim-openai" || s.ProviderObserved[0].SubScope != "sim-openai#1" {
		t.Errorf("provider observed %+v", s.ProviderObserved)
	}
	if len(s.Stranded) != 1 || s.Stranded[0].Scope != "sim-openai" {
		t.Errorf("stranded %+v, want the settled hold under sim-openai", s.Stranded)
	}
}
