package ledger

import (
	"strings"
	"testing"
)

func TestDiffConfigs(t *testing.T) {
	old := `{"scopes":[{"name":"s","buckets":[
	  {"level":"key","id":"*","dimension":"requests","capacity":600},
	  {"level":"tenant","id":"*","dimension":"total_tokens","capacity":1000}]}]}`
	// Reordered buckets, one capacity changed, one shadow bucket added, a
	// default written out, the hold TTL changed.
	neu := `{"scopes":[{"name":"s","default_tenant_weight":1,"buckets":[
	  {"level":"tenant","id":"*","dimension":"total_tokens","capacity":1000},
	  {"level":"key","id":"*","dimension":"requests","capacity":300},
	  {"level":"key","id":"*","dimension":"requests","capacity":120,"shadow":true}]}],"hold_ttl_ms":60000}`
	var got []string
	for _, d := range DiffConfigs([]byte(old), []byte(neu)) {
		got = append(got, d.String())
	}
	want := []string{
		"~ hold_ttl_ms: 120000 → 60000",
		"~ scopes[s].buckets[key:*:requests].capacity: 600 → 300",
		`+ scopes[s].buckets[key:*:requests:shadow]: {"capacity":120,"dimension":"requests","id":"*","level":"key","period_ms":60000,"refill":"token","shadow":true,"window_ms":1000}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := DiffConfigs([]byte(old), []byte(old)); len(d) != 0 {
		t.Fatalf("a document differs from itself: %v", d)
	}
	if d := DiffConfigs(nil, []byte(old)); len(d) == 0 || d[0].Old != "" {
		t.Fatalf("first config: %v", d)
	}
}
