package config_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
)

const entitledYAML = `providers:
  - {name: oa, kind: openai, scope: s1, base_url: "https://api.openai.com/v1"}
  - {name: az, kind: azure, scope: s2, base_url: "https://x.openai.azure.com", deployment: d, api_version: "2024-10-21"}
routes:
  - model: big
    candidates:
      - {provider: oa, profile: big-oa}
      - {provider: az, profile: big-az}
  - {model: small, provider: oa}
tenants:
  - id: batchco
    allowed_classes: [batch, agent]
    max_priority: 0
    teams:
      - {id: etl, max_priority: -10}
      - {id: web}
    keys:
      - {id: batch-key, class: batch, priority: -20, allowed_models: [big], sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
      - {id: free-key, class: batch, sha256: 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752}
  - id: acme
    keys:
      - {id: k, sha256: fd61a03af4f77d870fc21e05e7e80678095c92d808cfb3b5c279ee04c74aca13}
LEDGER`

const entitledLedger = `ledger:
  scopes:
    - {name: s1, buckets: [{level: key, id: "*", dimension: requests, capacity: 600}]}
`

// TestLedgerEntitlements: the ledger document the gateway publishes
// carries its tenants', teams' and keys' entitlements, the allowed models
// as their candidates' profiles, replacing what the document had; the
// ledger accepts it.
func TestLedgerEntitlements(t *testing.T) {
	stale := entitledLedger + `  entitlements: [{tenant: gone, max_priority: 1}]
`
	c, err := config.Load(strings.NewReader(strings.Replace(entitledYAML, "LEDGER", stale, 1)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.LedgerEntitlements()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `[{"tenant":"batchco","allowed_classes":["batch","agent"],"max_priority":0},` +
		`{"tenant":"batchco","team":"etl","max_priority":-10},` +
		`{"tenant":"batchco","key":"batch-key","allowed_profiles":["big-az","big-oa"]}]`
	if string(b) != want {
		t.Fatalf("entitlements\n %s\nwant\n %s", b, want)
	}
	if _, err := ledger.ParseConfig(c.LedgerJSON()); err != nil {
		t.Fatalf("the ledger refuses the published document: %v", err)
	}
	// The admin API's overlay re-derives them from its tenants (the
	// document it passes in carries the previous ones).
	tenants := c.Tenants
	tenants[0].Entitlement.AllowedClasses = []string{"batch"}
	o, err := c.WithAdmission(tenants, c.LedgerJSON())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := o.LedgerEntitlements(); len(got) != 3 || len(got[0].AllowedClasses) != 1 {
		t.Fatalf("overlay entitlements %+v", got)
	}
}

// Two keys of one tenant with one id and an entitlement each cannot be
// told apart by the ledger (events carry the key id): a config problem.
func TestLedgerEntitlementsDuplicateKeyID(t *testing.T) {
	y := strings.Replace(entitledYAML, "{id: free-key, class: batch,", "{id: batch-key, class: batch, priority: -30, max_priority: -30,", 1)
	_, err := config.Load(strings.NewReader(strings.Replace(y, "LEDGER", entitledLedger, 1)))
	var ve *config.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || !strings.Contains(ve.Problems[0].String(), `tenants[0].keys[1].id: "batch-key" is also keys[0]'s id`) {
		t.Fatalf("got %v", err)
	}
}
