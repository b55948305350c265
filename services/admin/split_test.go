package admin

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
)

// TestLimitsOfASplitScope: the admin API speaks of a split scope by its
// name: a tenant's limit there is shown once (the sub-scopes' shares
// summed), a limit set on the scope is divided among the sub-scopes (a
// copy in each would hold 3 times over a tenant whose keys spread over
// them), and naming a sub-scope is refused with the reason.
func TestLimitsOfASplitScope(t *testing.T) {
	y := strings.Replace(strings.Replace(testYAML, "SEEDHASH", config.HashKey(seedKey), 1), "    - name: s1\n", "    - name: s1\n      partitions: 3\n", 1)
	file, err := config.Load(strings.NewReader(y))
	if err != nil {
		t.Fatal(err)
	}
	s := Seed(file)
	if got := s.LimitsOf(ledger.LevelTenant, "acme"); len(got) != 1 || got[0].Scope != "s1" || got[0].Capacity != 100 {
		t.Fatalf("acme's limits %+v, want one of 100 in s1", got)
	}
	s, e := Apply(s, Actor{}, Op{Kind: OpTenantLimits, Tenant: "acme", Limits: []Limit{{Scope: "s1", Dimension: "requests", Capacity: 50}}})
	if e != nil {
		t.Fatal(e)
	}
	if got := s.LimitsOf(ledger.LevelTenant, "acme"); len(got) != 1 || got[0].Scope != "s1" || got[0].Capacity != 50 {
		t.Errorf("after setting 50 in s1: %+v", got)
	}
	var doc ledger.Config
	if err := json.Unmarshal(s.Ledger, &doc); err != nil {
		t.Fatal(err)
	}
	subs := 0
	for _, sc := range doc.Scopes {
		if split, i, ok := ledger.SplitOf(sc.Name); ok && split == "s1" {
			subs++
			want := []int64{17, 17, 16}[i] // 50 over 3
			if n := len(bucketsFor(sc, "acme")); n != 1 || bucketsFor(sc, "acme")[0].Capacity != want {
				t.Errorf("%s holds %d acme buckets %+v, want one of %d", sc.Name, n, bucketsFor(sc, "acme"), want)
			}
		}
	}
	if subs != 3 {
		t.Errorf("%d sub-scopes of s1 in the document, want 3", subs)
	}
	_, e = Apply(s, Actor{}, Op{Kind: OpTenantLimits, Tenant: "acme", Limits: []Limit{{Scope: "s1#1", Dimension: "requests", Capacity: 5}}})
	if e == nil || !strings.Contains(e.Message, `sub-scope of split scope "s1"`) {
		t.Errorf("a limit of one sub-scope: %v, want refused naming the split scope", e)
	}
}

func bucketsFor(sc ledger.ScopeConfig, tenant string) (out []ledger.BucketConfig) {
	for _, b := range sc.Buckets {
		if b.Level == ledger.LevelTenant && b.ID == tenant {
			out = append(out, b)
		}
	}
	return out
}

// TestLimitsOfASplitScopeShowsTheConfiguredWindow: a token limit of 100 a
// minute in a 1 s window, divided over 3 sub-scopes, gets a window of
// 1765 ms in sub-scope 0 (its share of 34 must burst one unit), but the
// admin API shows the limit as set, so a GET then a PUT of what it showed
// leaves the document as it was. It showed 1765, and the PUT lengthened
// the limit's window.
func TestLimitsOfASplitScopeShowsTheConfiguredWindow(t *testing.T) {
	y := strings.Replace(strings.Replace(testYAML, "SEEDHASH", config.HashKey(seedKey), 1), "    - name: s1\n", "    - name: s1\n      partitions: 3\n", 1)
	file, err := config.Load(strings.NewReader(y))
	if err != nil {
		t.Fatal(err)
	}
	set := []Limit{{Scope: "s1", Dimension: "requests", Refill: ledger.RefillToken, Capacity: 100, PeriodMs: 60000, WindowMs: 1000}}
	s, e := Apply(Seed(file), Actor{}, Op{Kind: OpTenantLimits, Tenant: "acme", Limits: set})
	if e != nil {
		t.Fatal(e)
	}
	got := s.LimitsOf(ledger.LevelTenant, "acme")
	if len(got) != 1 || got[0] != set[0] {
		t.Fatalf("acme's limits %+v, want %+v as set", got, set)
	}
	again, e := Apply(s, Actor{}, Op{Kind: OpTenantLimits, Tenant: "acme", Limits: got})
	if e != nil {
		t.Fatal(e)
	}
	if string(again.Ledger) != string(s.Ledger) {
		t.Errorf("a PUT of the limits a GET showed changed the document:\n%s\nwas\n%s", again.Ledger, s.Ledger)
	}
}
