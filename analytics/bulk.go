package analytics

import (
	"context"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// InsertRows writes rows (and the bucket capacities of their ConfigChanged
// events) into database with the sink's insert, bypassing Kafka: for
// benchmarks and backfills. Use RunSink for live data.
func InsertRows(ctx context.Context, conn driver.Conn, database string, rows []Row) error {
	ins := &chInserter{conn: conn, sql: insertEventsSQL(database), capsSQL: insertCapacitySQL(database)}
	ps := make([]pending, len(rows))
	for i := range rows {
		ps[i].row = rows[i]
	}
	return ins.insert(ctx, ps)
}
