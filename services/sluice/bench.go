package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
	"github.com/sluice-dev/sluice/services/ledgerd"
	"github.com/sluice-dev/sluice/services/loadtest"
)

func promHandler() http.Handler { return promhttp.Handler() }

// runBench runs the named benchmark and prints its result as JSON. Timings
// live here, never in tests.
func runBench(ctx context.Context, args []string) error {
	const usage = "usage: sluice bench ledger|ledger-kafka|hot|gateway|codec|sink|report|whatif [--json] (sluice bench NAME -h lists the flags)"
	if helpAsked(args) {
		return usageHelp(usage)
	}
	if len(args) == 0 {
		return errors.New(usage)
	}
	f, err := parseBenchFlags(args[0], args[1:])
	if err != nil {
		return err
	}
	var whatIfProfile io.Writer
	if f.cpuprofile != "" && args[0] == "whatif" {
		// The what-if bench profiles its measured run only.
		pf, err := os.Create(f.cpuprofile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pf.Close()
		whatIfProfile = pf
	} else if f.cpuprofile != "" && !(args[0] == "gateway" && f.process) {
		// gateway --process profiles the gateway process, not this one.
		stop, err := startCPUProfile(f.cpuprofile)
		if err != nil {
			return err
		}
		defer stop()
	}
	res, err := runNamedBench(ctx, args[0], f, whatIfProfile)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// benchFlags are the flags of every benchmark (each help text names the
// benchmarks that read it), parsed once for runNamedBench.
type benchFlags struct {
	n, events, conc, batch, rounds int
	inserts                        int
	brokers, chAddr, reuse, parts  string
	cpuprofile, sluiceBin          string
	dur, commitEvery               time.Duration
	keep, process, stages, floor   bool
	snapshotPlain                  bool
	rpm                            int64
	gwProcs                        int
}

// parseBenchFlags declares and parses the flags of sluice bench name.
func parseBenchFlags(name string, args []string) (benchFlags, error) {
	fs := newFlags("bench " + name)
	_ = fs.Bool("json", true, "print JSON (the only format)")
	n := fs.Int("n", 0, "iterations / events (0 = the benchmark's default)")
	events := fs.Int("events", 0, "whatif: inputs recorded and replayed (0 = 200000; -n works too)")
	brokers := brokersFlag(fs)
	dur := fs.Duration("duration", 5*time.Second, "ledger-kafka: duration of each round-trip rate; hot: of each split; gateway --process: of each concurrent series")
	conc := fs.Int("concurrency", 0, "gateway: clients of the throughput run (0 = 4 × GOMAXPROCS; 16 with --process); hot: closed-loop clients a partition (0 = 256)")
	chAddr := fs.String("clickhouse", envOr("SLUICE_CLICKHOUSE_ADDR", "127.0.0.1:19000"), "sink, report: ClickHouse native address (env SLUICE_CLICKHOUSE_ADDR)")
	batch := fs.Int("batch", 0, "sink: rows per insert (0 = the sink's default, 100000)")
	inserts := fs.Int("inserts", 0, "sink: batches inserting at once (0 = the sink's default, 1)")
	keep := fs.Bool("keep", false, "report: keep the benchmark database")
	rounds := fs.Int("rounds", 2, "report: rounds of the report and its clickhouse-client reference, alternated (the best of each is reported)")
	reuse := fs.String("database", "", "report: measure over this database of an earlier --keep run instead of loading one")
	process := fs.Bool("process", false, "gateway: a gateway process alone against a separate simulator and two ledgers on --brokers (real broker)")
	commitEvery := fs.Duration("commit-interval", 0, "ledger-kafka: the ledger's --commit-interval (0 = its default)")
	stages := fs.Bool("stages", false, "ledger-kafka: split each round trip into send, fetch, decide and deliver (p50/p99 of each)")
	floor := fs.Bool("floor", false, "ledger-kafka: also measure the same round trips with an echo in place of the ledger (the Kafka hops alone)")
	snapPlain := fs.Bool("snapshot-plain", false, "ledger-kafka: the ledger's --snapshot-plain (snapshots as plain JSON, as before they were gzipped)")
	parts := fs.String("partitions", "1,2,4", "hot: the splits of the hot deployment's scope to measure (partitions and ledgers each)")
	rpm := fs.Int64("rpm", 0, "hot: the hot deployment's requests-per-minute limit (0 = 100000000: the path, not the limit)")
	sluiceBin := fs.String("sluice-bin", "", "gateway --process: the sluice binary the stack's processes run (default: this one), to compare another build under the same driver")
	gwProcs := fs.Int("gateway-gomaxprocs", 0, "gateway --process: GOMAXPROCS of the gateway process (0 = the Go runtime's default)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (whatif: of the what-if run alone; gateway --process: of the gateway process)")
	if err := parseFlags(fs, args); err != nil {
		return benchFlags{}, err
	}
	return benchFlags{n: *n, events: *events, conc: *conc, batch: *batch, rounds: *rounds, inserts: *inserts,
		brokers: *brokers, chAddr: *chAddr, reuse: *reuse, parts: *parts, cpuprofile: *cpuprofile,
		dur: *dur, commitEvery: *commitEvery, keep: *keep, process: *process, stages: *stages, floor: *floor, snapshotPlain: *snapPlain, rpm: *rpm, gwProcs: *gwProcs, sluiceBin: *sluiceBin}, nil
}

// runNamedBench runs benchmark name and returns its result, to be printed
// as JSON.
func runNamedBench(ctx context.Context, name string, f benchFlags, whatIfProfile io.Writer) (any, error) {
	switch name {
	case "ledger":
		return benchLedger(f.n)
	case "codec":
		return benchCodec(f.n)
	case "gateway":
		if f.process {
			return loadtest.BenchGatewayProcess(ctx, loadtest.GatewayProcessOptions{Brokers: bus.SplitBrokers(f.brokers), Requests: f.n, Clients: f.conc, Duration: f.dur,
				GatewayCPUProfile: f.cpuprofile, GatewayGOMAXPROCS: f.gwProcs, SluiceBin: f.sluiceBin})
		}
		return benchGateway(ctx, f.n, f.conc)
	case "ledger-kafka":
		return ledgerd.BenchKafka(ctx, ledgerd.KafkaBenchOptions{Brokers: bus.SplitBrokers(f.brokers), Duration: f.dur,
			SustainEvents: f.n, CommitInterval: f.commitEvery, Stages: f.stages, Floor: f.floor, SnapshotPlain: f.snapshotPlain, Progress: os.Stderr})
	case "hot":
		ps, err := intList(f.parts)
		if err != nil {
			return nil, fmt.Errorf("--partitions: %w", err)
		}
		return ledgerd.BenchHot(ctx, ledgerd.HotBenchOptions{Brokers: bus.SplitBrokers(f.brokers), Partitions: ps, Duration: f.dur,
			Clients: f.conc, RPM: f.rpm, Progress: os.Stderr})
	case "sink":
		return benchSink(ctx, bus.SplitBrokers(f.brokers), f.chAddr, f.n, f.batch, f.inserts)
	case "report":
		return benchReport(ctx, f.chAddr, f.n, f.keep, f.rounds, f.reuse)
	case "whatif":
		return ledgerd.BenchWhatIf(ctx, ledgerd.WhatIfBenchOptions{Brokers: bus.SplitBrokers(f.brokers), Events: max(f.events, f.n),
			Progress: os.Stderr, CPUProfile: whatIfProfile})
	default:
		return nil, fmt.Errorf("unknown benchmark %q (ledger, ledger-kafka, hot, gateway, codec, sink, report, whatif)", name)
	}
}

// startCPUProfile starts a CPU profile into path; stop ends it and closes
// the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// measure runs f n times and reports wall time and allocations per op.
func measure(n int, f func(i int)) (nsPerOp, allocsPerOp float64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for i := 0; i < n; i++ {
		f(i)
	}
	el := time.Since(start)
	runtime.ReadMemStats(&after)
	return float64(el.Nanoseconds()) / float64(n), float64(after.Mallocs-before.Mallocs) / float64(n)
}

func benchCodec(n int) (any, error) {
	if n <= 0 {
		n = 200000
	}
	ev := eventid.New(schemas.TypeReserveRequested, 1)
	ev.RequestID, ev.Attempt, ev.Scope, ev.Tenant, ev.KeyID, ev.Route, ev.Class = "req-1", 1, "openai:org/proj", "acme", "key-1", "gpt-4o", "interactive"
	ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "org", ID: "o"}, {Level: "tenant", ID: "acme"}, {Level: "key", ID: "key-1"}},
		InputTokens: 1000, OutputTokens: 500}
	b, err := schemas.Encode(ev)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 0, 1024)
	encNs, encAllocs := measure(n, func(int) { buf, _ = schemas.Append(buf[:0], ev) })
	var out schemas.Event
	decNs, decAllocs := measure(n, func(int) { _ = schemas.Decode(b, &out) })
	return map[string]any{"bench": "codec", "event_bytes": len(b),
		"encode_ns_per_event": encNs, "encode_allocs_per_event": encAllocs,
		"decode_ns_per_event": decNs, "decode_allocs_per_event": decAllocs,
		"go": runtime.Version(), "gomaxprocs": runtime.GOMAXPROCS(0)}, nil
}

// intList parses a comma-separated list of integers ("1,2,4").
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a list of integers: %w", s, err)
		}
		out = append(out, v)
	}
	return out, nil
}
