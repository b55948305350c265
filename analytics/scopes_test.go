package analytics

import (
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/ledger"
)

// TestSubScopeFoldIsSplitOf: the queries' fold (SubScopeFoldSQL, run here
// as a Go regular expression: RE2 on both sides) names the same scope as
// ledger.SplitOf, and every query that groups by scope folds it.
func TestSubScopeFoldIsSplitOf(t *testing.T) {
	m := regexp.MustCompile(`'(\^.*\$)', '\\\\1'`).FindStringSubmatch(SubScopeFoldSQL)
	if m == nil {
		t.Fatalf("no pattern in %s", SubScopeFoldSQL)
	}
	re := regexp.MustCompile(m[1])
	names := []string{"openai:gpt-4o", "", "#", "#1", "a#", "a#0", "a#1", "a#9", "a#10", "a#59", "a#60", "a#63", "a#64", "a#99", "a#100",
		"a#01", "a#00", "a#-1", "a#1a", "a#b#1", "a##1", "anthropic:claude#3", "x#1#2", ledger.SubScope("azure:eu", 7)}
	for _, n := range names {
		got := re.ReplaceAllString(n, "$1")
		if want := DeploymentScope(n); got != want {
			t.Errorf("%q: the SQL fold gives %q, SplitOf %q", n, got, want)
		}
	}
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	folded := map[string]bool{"scope_429": true, "stranded_quota": true, "stranded_by_owner": true, "daily_headroom": true, "shadow_limits": true}
	for _, q := range qs {
		if got := strings.Contains(q.SQL, SubScopeFoldSQL); got != folded[q.Name] {
			t.Errorf("%s: folds sub-scopes %v, want %v", q.Name, got, folded[q.Name])
		}
	}
}
