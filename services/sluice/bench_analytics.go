package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/analytics"
	"github.com/sluice-dev/sluice/analytics/report"
	"github.com/sluice-dev/sluice/analytics/synth"
	"github.com/sluice-dev/sluice/internal/bus"
)

func benchSuffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// SinkBench is `sluice bench sink`: events/s from a Kafka topic through
// the sink (decode, row mapping, batched insert with the materialized
// views, offset commit) into ClickHouse.
type SinkBench struct {
	Events       int     `json:"events"`
	Partitions   int     `json:"partitions"`
	BatchSize    int     `json:"batch_size"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// SteadyEventsPerSec leaves out the group join and the first batch:
	// rows inserted after the first batch ÷ time since it.
	SteadyEventsPerSec float64 `json:"steady_events_per_sec"`
	Batches            float64 `json:"batches"`
	ClickHouse         string  `json:"clickhouse"`
}

func benchSink(ctx context.Context, brokers []string, chAddr string, n, batch int) (*SinkBench, error) {
	if n <= 0 {
		n = 1_000_000
	}
	if batch <= 0 {
		batch = analytics.DefaultBatchSize
	}
	db, topic := "sluice_bench_"+benchSuffix(), "sluice.bench.sink."+benchSuffix()
	conn, err := analytics.Open(ctx, chAddr, "")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	defer conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`")
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}
	defer adm.DeleteTopics(context.Background(), topic)
	fmt.Fprintf(os.Stderr, "bench sink: producing %d events to %s…\n", n, topic)
	produced := 0
	for b := 1; produced < n; b++ {
		// Live traffic moves forward in time: each batch is its own hour,
		// so an insert lands in one day partition, as the sink's do.
		recs := synth.Generate(synth.Options{Seed: uint64(b), Batch: b, Requests: 20000,
			StartMs: synth.DefaultStartMs + int64(b)*3_600_000, SpanMs: 3_600_000})
		var krs []*kgo.Record
		for _, r := range recs {
			if produced == n {
				break
			}
			krs = append(krs, &kgo.Record{Topic: topic, Partition: r.Partition, Value: r.Value, Timestamp: time.UnixMilli(r.LogTimeMs)})
			produced++
		}
		if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
			return nil, fmt.Errorf("produce: %w", err)
		}
	}
	// Migrate first so the measurement is the steady state.
	if _, err := analytics.Migrate(ctx, conn, db); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	t0 := time.Now()
	go func() {
		done <- analytics.RunSink(sctx, analytics.SinkConfig{Brokers: brokers, Topics: []string{topic}, Group: "bench-" + benchSuffix(),
			ClickHouseAddr: chAddr, Database: db, BatchSize: batch, FlushInterval: time.Second, Registerer: reg},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	last := time.Now()
	var firstAt time.Time
	var firstRows float64
	for {
		ins := gathered(reg, "sluice_sink_rows_inserted_total")
		if ins > 0 && firstAt.IsZero() {
			firstAt, firstRows = time.Now(), ins
		}
		if ins >= float64(n) {
			break
		}
		select {
		case err := <-done:
			return nil, fmt.Errorf("sink stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(last) > 2*time.Second {
			fmt.Fprintf(os.Stderr, "bench sink: %.0f of %d inserted\n", ins, n)
			last = time.Now()
		}
	}
	secs := time.Since(t0).Seconds()
	res := &SinkBench{Events: n, Partitions: 2, BatchSize: batch, Seconds: secs, EventsPerSec: float64(n) / secs,
		Batches: gathered(reg, "sluice_sink_batches_inserted_total"), ClickHouse: chAddr}
	if d := time.Since(firstAt).Seconds(); d > 0 {
		res.SteadyEventsPerSec = (float64(n) - firstRows) / d
	}
	cancel()
	<-done
	return res, nil
}

func gathered(reg *prometheus.Registry, name string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// ReportBench is `sluice bench report`: the weekly report over a database
// of N events (half in the report's week, half in the week before).
type ReportBench struct {
	Events          int     `json:"events"`
	Requests        int     `json:"requests"`
	LoadSeconds     float64 `json:"load_seconds"`
	ReportSeconds   float64 `json:"report_seconds"`
	Queries         int     `json:"queries"`
	Recommendations int     `json:"recommendations"`
	ClickHouse      string  `json:"clickhouse"`
	Database        string  `json:"database"`
}

func benchReport(ctx context.Context, chAddr string, n int, keep bool) (*ReportBench, error) {
	if n <= 0 {
		n = 10_000_000
	}
	db := "sluice_bench_" + benchSuffix()
	conn, err := analytics.Open(ctx, chAddr, "")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if !keep {
		defer conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`")
	}
	if _, err := analytics.Migrate(ctx, conn, db); err != nil {
		return nil, err
	}
	week := report.LastFullWeek(time.UnixMilli(synth.DefaultStartMs).AddDate(0, 0, 7))
	const perBatch = 100_000 // requests per generated batch (~520k events)
	t0 := time.Now()
	events, requests := 0, 0
	for b := 1; events < n; b++ {
		// Alternate the two weeks so both hold half.
		start := week.From
		if b%2 == 0 {
			start = week.From.AddDate(0, 0, -7)
		}
		recs := synth.Generate(synth.Options{Seed: uint64(b), Batch: b, Requests: perBatch, StartMs: start.UnixMilli()})
		rows := make([]analytics.Row, 0, len(recs))
		for i, r := range recs {
			if events == n {
				break
			}
			row, _ := analytics.RowFromRecord(r.Value, analytics.RecordPos{Topic: "bench", Partition: r.Partition, Offset: int64(i), LogTime: time.UnixMilli(r.LogTimeMs)})
			rows = append(rows, row)
			events++
		}
		requests += perBatch
		for i := 0; i < len(rows); i += 100_000 {
			if err := analytics.InsertRows(ctx, conn, db, rows[i:min(i+100_000, len(rows))]); err != nil {
				return nil, err
			}
		}
		fmt.Fprintf(os.Stderr, "bench report: loaded %d of %d events (%.0fs)\n", events, n, time.Since(t0).Seconds())
	}
	load := time.Since(t0).Seconds()
	t1 := time.Now()
	src := report.NewClickHouse(conn, db)
	defer src.Close()
	rep, err := report.Build(ctx, src, week, report.Options{Progress: os.Stderr})
	if err != nil {
		return nil, err
	}
	res := &ReportBench{Events: events, Requests: requests, LoadSeconds: load, ReportSeconds: time.Since(t1).Seconds(),
		Queries: 2 * len(rep.Sections), Recommendations: len(rep.Recommendations), ClickHouse: chAddr}
	if keep {
		res.Database = db
	}
	return res, nil
}
