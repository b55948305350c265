package ledgerd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/analytics/whatif"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// WhatIfBenchOptions configures BenchWhatIf.
type WhatIfBenchOptions struct {
	Brokers []string
	// Events is the number of inputs recorded on the benchmark's one
	// partition (default 200,000).
	Events   int
	Progress io.Writer
	// CPUProfile, when set, receives a CPU profile of the what-if run
	// alone (not of recording the workload).
	CPUProfile io.Writer
}

// WhatIfBenchResult is what `sluice bench whatif` prints.
type WhatIfBenchResult struct {
	Bench      string `json:"bench"`
	Brokers    string `json:"brokers"`
	Inputs     int64  `json:"inputs"`
	Decisions  int64  `json:"decisions"`
	Difference int    `json:"differences"`
	// EndToEndEventsPerSec is `sluice whatif`'s own figure: inputs per
	// second of fetching, decoding and replaying them, recorded decisions
	// included.
	EndToEndEventsPerSec float64 `json:"end_to_end_events_per_sec"`
	EndToEndMs           int64   `json:"end_to_end_ms"`
	// EngineEventsPerSec replays the same inputs, already decoded in
	// memory, through analytics/whatif alone.
	EngineEventsPerSec float64 `json:"engine_events_per_sec"`
	// DecodeEventsPerSec decodes the inputs and recorded decisions, held in
	// memory, as the what-if run does (all cores).
	DecodeEventsPerSec float64 `json:"decode_events_per_sec"`
	LoadAverage        string  `json:"load_average"`
	GOMAXPROCS         int     `json:"gomaxprocs"`
	Go                 string  `json:"go"`
}

