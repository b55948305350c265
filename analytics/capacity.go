package analytics

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// CapacityRow is one bucket_capacity row: one bucket of a ConfigChanged's
// ledger document, so queries can relate stranded quota and refusals to the
// capacity in force without decoding base64 (18.16 cannot).
type CapacityRow struct {
	Scope, Bucket, Dimension string
	Capacity                 int64
	Refill                   string
	PeriodMs, WindowMs       int64
	ConfigVersion, Source    string
	EventID                  string
	LogTimeMs                uint64
	ProducedAt               time.Time
}

var capacityColumns = []string{
	"scope", "bucket", "dimension", "capacity", "refill", "period_ms", "window_ms",
	"config_version", "source", "event_id", "log_time_ms", "produced_at",
}

func insertCapacitySQL(database string) string {
	return "INSERT INTO " + quoteIdent(database) + ".bucket_capacity (" + strings.Join(capacityColumns, ", ") + ")"
}

func (c *CapacityRow) values() []any {
	return []any{c.Scope, c.Bucket, c.Dimension, c.Capacity, c.Refill, c.PeriodMs, c.WindowMs,
		c.ConfigVersion, c.Source, c.EventID, c.LogTimeMs, c.ProducedAt}
}

// ledgerDoc is the part of ledger.Config that analytics reads. It is
// declared here rather than imported so that a ledger refactor cannot
// change what the sink stores; unknown fields are ignored.
type ledgerDoc struct {
	Scopes []struct {
		Name    string `json:"name"`
		Buckets []struct {
			Level     string `json:"level"`
			ID        string `json:"id"`
			Dimension string `json:"dimension"`
			Refill    string `json:"refill"`
			Capacity  int64  `json:"capacity"`
			PeriodMs  int64  `json:"period_ms"`
			WindowMs  int64  `json:"window_ms"`
		} `json:"buckets"`
	} `json:"scopes"`
}

// CapacityRows expands a ConfigChanged event into its bucket rows. Other
// events, and a ledger document that does not parse, give none.
func CapacityRows(row *Row, e *schemas.Event) []CapacityRow {
	if e.ConfigChanged == nil {
		return nil
	}
	var doc ledgerDoc
	if json.Unmarshal(e.ConfigChanged.Ledger, &doc) != nil {
		return nil
	}
	var out []CapacityRow
	for _, sc := range doc.Scopes {
		for _, b := range sc.Buckets {
			out = append(out, CapacityRow{
				Scope: sc.Name, Bucket: b.Level + ":" + b.ID, Dimension: b.Dimension,
				Capacity: b.Capacity, Refill: b.Refill, PeriodMs: b.PeriodMs, WindowMs: b.WindowMs,
				ConfigVersion: e.ConfigChanged.ConfigVersion, Source: e.ConfigChanged.Source,
				EventID: e.ID, LogTimeMs: row.LogTimeMs, ProducedAt: row.ProducedAt,
			})
		}
	}
	return out
}
