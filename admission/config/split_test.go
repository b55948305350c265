package config_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
)

// TestLedgerScopeOfASplitScope: a provider whose ledger scope is split
// over partitions sends each key's requests to that key's sub-scope
// (ledger.PartitionScope), the same one every time; a provider of an
// unsplit scope sends them to its scope.
func TestLedgerScopeOfASplitScope(t *testing.T) {
	doc := `ledger:
  scopes:
    - {name: s1, partitions: 4, buckets: [{level: deployment, id: oa, dimension: requests, capacity: 6000, period_ms: 60000}]}
    - {name: s2, buckets: [{level: key, id: "*", dimension: requests, capacity: 600}]}
`
	c, err := config.Load(strings.NewReader(strings.Replace(entitledYAML, "LEDGER", doc, 1)))
	if err != nil {
		t.Fatal(err)
	}
	oa, az := c.Provider("oa"), c.Provider("az")
	seen := map[string]bool{}
	for _, key := range []string{"batch-key", "free-key", "k", "k2", "k3", "k4", "k5", "k6"} {
		got := c.LedgerScope(oa, key)
		if want := ledger.PartitionScope("s1", 4, key); got != want {
			t.Errorf("key %s on the split scope: %q, want %q", key, got, want)
		}
		seen[got] = true
		if got := c.LedgerScope(az, key); got != "s2" {
			t.Errorf("key %s on the unsplit scope: %q, want s2", key, got)
		}
	}
	if len(seen) < 2 {
		t.Errorf("8 keys all went to %v: the split spreads nothing", seen)
	}
}
