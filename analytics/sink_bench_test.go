package analytics

import (
	"testing"
	"time"

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
			cols.reset()
		}
		row, _ := RowFromRecord(r.Value, RecordPos{Topic: "t", Partition: r.Partition, Offset: int64(i), LogTime: time.UnixMilli(r.LogTimeMs)})
		cols.add(&row)
	}
}
