package sim

import (
	"slices"
	"strings"
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

// TestDialectsFollowKinds: the dialects, registered each by its own file,
// are listed in the order of schemas.ProviderKinds, and the list the
// config's errors want is theirs ("a, b or c").
func TestDialectsFollowKinds(t *testing.T) {
	var want []string
	for _, k := range schemas.ProviderKinds {
		if dialectOf(string(k)) != nil {
			want = append(want, string(k))
		}
	}
	if !slices.Equal(providerNames, want) || len(dialects) != len(want) {
		t.Errorf("providers %v, want %v", providerNames, want)
	}
	n := len(want)
	if got, w := providerList(), strings.Join(want[:n-1], ", ")+" or "+want[n-1]; got != w {
		t.Errorf("providerList %q, want %q", got, w)
	}
}
