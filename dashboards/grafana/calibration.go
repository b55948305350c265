package grafana

import (
	"encoding/json"

	"github.com/sluice-dev/sluice/analytics"
)

// CalibrationUID is the uid of the calibration dashboard.
const CalibrationUID = "sluice-calibration"

// Grafana's ClickHouse data source (grafana-clickhouse-datasource) macros
// for the dashboard's time range, as unix seconds.
const (
	fromExpr = "toUInt32($__fromTime)"
	toExpr   = "toUInt32($__toTime)"
)

// Calibration builds the "Sluice — calibration" dashboard: one table per
// metric query of package analytics (the same .sql files `sluice report`
// runs, over the dashboard's time range), plus hourly time series from the
// hourly rollup. calibration.json is its output; a test keeps them equal.
func Calibration(database string) ([]byte, error) {
	qs, err := analytics.Queries()
	if err != nil {
		return nil, err
	}
	ds := map[string]string{"type": "grafana-clickhouse-datasource", "uid": "${datasource}"}
	var panels []map[string]any
	id := 1
	y := 0
	db := "`" + database + "`"
	series := []struct{ title, desc, sql string }{
		{"Reservations, grants and refusals per hour", "From the hourly rollup (counts inserted rows: a redelivered event counts again).",
			"SELECT hour AS time, countIfMerge(n_reserves) AS reserves, countIfMerge(n_granted) AS granted, countIfMerge(n_queued) AS queued, countIfMerge(n_denied) AS denied FROM " + db + ".hourly WHERE $__timeFilter(hour) GROUP BY time ORDER BY time"},
		{"Provider 429s and upstream attempts per hour", "Provider 429s against dispatched attempts (hourly rollup).",
			"SELECT hour AS time, countIfMerge(n_dispatched) AS upstream_attempts, countIfMerge(n_provider_429) AS provider_429 FROM " + db + ".hourly WHERE $__timeFilter(hour) GROUP BY time ORDER BY time"},
		{"Reserved vs actual output tokens per hour", "Estimated and actual output tokens of reconciled attempts (hourly rollup): the gap is what calibration removes.",
			"SELECT hour AS time, sumIfMerge(sum_est_output_tokens) AS reserved_output, sumIfMerge(sum_output_tokens) AS actual_output FROM " + db + ".hourly WHERE $__timeFilter(hour) GROUP BY time ORDER BY time"},
	}
	for i, s := range series {
		panels = append(panels, map[string]any{
			"id": id, "type": "timeseries", "title": s.title, "description": s.desc, "datasource": ds,
			"gridPos": map[string]int{"h": 8, "w": 8, "x": 8 * i, "y": y},
			"targets": []map[string]any{{"refId": "A", "datasource": ds, "editorType": "sql", "format": 0, "rawSql": s.sql, "queryType": "timeseries"}},
		})
		id++
	}
	y += 8
	for i, q := range qs {
		panels = append(panels, map[string]any{
			"id": id, "type": "table", "title": q.Name, "description": q.Doc, "datasource": ds,
			"gridPos": map[string]int{"h": 9, "w": 12, "x": 12 * (i % 2), "y": y + 9*(i/2)},
			"targets": []map[string]any{{"refId": "A", "datasource": ds, "editorType": "sql", "format": 1,
				"rawSql": q.RenderExpr(database, fromExpr, toExpr), "queryType": "table"}},
		})
		id++
	}
	d := map[string]any{
		"title": "Sluice — calibration", "uid": CalibrationUID, "tags": []string{"sluice", "clickhouse"},
		"timezone": "utc", "schemaVersion": 39, "version": 1, "editable": true,
		"time": map[string]string{"from": "now-7d", "to": "now"},
		"templating": map[string]any{"list": []map[string]any{{
			"name": "datasource", "type": "datasource", "query": "grafana-clickhouse-datasource", "label": "ClickHouse", "current": map[string]any{}, "hide": 0,
		}}},
		"annotations": map[string]any{"list": []any{}},
		"panels":      panels,
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
