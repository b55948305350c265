package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
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
	Inserts      int     `json:"inserts"` // batches inserting at once (SinkConfig.Inserts)
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// SteadyEventsPerSec leaves out the group join and the first batch:
	// rows inserted after the first batch ÷ time since it.
	SteadyEventsPerSec float64 `json:"steady_events_per_sec"`
	Batches            float64 `json:"batches"`
	ClickHouse         string  `json:"clickhouse"`
	// Reference is clickhouse-client inserting the same rows (the sink's
	// columns, dumped from the run's table in Native format) into a fresh
	// database with the same schema and views, in blocks of the sink's
	// batch size, in the same run: the fixed yardstick the sink's rate is
	// a ratio of, so a loaded machine slows both.
	Reference *SinkReference `json:"reference"`
	// Ratio is EventsPerSec ÷ Reference.EventsPerSec (1 = as fast as the
	// server takes the rows from its own client).
	Ratio float64 `json:"ratio"`
	// Load is the machine's load average when the run started and ended.
	Load LoadAverage `json:"load_average"`
}

// SinkReference is the clickhouse-client insert of the sink bench's rows.
type SinkReference struct {
	Command      string  `json:"command"`
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
}

// LoadAverage is /proc/loadavg's 1-minute figure at the start and end of
// a benchmark (and the cores it is relative to): the machine is shared,
// and a figure without its load says little.
type LoadAverage struct {
	Start float64 `json:"start_1m"`
	End   float64 `json:"end_1m"`
	Cores int     `json:"cores"`
}

// loadAvg1 is the 1-minute load average (0 where /proc/loadavg is absent).
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

