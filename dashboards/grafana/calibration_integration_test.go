//go:build integration

package grafana

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/analytics/analyticstest"
	"github.com/sluice-dev/sluice/analytics/synth"
)

// TestIntegrationCalibrationPanelsRun runs every panel's SQL, with the
// ClickHouse data source's macros expanded as the plugin does, on the real
// ClickHouse over a generated week.
func TestIntegrationCalibrationPanelsRun(t *testing.T) {
	conn, db := analyticstest.SinkFixture(t, synth.Generate(synth.Options{Seed: 2, Requests: 500}))
	b, err := Calibration(db)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string                    `json:"title"`
			Targets []struct{ RawSQL string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	const from, to = "toDateTime(1795392000)", "toDateTime(1796083200)"
	for _, p := range d.Panels {
		s := p.Targets[0].RawSQL
		s = strings.ReplaceAll(s, "$__timeFilter(hour)", "hour >= "+from+" AND hour <= "+to)
		s = strings.ReplaceAll(s, "$__fromTime", from)
		s = strings.ReplaceAll(s, "$__toTime", to)
		rows, err := conn.Query(context.Background(), s)
		if err != nil {
			t.Errorf("panel %s: %v", p.Title, err)
			continue
		}
		n := 0
		for rows.Next() {
			n++
		}
		rows.Close()
		if n == 0 && p.Title != "budget_burn" { // the generated week has no cross-scope budgets
			t.Errorf("panel %s: no rows over the fixture", p.Title)
		}
	}
}
