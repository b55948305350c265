package sim

import "testing"

// TestParseConfigListsEveryProblem: the simulator's config reports every
// problem at once, each at its line:column and path (internal/problems,
// as every Sluice config), not only the first. The providers it wants are
// those with a dialect (providerList), so that adding one leaves the test
// as it is.
func TestParseConfigListsEveryProblem(t *testing.T) {
	_, err := ParseConfig([]byte("providers:\n  openai:\n    rpm: -1\n    window_mode: sliding\n  mistral: {rpm: 1}\noutput: {min: 0.9, max: 0.1}\nlatency: {ttft: soon}\n"))
	want := `sim config: 5 problems
3:10: providers.openai.rpm: -1: limits must be >= 0 (0 = not enforced)
4:18: providers.openai.window_mode: must be "bucket" or "fixed", got "sliding"
5:12: providers.mistral: unknown provider "mistral" (want ` + providerList() + `)
6:9: output: output spread must satisfy 0 <= min <= max <= 1, got [0.9, 0.1]
7:17: latency.ttft: invalid duration "soon" (want e.g. "1s", "250ms")`
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
}
