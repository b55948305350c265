package sim

import (
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/internal/problems"
)

// FuzzParseConfig: any text is a config that validates or a refusal that
// names at least one problem; never a panic.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("providers:\n  openai:\n    rpm: 5\n    window: 500ms\nstorms:\n  - {kind: \"503\", start: 1m, end: 2m}\n"))
	f.Add([]byte("providers:\n  openai:\n    rmp: 5\n  mistral: {}\nlatency: {ttft: soon}\n"))
	f.Add([]byte(`{"providers":{"anthropic":{"itpm":10,"model_limits":{"claude-opus-4":{"rpm":1}}}},"seed":3}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err == nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("parsed config does not validate: %v", err)
			}
			return
		}
		var pl *problems.List
		if !errors.As(err, &pl) || pl.Len() == 0 {
			t.Fatalf("refusal without its problems: %v", err)
		}
	})
}
