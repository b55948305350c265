// Package analyticstest sends an event log through the real Kafka broker
// and the real sink into the real ClickHouse of `make up`, for integration
// tests outside package analytics (the report, the sluice command). A
// missing service fails the test; nothing is skipped.
package analyticstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/analytics"
	"github.com/sluice-dev/sluice/analytics/synth"
	"github.com/sluice-dev/sluice/internal/testenv"
)

func suffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// SinkFixture creates a fresh database and topic (dropped at cleanup),
// produces recs with their recorded log times (CreateTime), runs the sink
// until it has inserted every record, and returns a connection and the
// database name.
func SinkFixture(t testing.TB, recs []synth.Record) (driver.Conn, string) {
	t.Helper()
	ctx := context.Background()
	conn, err := analytics.Open(ctx, testenv.ClickHouseAddr(t), "")
	if err != nil {
		t.Fatalf("real ClickHouse required (make up): %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	db := "sluice_test_" + suffix()
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`") })

	brokers := strings.Split(testenv.KafkaBrokers(t), ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := "sluice.test.fixture." + suffix()
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil {
		t.Fatalf("real Kafka required at %s (make up): create topic: %v", testenv.KafkaBrokers(t), err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
	var krs []*kgo.Record
	for _, r := range recs {
		krs = append(krs, &kgo.Record{Topic: topic, Partition: r.Partition, Value: r.Value, Timestamp: time.UnixMilli(r.LogTimeMs)})
	}
	if err := cl.ProduceSync(ctx, krs...).FirstErr(); err != nil {
		t.Fatalf("produce fixture: %v", err)
	}

	reg := prometheus.NewRegistry()
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- analytics.RunSink(sctx, analytics.SinkConfig{Brokers: brokers, Topics: []string{topic}, Group: "fixture-" + suffix(),
			ClickHouseAddr: testenv.ClickHouseAddr(t), Database: db, BatchSize: 10000, FlushInterval: 200 * time.Millisecond,
			Registerer: reg}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sink: %v", err)
		}
	}()
	// The events rows are visible before the materialized views of the
	// same insert are written: wait for the sink's insert to return.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		inserted := counter(reg, "sluice_sink_rows_inserted_total")
		if inserted >= float64(len(recs)) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("sink stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sink inserted %v of %d records", inserted, len(recs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM `"+db+"`.events FINAL").Scan(&n); err != nil || n != uint64(len(recs)) {
		t.Fatalf("events FINAL = %d (%v), want %d", n, err, len(recs))
	}
	return conn, db
}

func counter(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
