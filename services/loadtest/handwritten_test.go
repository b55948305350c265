package loadtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
)

// TestHandwrittenConfig: each shipped example config runs the
// noisy-neighbor scenario against the simulator: every provider points at
// it, every scenario tenant has a key in its class (in the config's tenant
// of that id when there is one), and nothing else changes.
func TestHandwrittenConfig(t *testing.T) {
	sc, err := LoadScenario("noisy-neighbor", "")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../../deploy/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example configs: %v", err)
	}
	const simURL = "http://127.0.0.1:9"
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			keys := NewKeys(sc)
			y, err := HandwrittenConfigYAML(sc, b, simURL, keys)
			if err != nil {
				t.Fatal(err)
			}
			c, err := config.Load(bytes.NewReader(y))
			if err != nil {
				t.Fatal(err)
			}
			r := c.Route(sc.Model)
			for _, cd := range r.Candidates {
				p := c.Provider(cd.Provider)
				if !strings.HasPrefix(p.BaseURL, simURL+"/") || p.APIKey() != "" {
					t.Errorf("provider %s: base_url %q, key %q; want the simulator and no key", p.Name, p.BaseURL, p.APIKey())
				}
			}
			for _, tn := range sc.Tenants {
				id := c.Lookup(keys[tn.ID])
				if id == nil || id.Tenant != tn.ID || id.Class != tn.Class {
					t.Errorf("tenant %s: identity %+v, want the tenant in class %s", tn.ID, id, tn.Class)
				}
			}
			if id := c.Lookup(keys[warmupTenant]); id == nil {
				t.Errorf("no warm-up key")
			}
		})
	}
}

// TestHandwrittenConfigTenantKept: a scenario tenant that the config
// already has gets its key in that tenant, keeping the tenant's org.
func TestHandwrittenConfigTenantKept(t *testing.T) {
	sc := &Scenario{Model: "m", Tenants: []TenantSpec{{ID: "acme", Class: "batch"}}}
	file := `providers:
  - {name: p, kind: anthropic, scope: s, base_url: "https://api.anthropic.com/v1", api_key_env: NOT_SET_ANYWHERE}
routes:
  - {model: m, provider: p}
tenants:
  - id: acme
    org: acme-org
    keys: [{id: real, sha256: 0000000000000000000000000000000000000000000000000000000000000000}]
ledger:
  classes: [{name: interactive, max_wait_ms: 300, max_depth: 10}, {name: batch, age_offset_ms: 1000, max_wait_ms: 5000, max_depth: 10}]
  scopes: [{name: s, buckets: [{level: deployment, id: p, dimension: requests, capacity: 60}]}]
`
	keys := Keys{"acme": "sk-a", warmupTenant: "sk-w"}
	y, err := HandwrittenConfigYAML(sc, []byte(file), "http://sim/", keys)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(bytes.NewReader(y))
	if err != nil {
		t.Fatal(err)
	}
	if id := c.Lookup("sk-a"); id == nil || id.Org != "acme-org" || id.Class != "batch" {
		t.Errorf("identity %+v", id)
	}
	if p := c.Provider("p"); p.BaseURL != "http://sim/anthropic/v1" {
		t.Errorf("base_url %q", p.BaseURL)
	}
	for _, tc := range []struct{ name, model, class, want string }{
		{"unrouted model", "gpt-x", "batch", `no route for the scenario's model "gpt-x"`},
		{"unknown class", "m", "gold", `"gold" is not a class of the ledger document`},
	} {
		sc := &Scenario{Model: tc.model, Tenants: []TenantSpec{{ID: "acme", Class: tc.class}}}
		if _, err := HandwrittenConfigYAML(sc, []byte(file), "http://sim", keys); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}
