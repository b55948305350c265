package grafana

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/analytics"
)

var update = flag.Bool("update", false, "rewrite calibration.json")

// TestCalibrationDashboardIsGenerated: calibration.json is what
// Calibration("sluice") produces from the embedded metric queries, so the
// dashboard and `sluice report` never run different SQL.
func TestCalibrationDashboardIsGenerated(t *testing.T) {
	b, err := Calibration("sluice")
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("calibration.json", b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(b, CalibrationJSON) {
		t.Fatal("calibration.json is stale: go test ./dashboards/grafana -run Calibration -update")
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RawSQL string `json:"rawSql"`
			} `json:"targets"`
			Datasource struct{ Type string } `json:"datasource"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(CalibrationJSON, &d); err != nil {
		t.Fatal(err)
	}
	qs, _ := analytics.Queries()
	seen := map[string]bool{}
	for _, p := range d.Panels {
		seen[p.Title] = true
		if p.Datasource.Type != "grafana-clickhouse-datasource" || len(p.Targets) != 1 {
			t.Errorf("panel %s: datasource %q, %d targets", p.Title, p.Datasource.Type, len(p.Targets))
			continue
		}
		if s := p.Targets[0].RawSQL; strings.Contains(s, "{") && !strings.Contains(s, "${") {
			t.Errorf("panel %s: unrendered placeholder in %q", p.Title, s)
		}
	}
	for _, q := range qs {
		if !seen[q.Name] {
			t.Errorf("no panel for query %s", q.Name)
		}
	}
}
