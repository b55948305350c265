package provider

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestAdaptersCoverEveryKind: every kind the configuration admits has its
// adapter registered, so none falls back to OpenAI's by omission, and every
// adapter that translates an API also serves it.
func TestAdaptersCoverEveryKind(t *testing.T) {
	for _, k := range schemas.ProviderKinds {
		ad, ok := adapters[k]
		if !ok {
			t.Errorf("kind %s: no adapter in adapters", k)
			continue
		}
		for _, a := range []API{APIChat, APIEmbeddings, APIMessages, APIResponses, APICompletions} {
			if ad.translated(a) && !ad.serves(a) {
				t.Errorf("kind %s: translates %s but does not serve it", k, a)
			}
		}
	}
	if len(adapters) != len(schemas.ProviderKinds) {
		t.Errorf("%d adapters for %d kinds", len(adapters), len(schemas.ProviderKinds))
	}
}
