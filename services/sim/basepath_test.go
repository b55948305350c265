package sim

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestBasePathOfEveryKind: the simulator has a dialect, and so an
// endpoint, for every provider kind the gateway admits.
func TestBasePathOfEveryKind(t *testing.T) {
	for _, k := range schemas.ProviderKinds {
		if p, ok := BasePath(k); !ok || p == "" || p[0] != '/' {
			t.Errorf("kind %s: base path %q, %v", k, p, ok)
		}
	}
	if _, ok := BasePath("mistral"); ok {
		t.Error("a base path for a kind the simulator does not speak")
	}
}