// BenchWhatIf records a workload on a throwaway one-partition topic set of
// the real broker (an in-process ledger member decides it), then measures
// `sluice whatif` over it with the recorded config, and the engine alone
// over the same inputs. The topics are deleted afterwards.
func BenchWhatIf(ctx context.Context, o WhatIfBenchOptions) (*WhatIfBenchResult, error) {
	if o.Events <= 0 {
		o.Events = 200_000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	names, cleanup, err := benchTopics(ctx, o.Brokers, 1)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	group := names.Requests + ".bench"
	fmt.Fprintf(o.Progress, "recording %d inputs…\n", o.Events)
	if err := produceWhatIfWorkload(ctx, o.Brokers, names, o.Events); err != nil {
		return nil, err
	}
	if err := decideAll(ctx, o.Brokers, names, group, quiet); err != nil {
		return nil, err
	}

	fmt.Fprintf(o.Progress, "whatif over the recorded partition…\n")
	rep, err := profiledWhatIf(ctx, o, names, group)
	if err != nil {
		return nil, err
	}
	res := &WhatIfBenchResult{Bench: "whatif", Brokers: strings.Join(o.Brokers, ","), Inputs: rep.Inputs,
		Decisions: rep.WhatIf.Decisions, Difference: rep.Differences, EndToEndEventsPerSec: rep.EventsPerSec,
		EndToEndMs: rep.ElapsedMs, GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version()}

	// The engine alone and the decoding alone, over the same records.
	fmt.Fprintf(o.Progress, "engine and decoder alone…\n")
	if err := benchEngineAlone(ctx, o.Brokers, names, group, rep.Ranges[0], res); err != nil {
		return nil, err
	}
	res.LoadAverage = loadAverage()
	return res, nil
}

// profiledWhatIf runs `sluice whatif` over the recorded topics with the
// recorded config, under o.CPUProfile if set: the profile covers the
// measured run alone, not the recording before it.
func profiledWhatIf(ctx context.Context, o WhatIfBenchOptions, names bus.Names, group string) (*WhatIfReport, error) {
	if o.CPUProfile != nil {
		if err := pprof.StartCPUProfile(o.CPUProfile); err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
	}
	rep, err := WhatIf(ctx, WhatIfOptions{Brokers: o.Brokers, Topics: names, Group: group})
	if o.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	return rep, err
}

// benchEngineAlone reads partition 0's inputs of range pr and their
// recorded decisions into memory, then times decoding them (on every
// core) and the what-if engine over them, apart from the reading.
func benchEngineAlone(ctx context.Context, brokers []string, names bus.Names, group string, pr PartitionRange, res *WhatIfBenchResult) error {
	ro := ReplayOptions{Brokers: brokers, Topics: names, Group: group}
	var inputs []*kgo.Record
	if err := ReadPartition(ctx, brokers, names.Requests, 0, kgo.NewOffset().At(pr.From), pr.To, func(r *kgo.Record) error {
		inputs = append(inputs, r)
		return nil
	}); err != nil {
		return err
	}
	recorded, err := recordedDecisions(ctx, ro, 0, pr.From, pr.To, 0)
	if err != nil {
		return err
	}
	start := time.Now()
	recEvs := make([]schemas.Event, len(recorded))
	decodeParallel(len(recorded), func(i int) { _ = schemas.Decode([]byte(recorded[i]), &recEvs[i]) })
	evs := make([]schemas.Event, len(inputs))
	decodeParallel(len(inputs), func(i int) { _ = decodeInput(inputs[i].Value, &evs[i]) })
	if el := time.Since(start); el > 0 {
		res.DecodeEventsPerSec = float64(len(inputs)) / el.Seconds()
	}
	start = time.Now()
	pt, err := whatif.NewPartition(0, whatif.Options{ToMs: time.Now().UnixMilli()})
	if err != nil {
		return err
	}
	for i := range recEvs {
		if recEvs[i].Decision != nil {
			pt.RecordedDecision(&recEvs[i])
		}
	}
	for i, r := range inputs {
		pt.Input(r.Offset, r.Timestamp.UnixMilli(), &evs[i])
	}
	pt.Finish()
	if el := time.Since(start); el > 0 {
		res.EngineEventsPerSec = float64(len(inputs)) / el.Seconds()
	}
	return nil
}

// produceWhatIfWorkload appends n inputs to the requests topic: reserves
// over a three-level path spread over tenants and keys, reconciles of
// earlier reserves, and ticks.
func produceWhatIfWorkload(ctx context.Context, brokers []string, names bus.Names, n int) error {
	prod, err := bus.NewClient(ctx, brokers, 10*time.Second, kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return err
	}
	defer prod.Close()
	var mu sync.Mutex
	var perr error
	now := time.Now().UnixMilli()
	reserves, reconciled := 0, 0
	for i := 0; i < n; i++ {
		var ev *schemas.Event
		switch r := i % 20; {
		case r < 12:
			tn := fmt.Sprintf("t%d", i%7)
			key := fmt.Sprintf("k%d-%s", i%3, tn)
			ev = eventid.New(schemas.TypeReserveRequested, now)
			ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Route, ev.Class =
				fmt.Sprintf("r%d", reserves), 1, "bench-gw", "bench", tn, key, "m", "interactive"
			ev.ReserveRequested = &schemas.ReserveRequested{
				Path:        []schemas.PathLevel{{Level: "tenant", ID: tn}, {Level: "key", ID: key}, {Level: "deployment", ID: "d1"}},
				InputTokens: int64(100 + i%3000), OutputTokens: int64(50 + i%1000), PromptFamily: "pf-bench"}
			reserves++
		case r < 19 && reconciled < reserves:
			ev = eventid.New(schemas.TypeReconciled, now)
			ev.RequestID, ev.Attempt, ev.Node, ev.Scope = fmt.Sprintf("r%d", reconciled), 1, "bench-gw", "bench"
			ev.Reconciled = &schemas.Reconciled{InputTokens: int64(i % 3000), OutputTokens: int64(i % 800), HTTPStatus: 200, TotalMs: 300}
			reconciled++
		default:
			ev = eventid.New(schemas.TypeTick, now)
			ev.Tick = &schemas.Tick{Reason: "bench"}
		}
		b, err := schemas.Encode(ev)
		if err != nil {
			return err
		}
		prod.Produce(ctx, &kgo.Record{Topic: names.Requests, Key: []byte("bench"), Value: b}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				perr = err
				mu.Unlock()
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		return err
	}
	return perr
}

// decideAll runs a ledger member over the requests topic until its group
// has committed every input.
func decideAll(ctx context.Context, brokers []string, names bus.Names, group string, log *slog.Logger) error {
	svc, err := New(ctx, Config{Brokers: brokers, Topics: names, Group: group, Node: "bench-whatif", Log: log,
		Registerer: prometheus.NewRegistry(), SnapshotEvery: 1 << 30, SnapshotInterval: time.Hour})
	if err != nil {
		return err
	}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = svc.Loop(lctx) }()
	defer func() { stop(); wg.Wait(); svc.Close() }()
	end, err := stableOffset(ctx, brokers, names.Requests, 0)
	if err != nil {
		return err
	}
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		offs, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			if o, ok := offs.Lookup(names.Requests, 0); ok && o.At >= end {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the bench ledger did not commit its %d inputs in 10 minutes", end)
}

// loadAverage returns the 1, 5 and 15 minute load averages (Linux), or ""
// where /proc/loadavg does not exist.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// stableOffset returns the last stable offset of topic/p (-1 if the broker
// does not say).
func stableOffset(ctx context.Context, brokers []string, topic string, p int32) (int64, error) {
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	lso, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("stable offsets of %s: %w", topic, err)
	}
	if r, ok := lso.Lookup(topic, p); ok && r.Err == nil {
		return r.Offset, nil
	}
	return -1, nil
}
