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

// TestExcludesCacheReads: only a dialect whose handlers cache prompts
// (Anthropic's) leaves cache reads out, and only when not told to count
// them.
func TestExcludesCacheReads(t *testing.T) {
	for _, name := range providerNames {
		for _, count := range []bool{false, true} {
			want := name == Anthropic && !count
			if got := ExcludesCacheReads(name, ProviderConfig{CountCacheReads: count}); got != want {
				t.Errorf("%s, count_cache_reads %v: excludes %v, want %v", name, count, got, want)
			}
		}
	}
	if ExcludesCacheReads("mistral", ProviderConfig{}) {
		t.Error("a provider the simulator does not speak excludes cache reads")
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
