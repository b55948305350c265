// Package grafana embeds Sluice's Grafana dashboards for its Prometheus
// metrics (sluice_gateway_*, sluice_ledger_*, sluice_sink_*), so tools can
// ship or provision them without reading files at run time.
package grafana

import _ "embed"

// Overview is the "Sluice — quota governor" dashboard (sluice.json): import
// it in Grafana and pick a Prometheus data source.
//
//go:embed sluice.json
var Overview []byte
