package analytics

import (
	"reflect"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/sluice-dev/sluice/analytics/synth"
)

// BenchmarkSinkRows measures the sink's own CPU per event, without Kafka
// or ClickHouse: decode a recorded-like event (synth) into a Row and add it
// to the insert's columns. Profile with -cpuprofile.
func BenchmarkSinkRows(b *testing.B) {
	recs := synth.Generate(synth.Options{Seed: 1, Requests: 5000})
	var cols eventCols
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := &recs[i%len(recs)]
		if i%len(recs) == 0 {
			cols.reset(len(recs))
		}
		row, _ := RowFromRecord(r.Value, RecordPos{Topic: "t", Partition: r.Partition, Offset: int64(i), LogTime: time.UnixMilli(r.LogTimeMs)})
		cols.add(&row)
	}
}

// BenchmarkDriverColumns measures the client-side fill of one 100,000-row
// batch's driver columns from the sink's columns (what appendTo does after
// PrepareBatch), with and without reserving them first (reserveColumn).
func BenchmarkDriverColumns(b *testing.B) {
	const n = 100_000
	recs := synth.Generate(synth.Options{Seed: 1, Requests: n/5 + 1})
	var cols eventCols
	for i := 0; i < n; i++ {
		r := &recs[i%len(recs)]
		row, _ := RowFromRecord(r.Value, RecordPos{Topic: "t", Partition: r.Partition, Offset: int64(i), LogTime: time.UnixMilli(r.LogTimeMs)})
		cols.add(&row)
	}
	sc := &column.ServerContext{Timezone: time.UTC}
	slices := cols.slices()
	for _, reserve := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "reserved"}[reserve], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for i, s := range slices {
					col, err := chTypeOf[reflect.TypeOf(s)].Column(eventColumns[i], sc)
					if err != nil {
						b.Fatal(err)
					}
					if reserve {
						rows, bytes := colSize(s)
						reserveColumn(col, rows, bytes)
					}
					if _, err := col.Append(s); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/event")
		})
	}
}