// clickhouseClient runs clickhouse-client (env SLUICE_CLICKHOUSE_CLIENT,
// else from PATH) against the native address addr with args, stdin in
// and stdout to out; the error carries its stderr.
func clickhouseClient(ctx context.Context, addr string, in io.Reader, out io.Writer, args ...string) error {
	bin := envOr("SLUICE_CLICKHOUSE_CLIENT", "clickhouse-client")
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("clickhouse address %q: %w", addr, err)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--host", host, "--port", port}, args...)...)
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s (the reference; set SLUICE_CLICKHOUSE_CLIENT): %w: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// sinkReference dumps db.events (the sink's columns) and inserts the dump
// into a fresh migrated database through clickhouse-client, timing the
// insert alone.
func sinkReference(ctx context.Context, conn driver.Conn, chAddr, db string, batch int) (*SinkReference, error) {
	cols := strings.Join(analytics.EventColumns(), ", ")
	dir, err := os.MkdirTemp("", "sluice-bench-sink-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	dump := filepath.Join(dir, "events.native")
	f, err := os.Create(dump)
	if err != nil {
		return nil, err
	}
	err = clickhouseClient(ctx, chAddr, nil, f, "--query", "SELECT "+cols+" FROM `"+db+"`.events FORMAT Native")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	ref := "sluice_bench_ref_" + benchSuffix()
	defer conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+ref+"`")
	if _, err := analytics.Migrate(ctx, conn, ref); err != nil {
		return nil, err
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM `"+db+"`.events").Scan(&n); err != nil {
		return nil, err
	}
	in, err := os.Open(dump)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	args := []string{"--max_insert_block_size", strconv.Itoa(batch), "--query", "INSERT INTO `" + ref + "`.events (" + cols + ") FORMAT Native"}
	t0 := time.Now()
	if err := clickhouseClient(ctx, chAddr, in, io.Discard, args...); err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	return &SinkReference{Command: "clickhouse-client " + strings.Join(args[:2], " ") + " --query 'INSERT INTO <fresh db>.events (<sink columns>) FORMAT Native' < <the run's rows>",
		Events: int(n), Seconds: secs, EventsPerSec: float64(n) / secs}, nil
}

// benchSink times the analytics sink over n events produced beforehand to
// a fresh two-partition topic and database, both dropped at the end, and
// compares it with clickhouse-client inserting the same rows.
func benchSink(ctx context.Context, brokers []string, chAddr string, n, batch, inserts int) (*SinkBench, error) {
	if n <= 0 {
		n = 1_000_000
	}
	if batch <= 0 {
		batch = analytics.DefaultBatchSize
	}
	if inserts <= 0 {
		inserts = analytics.DefaultSinkInserts
	}
	load := LoadAverage{Start: loadAvg1(), Cores: runtime.NumCPU()}
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
	if err := produceSinkEvents(ctx, cl, topic, n); err != nil {
		return nil, err
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
			ClickHouseAddr: chAddr, Database: db, BatchSize: batch, Inserts: inserts, FlushInterval: time.Second, Registerer: reg},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	firstAt, firstRows, err := waitSinkInserted(reg, done, n)
	if err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	res := &SinkBench{Events: n, Partitions: 2, BatchSize: batch, Inserts: inserts, Seconds: secs, EventsPerSec: float64(n) / secs,
		Batches: gathered(reg, "sluice_sink_batches_inserted_total"), ClickHouse: chAddr}
	if d := time.Since(firstAt).Seconds(); d > 0 {
		res.SteadyEventsPerSec = (float64(n) - firstRows) / d
	}
	cancel()
	<-done
	if res.Reference, err = sinkReference(ctx, conn, chAddr, db, batch); err != nil {
		return nil, err
	}
	res.Ratio = res.EventsPerSec / res.Reference.EventsPerSec
	load.End = loadAvg1()
	res.Load = load
	return res, nil
}

// produceSinkEvents writes n synthetic events to topic before the sink
// starts, so that the bench times the sink alone. Live traffic moves
// forward in time: each batch is its own hour, so an insert lands in one
// day partition, as the sink's do.
func produceSinkEvents(ctx context.Context, cl *kgo.Client, topic string, n int) error {
	produced := 0
	for b := 1; produced < n; b++ {
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
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

// waitSinkInserted polls the sink's inserted-rows counter every 20 ms until
// it reaches n, reporting progress every 2 s. It returns when the first
// rows landed and how many, from which the steady rate (without the
// sink's start-up) is figured; a sink that stops early is an error.
func waitSinkInserted(reg *prometheus.Registry, done <-chan error, n int) (firstAt time.Time, firstRows float64, err error) {
	last := time.Now()
	for {
		ins := gathered(reg, "sluice_sink_rows_inserted_total")
		if ins > 0 && firstAt.IsZero() {
			firstAt, firstRows = time.Now(), ins
		}
		if ins >= float64(n) {
			return firstAt, firstRows, nil
		}
		select {
		case err := <-done:
			return firstAt, firstRows, fmt.Errorf("sink stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(last) > 2*time.Second {
			fmt.Fprintf(os.Stderr, "bench sink: %.0f of %d inserted\n", ins, n)
			last = time.Now()
		}
	}
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
	// Rounds alternate the report and its reference; ReportSeconds and
	// ReferenceSeconds are the best of each (the machine is shared: the
	// best round is the one least slowed by others), the lists every
	// round's.
	Rounds        int       `json:"rounds"`
	ReportRuns    []float64 `json:"report_seconds_runs"`
	ReferenceRuns []float64 `json:"reference_seconds_runs"`
	// ReferenceSeconds is the same SQL (report.SQL: the snapshot of the
	// two weeks, then each week's queries, the weeks side by side)
	// through clickhouse-client in the same run: the fixed yardstick.
	ReferenceSeconds float64 `json:"reference_seconds"`
	Reference        string  `json:"reference"`
	// Ratio is ReportSeconds ÷ ReferenceSeconds (1 = the report costs
	// what its SQL costs the server).
	Ratio float64     `json:"ratio"`
	Load  LoadAverage `json:"load_average"`
}

// reportReference runs the report's SQL over week through
// clickhouse-client as Build runs it: the snapshot statements at once,
// then the two weeks side by side, then the drops.
func reportReference(ctx context.Context, conn driver.Conn, chAddr, db string, week analytics.Range) (float64, error) {
	sc, err := report.SQL(ctx, conn, db, week)
	if err != nil {
		return 0, err
	}
	parallel := func(scripts []string) error {
		errs := make([]error, len(scripts))
		var wg sync.WaitGroup
		for i, q := range scripts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = clickhouseClient(ctx, chAddr, nil, io.Discard, "--multiquery", "--query", q)
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	t0 := time.Now()
	err = parallel(sc.Setup)
	if err == nil {
		err = parallel([]string{strings.Join(sc.Weeks[0], ";\n"), strings.Join(sc.Weeks[1], ";\n")})
	}
	secs := time.Since(t0).Seconds()
	if derr := clickhouseClient(context.Background(), chAddr, nil, io.Discard, "--multiquery", "--query", strings.Join(sc.Teardown, ";\n")); err == nil {
		err = derr
	}
	return secs, err
}

func benchReport(ctx context.Context, chAddr string, n int, keep bool, rounds int, reuse string) (*ReportBench, error) {
	if n <= 0 {
		n = 10_000_000
	}
	if rounds <= 0 {
		rounds = 2
	}
	load := LoadAverage{Start: loadAvg1(), Cores: runtime.NumCPU()}
	db := "sluice_bench_" + benchSuffix()
	if reuse != "" {
		db, keep = reuse, true
	}
	conn, err := analytics.Open(ctx, chAddr, "")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	week := report.LastFullWeek(time.UnixMilli(synth.DefaultStartMs).AddDate(0, 0, 7))
	t0 := time.Now()
	events, requests := 0, 0
	if reuse != "" {
		// A database an earlier --keep run loaded: measure again without
		// loading (the figures of one run stay comparable with each other).
		var ev, rq uint64
		if err := conn.QueryRow(ctx, "SELECT count(), uniqExactIf(request_id, request_id != '') FROM `"+db+"`.events").Scan(&ev, &rq); err != nil {
			return nil, fmt.Errorf("--database %s: %w", db, err)
		}
		events, requests = int(ev), int(rq)
	} else {
		if !keep {
			defer conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`")
		}
		if events, requests, err = loadReportBench(ctx, conn, db, week, n); err != nil {
			return nil, err
		}
	}
	loadSecs := time.Since(t0).Seconds()
	res := &ReportBench{Events: events, Requests: requests, LoadSeconds: loadSecs, ClickHouse: chAddr, Rounds: rounds,
		Reference: "clickhouse-client --multiquery: report.SQL over the same week (snapshot statements at once, then the two weeks side by side)"}
	for i := 0; i < rounds; i++ {
		t1 := time.Now()
		src := report.NewClickHouse(conn, db)
		rep, err := report.Build(ctx, src, week, report.Options{Progress: os.Stderr})
		src.Close()
		if err != nil {
			return nil, err
		}
		res.ReportRuns = append(res.ReportRuns, time.Since(t1).Seconds())
		res.Queries, res.Recommendations = 2*len(rep.Sections), len(rep.Recommendations)
		secs, err := reportReference(ctx, conn, chAddr, db, week)
		if err != nil {
			return nil, err
		}
		res.ReferenceRuns = append(res.ReferenceRuns, secs)
		fmt.Fprintf(os.Stderr, "bench report: round %d: report %.2fs, reference %.2fs (load %.1f)\n", i+1, res.ReportRuns[i], secs, loadAvg1())
	}
	res.ReportSeconds, res.ReferenceSeconds = slices.Min(res.ReportRuns), slices.Min(res.ReferenceRuns)
	res.Ratio = res.ReportSeconds / res.ReferenceSeconds
	load.End = loadAvg1()
	res.Load = load
	if keep {
		res.Database = db
	}
	return res, nil
}

// loadReportBench fills db with n synthetic events, half in week and half
// in the week before, and returns the events and requests written.
func loadReportBench(ctx context.Context, conn driver.Conn, db string, week analytics.Range, n int) (events, requests int, err error) {
	if _, err := analytics.Migrate(ctx, conn, db); err != nil {
		return 0, 0, err
	}
	const perBatch = 100_000 // requests per generated batch (~520k events)
	t0 := time.Now()
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
		// Inserts of 25,000 rows: on a loaded machine one of 100,000 (the
		// sink's batch) can outlast the driver's send deadline.
		for i := 0; i < len(rows); i += 25_000 {
			if err := analytics.InsertRows(ctx, conn, db, rows[i:min(i+25_000, len(rows))]); err != nil {
				return 0, 0, err
			}
		}
		fmt.Fprintf(os.Stderr, "bench report: loaded %d of %d events (%.0fs)\n", events, n, time.Since(t0).Seconds())
	}
	return events, requests, nil
}
