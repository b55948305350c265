package grafana

import (
	"encoding/json"
	"regexp"
	"testing"
)

// known are the metric families the services register (services/gateway,
// services/ledgerd, analytics sink). A renamed metric must be renamed here
// and in sluice.json.
var known = map[string]bool{
	"sluice_gateway_requests_total": true, "sluice_gateway_upstream_attempts_total": true,
	"sluice_gateway_events_dropped_total": true, "sluice_gateway_request_seconds_bucket": true,
	"sluice_ledger_decisions_total": true, "sluice_ledger_events_applied_total": true,
	"sluice_ledger_invalid_records_total": true, "sluice_ledger_transaction_aborts_total": true,
	"sluice_ledger_ticks_total": true, "sluice_ledger_snapshots_total": true,
	"sluice_ledger_partition_lag": true, "sluice_ledger_queue_depth": true,
	"sluice_ledger_queue_oldest_wait_seconds": true, "sluice_ledger_snapshot_age_seconds": true,
	"sluice_ledger_catchup_seconds_bucket": true,
	"sluice_sink_rows_inserted_total":      true, "sluice_sink_batches_inserted_total": true,
	"sluice_sink_insert_errors_total": true, "sluice_sink_invalid_records_total": true,
	"sluice_sink_commit_errors_total": true,
}

func TestOverviewDashboard(t *testing.T) {
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(Overview, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard %+v", d)
	}
	metric := regexp.MustCompile(`sluice_[a-z_]+`)
	ids := map[int]bool{}
	used := map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("duplicate panel id %d", p.ID)
		}
		ids[p.ID] = true
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metric.FindAllString(tg.Expr, -1) {
				if !known[m] {
					t.Errorf("panel %q queries unknown metric %s", p.Title, m)
				}
				used[m] = true
			}
		}
	}
	for m := range known {
		if !used[m] {
			t.Errorf("metric %s has no panel", m)
		}
	}
}
