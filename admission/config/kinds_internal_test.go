package config

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestLoadWithoutAdaptersIsLoud: a program that loads a config without
// admission/provider linked in has no kind's fields registered, and Load
// would check none (an azure provider without its required api_version
// loaded): it refuses the provider instead, naming the package to link.
func TestLoadWithoutAdaptersIsLoud(t *testing.T) {
	saved := kindFieldsOf
	kindFieldsOf = map[schemas.ProviderKind]KindFields{}
	defer func() { kindFieldsOf = saved }()
	_, err := Load(strings.NewReader(`providers:
  - {name: p, kind: azure, scope: s, base_url: "http://127.0.0.1:1/v1", deployment: d}
routes:
  - {model: m, provider: p}
tenants:
  - id: t
    keys:
      - {id: k, sha256: 0000000000000000000000000000000000000000000000000000000000000000}
ledger:
  scopes:
    - name: s
      buckets:
        - {level: key, id: "*", dimension: requests, capacity: 600}
`))
	if err == nil || !strings.Contains(err.Error(), "admission/provider") {
		t.Fatalf("load without the adapters linked: %v, want refused naming admission/provider", err)
	}
}
