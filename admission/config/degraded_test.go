package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
)

// TestDegradedConfig: degraded mode is on by default at share 0.5 and
// 30 s, batch excluded; every bad knob is reported with its location.
func TestDegradedConfig(t *testing.T) {
	routes := `  - {model: m, provider: oa}`
	c, err := config.Load(strings.NewReader(doc(routes, "")))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Degraded
	if !d.On() || d.Share != 0.5 || d.MaxMs != 30_000 || d.Gateways != 0 {
		t.Errorf("defaults = %+v, want on, 0.5, 30000, 0", d)
	}
	if d.Admits("batch") || !d.Admits("interactive") {
		t.Errorf("by default batch must be excluded and interactive admitted")
	}
	c, err = config.Load(strings.NewReader("degraded: {enabled: false}\n" + doc(routes, "")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Degraded.On() || c.Degraded.Admits("interactive") {
		t.Error("enabled: false left degraded mode on")
	}
	c, err = config.Load(strings.NewReader("degraded: {exclude_classes: []}\n" + doc(routes, "")))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Degraded.Admits("batch") {
		t.Error("exclude_classes: [] still excludes batch")
	}
	_, err = config.Load(strings.NewReader("degraded: {share: 1.5, max_ms: 900000, gateways: -1, exclude_classes: [gold]}\n" + doc(routes, "")))
	var ve *config.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err %v, want a ValidationError", err)
	}
	want := []string{"degraded.share: 1.5 out of (0, 1]", "degraded.max_ms: 900000 out of [1, 300000]",
		"degraded.gateways: -1 out of [0, 10000]", `degraded.exclude_classes: "gold" is not a class of the ledger document`}
	if len(ve.Problems) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d", err, len(want))
	}
	for i, w := range want {
		if !strings.Contains(ve.Problems[i].String(), w) {
			t.Errorf("problem %d = %q, want %q", i, ve.Problems[i].String(), w)
		}
	}
}
