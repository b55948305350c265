package ledgerd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/quantile"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// benchLedgerConfig grants everything: the benchmark measures the path, not
// the policy.
const benchLedgerConfig = `{"scopes":[{"name":"*","buckets":[
 {"level":"key","id":"*","dimension":"requests","capacity":100000000,"period_ms":60000,"window_ms":60000}]}],
 "hold_ttl_ms":5000}`

// KafkaBenchOptions configures BenchKafka.
type KafkaBenchOptions struct {
	Brokers  []string
	Rates    []int         // open-loop request rates (req/s) for the round-trip runs
	Duration time.Duration // per rate
	// SustainEvents is the number of pre-produced requests the single
	// partition's ledger must decide for the throughput run.
	SustainEvents int
	// CommitInterval is the ledger member's Config.CommitInterval (0 =
	// its default).
	CommitInterval time.Duration
	// Stages adds each round trip's stages to the result (see Stages).
	Stages bool
	// Floor adds the same round trips against an echo in place of the
	// ledger (see Floor).
	Floor bool
	// SnapshotPlain is the round-trip member's Config.SnapshotPlain: its
	// snapshots' state as plain JSON, as before they were gzipped, to
	// compare the two in one build.
	SnapshotPlain bool
	Progress      io.Writer
}

// RoundTrip is the admission round trip (reserve produced → decision
// received) at one offered rate.
type RoundTrip struct {
	RateOffered  int     `json:"rate_offered"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	MaxMs        float64 `json:"max_ms"`
	RateAchieved float64 `json:"rate_achieved"`
	Stages       *Stages `json:"stages,omitempty"`
}

// Stages splits the round trips of one rate (--stages): send is reserve
// produced → request appended (the broker's LogAppendTime, whole ms), fetch
// appended → the member's poll returned it, decide polled → the decision's
// produce acknowledged, deliver acknowledged → the gateway had it (below
// zero when the gateway's fetch beat the acknowledgement). Each is p50 and
// p99 in ms over the requests that have all four.
type Stages struct {
	Requests int        `json:"requests"`
	Send     [2]float64 `json:"send_p50_p99_ms"`
	Fetch    [2]float64 `json:"fetch_p50_p99_ms"`
	Decide   [2]float64 `json:"decide_p50_p99_ms"`
	Deliver  [2]float64 `json:"deliver_p50_p99_ms"`
	// SlowestAtCommit is the share of the slowest 1 % of these round
	// trips that were in flight while the member's transaction ended
	// (End, from the commit's flush to EndTxn's answer) or in the 50 ms
	// after, when the next transaction's first produce waits for the
	// markers; Commits is how many ends fell inside the run.
	SlowestAtCommit float64 `json:"slowest_1pct_at_commit"`
	Commits         int     `json:"commits"`
	// SlowestAtSnapshot is the share of the slowest 1 % that were in
	// flight while a snapshot record was being produced (sent to
	// acknowledged); SnapshotMs p50 and max of those produces.
	SlowestAtSnapshot float64    `json:"slowest_1pct_at_snapshot"`
	SnapshotMs        [2]float64 `json:"snapshot_produce_p50_max_ms"`
	// SnapshotBytes is p50 and max of those records' sizes (gzipped
	// unless --snapshot-plain).
	SnapshotBytes [2]int `json:"snapshot_bytes_p50_max"`
	// CommitMs is p50 and max of those ends (ms); FirstProduceMs p50 and
	// max of how long the first produce of the transaction after each
	// took to be acknowledged (the wait for the markers shows here).
	CommitMs       [2]float64 `json:"commit_p50_max_ms"`
	FirstProduceMs [2]float64 `json:"first_produce_after_commit_p50_max_ms"`
}

// stageTrace collects, for the member, when each reserve was appended and
// polled and when its first decision was acknowledged.
type stageTrace struct {
	mu      sync.Mutex
	byID    map[string]*stageTimes
	commits [][2]time.Time // each End of the member: start, return
	firsts  [][2]time.Time // the first produce after each End: sent, acknowledged
	snaps   [][2]time.Time // each snapshot record: sent, acknowledged
	snapLen []int          // each snapshot record's size, as snaps
}

// snapshotProduce wraps next to note when a snapshot record of size bytes
// sent at sent was acknowledged.
func (t *stageTrace) snapshotProduce(sent time.Time, size int, next func(*kgo.Record, error)) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		next(r, err)
		t.mu.Lock()
		defer t.mu.Unlock()
		t.snaps = append(t.snaps, [2]time.Time{sent, time.Now()})
		t.snapLen = append(t.snapLen, size)
	}
}

// firstProduce wraps next to note when the first produce of a transaction
// that follows an End, sent at sent, was acknowledged.
func (t *stageTrace) firstProduce(sent time.Time, next func(*kgo.Record, error)) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		next(r, err)
		t.mu.Lock()
		defer t.mu.Unlock()
		t.firsts = append(t.firsts, [2]time.Time{sent, time.Now()})
	}
}

// committed notes one End of the member's transaction.
func (t *stageTrace) committed(from, to time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.commits = append(t.commits, [2]time.Time{from, to})
}

type stageTimes struct{ appended, polled, acked time.Time }

func newStageTrace() *stageTrace { return &stageTrace{byID: map[string]*stageTimes{}} }

func (t *stageTrace) polled(id string, appended, polled time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byID[id]; !ok {
		t.byID[id] = &stageTimes{appended: appended, polled: polled}
	}
}

// promise wraps next to note when the decision for id was acknowledged
// (the first time: a copy produced again after an abort does not count).
func (t *stageTrace) promise(id string, next func(*kgo.Record, error)) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		next(r, err)
		if err != nil {
			return
		}
		now := time.Now()
		t.mu.Lock()
		defer t.mu.Unlock()
		if st := t.byID[id]; st != nil && st.acked.IsZero() {
			st.acked = now
		}
	}
}

// stages computes the Stages of the round trips in rts.
func (t *stageTrace) stages(rts []timedTrip) *Stages {
	t.mu.Lock()
	defer t.mu.Unlock()
	var send, fetch, decide, deliver []float64
	var traced []timedTrip
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, rt := range rts {
		st := t.byID[rt.id]
		if st == nil || st.acked.IsZero() {
			continue
		}
		send = append(send, ms(st.appended.Sub(rt.sent)))
		fetch = append(fetch, ms(st.polled.Sub(st.appended)))
		decide = append(decide, ms(st.acked.Sub(st.polled)))
		deliver = append(deliver, ms(rt.got.Sub(st.acked)))
		traced = append(traced, rt)
	}
	if len(send) == 0 {
		return nil
	}
	// Which of the slowest 1 % met a commit (the window plus the marker
	// wait after it).
	const markerWait = 50 * time.Millisecond
	sort.Slice(traced, func(i, j int) bool { return traced[i].got.Sub(traced[i].sent) > traced[j].got.Sub(traced[j].sent) })
	slow := traced[:max(1, len(traced)/100)]
	first, last := traced[0].sent, traced[0].got
	for _, rt := range traced {
		first, last = minTime(first, rt.sent), maxTime(last, rt.got)
	}
	at, commits := 0, 0
	var commitMs, firstMs []float64
	for _, c := range t.commits {
		if !c[1].Before(first) && !c[0].After(last) {
			commits++
			commitMs = append(commitMs, ms(c[1].Sub(c[0])))
		}
	}
	for _, f := range t.firsts {
		if !f[1].Before(first) && !f[0].After(last) {
			firstMs = append(firstMs, ms(f[1].Sub(f[0])))
		}
	}
	p50max := func(v []float64) [2]float64 {
		if len(v) == 0 {
			return [2]float64{}
		}
		sort.Float64s(v)
		return [2]float64{quantile.Nearest(v, 0.5), v[len(v)-1]}
	}
	atSnap := 0
	var snapMs, snapLen []float64
	for i, c := range t.snaps {
		if !c[1].Before(first) && !c[0].After(last) {
			snapMs = append(snapMs, ms(c[1].Sub(c[0])))
			snapLen = append(snapLen, float64(t.snapLen[i]))
		}
	}
	snapBytes := p50max(snapLen)
	for _, rt := range slow {
		for _, c := range t.snaps {
			if !rt.sent.After(c[1]) && !rt.got.Before(c[0]) {
				atSnap++
				break
			}
		}
	}
	for _, rt := range slow {
		for _, c := range t.commits {
			if !rt.sent.After(c[1].Add(markerWait)) && !rt.got.Before(c[0]) {
				at++
				break
			}
		}
	}
	p := func(v []float64) [2]float64 {
		sort.Float64s(v)
		return [2]float64{quantile.Nearest(v, 0.5), quantile.Nearest(v, 0.99)}
	}
	return &Stages{Requests: len(send), Send: p(send), Fetch: p(fetch), Decide: p(decide), Deliver: p(deliver),
		SlowestAtCommit: float64(at) / float64(len(slow)), Commits: commits,
		SlowestAtSnapshot: float64(atSnap) / float64(len(slow)), SnapshotMs: p50max(snapMs),
		SnapshotBytes: [2]int{int(snapBytes[0]), int(snapBytes[1])}, CommitMs: p50max(commitMs), FirstProduceMs: p50max(firstMs)}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// timedTrip is one answered round trip: its request id, when it was sent
// and when its decision arrived.
type timedTrip struct {
	id        string
	sent, got time.Time
}

// KafkaBenchResult is what `sluice bench ledger-kafka` prints.
type KafkaBenchResult struct {
	Bench            string      `json:"bench"`
	Brokers          string      `json:"brokers"`
	CommitIntervalMs float64     `json:"commit_interval_ms"`
	SnapshotPlain    bool        `json:"snapshot_plain"`
	RoundTrips       []RoundTrip `json:"round_trips"`
	// Sequential is one client's closed-loop round trip (see sequential).
	Sequential RoundTrip `json:"sequential"`
	// Floor is the Kafka hops alone, measured in the same run (--floor).
	Floor *Floor `json:"floor,omitempty"`
	// Transactions and TransactionAborts are the round-trip member's
	// committed and aborted transactions over the whole run (warm-up
	// included), CommitMsMean the mean time its End took: a p99 far above
	// the others' with aborts > 0 is an abort, not the machine. The
	// member's warnings go to the bench's progress output (stderr).
	Transactions             int     `json:"transactions"`
	TransactionAborts        int     `json:"transaction_aborts"`
	CommitMsMean             float64 `json:"commit_ms_mean"`
	SustainEvents            int     `json:"sustain_events"`
	SustainedDecisionsPerSec float64 `json:"sustained_decisions_per_sec_one_partition"`
	// SustainedBufferedMax is the most decision records the member's
	// producer held unacknowledged during the backlog (sampled every
	// millisecond): what franz-go's max buffered records (50,000) must
	// hold for the loop never to wait on it (docs/ledger-service.md,
	// Client settings).
	SustainedBufferedMax int64 `json:"sustained_producer_buffered_records_max"`
}

// BenchKafka measures the ledger service on a real broker: admission round
// trips at the given rates through an in-process ledger member, and the
// sustained decision rate of one partition working off a backlog.
func BenchKafka(ctx context.Context, o KafkaBenchOptions) (*KafkaBenchResult, error) {
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if len(o.Rates) == 0 {
		o.Rates = []int{1000, 5000}
	}
	if o.SustainEvents <= 0 {
		o.SustainEvents = 100_000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	res := &KafkaBenchResult{Bench: "ledger-kafka", Brokers: fmt.Sprint(o.Brokers), SustainEvents: o.SustainEvents}
	cfg := Config{CommitInterval: o.CommitInterval, Brokers: o.Brokers, Node: "-"}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res.CommitIntervalMs = float64(cfg.CommitInterval.Microseconds()) / 1000
	res.SnapshotPlain = o.SnapshotPlain
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Round trips: 4 partitions, one in-process ledger member.
	names, cleanup, err := benchTopics(ctx, o.Brokers, 4)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	reg := prometheus.NewRegistry()
	warnings := slog.New(slog.NewTextHandler(o.Progress, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := New(ctx, Config{Brokers: o.Brokers, Topics: names, Group: names.Requests + ".bench", Node: "bench", Log: warnings, Registerer: reg, CommitInterval: o.CommitInterval,
		SnapshotPlain: o.SnapshotPlain})
	if err != nil {
		return nil, err
	}
	if o.Stages {
		svc.trace = newStageTrace()
	}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = svc.Loop(lctx) }()
	defer func() { stop(); wg.Wait(); svc.Close() }()
	rc, err := benchClient(ctx, o.Brokers, names, "warm")
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	fmt.Fprintf(o.Progress, "%d sequential round trips…\n", benchSequential)
	res.Sequential = sequential(ctx, rc, benchSequential, "seq")
	for _, rate := range o.Rates {
		fmt.Fprintf(o.Progress, "round trip at %d req/s for %v…\n", rate, o.Duration)
		res.RoundTrips = append(res.RoundTrips, roundTrips(ctx, rc, rate, o.Duration, svc.trace))
	}
	res.Transactions, res.TransactionAborts, res.CommitMsMean = transactionStats(reg)
	if o.Floor {
		if res.Floor, err = benchFloor(ctx, o, benchSequential); err != nil {
			return nil, err
		}
	}

	// Sustained: a backlog on one partition, decided by a fresh member.
	fmt.Fprintf(o.Progress, "sustained: %d requests on one partition…\n", o.SustainEvents)
	rate, peak, err := sustained(ctx, o.Brokers, o.SustainEvents, o.CommitInterval, quiet)
	if err != nil {
		return nil, err
	}
	res.SustainedDecisionsPerSec, res.SustainedBufferedMax = rate, peak
	return res, nil
}

// benchClient is the bench's gateway side, warmed up by 20 reserves (the
// member's group join and first transaction, or the echo's first fetch).
func benchClient(ctx context.Context, brokers []string, names bus.Names, warm string) (*reserve.Client, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rc, err := reserve.New(ctx, reserve.Config{Brokers: brokers, Topics: names, Node: "bench-gw", AnswerTimeout: 10 * time.Second, Log: quiet})
	if err != nil {
		return nil, err
	}
	for i := 0; i < 20; i++ {
		if _, err := rc.Reserve(ctx, benchReserve(fmt.Sprintf("%s-%d", warm, i))); err != nil {
			rc.Close()
			return nil, fmt.Errorf("%s-up reserve: %w", warm, err)
		}
	}
	return rc, nil
}

// benchSequential is how many closed-loop round trips Sequential makes.
const benchSequential = 3000

// transactionStats reads a member's committed and aborted transactions and
// the mean time of its commits from its metrics registry.
func transactionStats(reg *prometheus.Registry) (commits, aborts int, commitMsMean float64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0, 0
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "sluice_ledger_transactions_total":
				commits = int(m.GetCounter().GetValue())
			case "sluice_ledger_transaction_aborts_total":
				aborts = int(m.GetCounter().GetValue())
			case "sluice_ledger_commit_seconds":
				if h := m.GetHistogram(); h.GetSampleCount() > 0 {
					commitMsMean = 1000 * h.GetSampleSum() / float64(h.GetSampleCount())
				}
			}
		}
	}
	return commits, aborts, commitMsMean
}

func benchReserve(id string) *schemas.Event {
	ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
	scope := "bench-" + id[len(id)-1:]
	ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = id, 1, "bench-gw", scope, "t", "k", "interactive"
	ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "key", ID: "k"}}, InputTokens: 100, OutputTokens: 100}
	return ev
}

func roundTrips(ctx context.Context, rc *reserve.Client, rate int, d time.Duration, trace *stageTrace) RoundTrip {
	var mu sync.Mutex
	var lat []float64
	var trips []timedTrip
	errs := 0
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	for i := 0; time.Since(start) < d; i++ {
		// Open loop: send on schedule whatever the answers do.
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ev := benchReserve(fmt.Sprintf("rt-%d-%d", rate, i))
			t0 := time.Now()
			dec, err := rc.Reserve(ctx, ev)
			t1 := time.Now()
			el := t1.Sub(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || dec.Status != schemas.StatusGranted {
				errs++
				return
			}
			lat = append(lat, float64(el.Microseconds())/1000)
			if trace != nil {
				trips = append(trips, timedTrip{id: ev.RequestID, sent: t0, got: t1})
			}
		}(i)
	}
	wg.Wait()
	rt := tripStats(lat, errs, time.Since(start))
	rt.RateOffered = rate
	if trace != nil {
		rt.Stages = trace.stages(trips)
	}
	return rt
}

// tripStats summarises the latencies (ms) of the answered round trips of a
// run of el that also had errs errors. It sorts lat.
func tripStats(lat []float64, errs int, el time.Duration) RoundTrip {
	sort.Float64s(lat)
	rt := RoundTrip{Requests: len(lat) + errs, Errors: errs, RateAchieved: float64(len(lat)+errs) / el.Seconds()}
	if len(lat) > 0 {
		rt.P50Ms, rt.P99Ms, rt.MaxMs = quantile.Nearest(lat, 0.50), quantile.Nearest(lat, 0.99), lat[len(lat)-1]
	}
	return rt
}

// sustained pre-produces n requests onto a one-partition topic, then starts
// a ledger member and measures its decision rate from the log append times
// of the first and last decisions.
func sustained(ctx context.Context, brokers []string, n int, commitEvery time.Duration, log *slog.Logger) (rate float64, bufferedMax int64, err error) {
	names, cleanup, err := benchTopics(ctx, brokers, 1)
	if err != nil {
		return 0, 0, err
	}
	defer cleanup()
	prod, err := bus.NewClient(ctx, brokers, 10*time.Second, kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		return 0, 0, err
	}
	defer prod.Close()
	if err := produceBenchRequests(ctx, prod, names.Requests, n); err != nil {
		return 0, 0, err
	}
	svc, err := New(ctx, Config{Brokers: brokers, Topics: names, Group: names.Requests + ".bench", Node: "bench-s", Log: log,
		Registerer: prometheus.NewRegistry(), SnapshotEvery: 1 << 30, SnapshotInterval: time.Hour, CommitInterval: commitEvery})
	if err != nil {
		return 0, 0, err
	}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = svc.Loop(lctx) }()
	defer func() { stop(); wg.Wait(); svc.Close() }()
	// The producer's buffer, sampled while the backlog is worked off.
	var peak atomic.Int64
	sampled := sampleBuffered(lctx, svc, &peak)
	first, last, got, err := awaitDecisions(ctx, brokers, names.Decisions, n)
	if err != nil {
		return 0, 0, err
	}
	stop()
	<-sampled
	return float64(got-1) / last.Sub(first).Seconds(), peak.Load(), nil
}

// produceBenchRequests produces n reserve requests to topic and waits for
// every one, so that the backlog is whole before the ledger starts.
func produceBenchRequests(ctx context.Context, prod *kgo.Client, topic string, n int) error {
	var perr error
	var pmu sync.Mutex
	for i := 0; i < n; i++ {
		b, err := schemas.Encode(benchReserve(fmt.Sprintf("s-%d", i)))
		if err != nil {
			return err
		}
		prod.Produce(ctx, &kgo.Record{Topic: topic, Value: b}, func(_ *kgo.Record, err error) {
			if err != nil {
				pmu.Lock()
				perr = err
				pmu.Unlock()
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		return err
	}
	return perr
}

// sampleBuffered keeps in peak the most records the service's producer
// held buffered, sampled every millisecond until ctx ends; the returned
// channel closes when sampling has stopped.
func sampleBuffered(ctx context.Context, svc *Service, peak *atomic.Int64) <-chan struct{} {
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if cl := svc.sessClient.Load(); cl != nil {
					if b := cl.BufferedProduceRecords(); b > peak.Load() {
						peak.Store(b)
					}
				}
			}
		}
	}()
	return sampled
}

// awaitDecisions reads the committed decisions topic from the start until
// n decisions arrived (at most 5 minutes) and returns the log append times
// of the first and the last.
func awaitDecisions(ctx context.Context, brokers []string, topic string, n int) (first, last time.Time, got int, err error) {
	cons, err := bus.NewClient(ctx, brokers, 10*time.Second, kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return first, last, 0, err
	}
	defer cons.Close()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for got < n && wctx.Err() == nil {
		fs := cons.PollFetches(wctx)
		fs.EachRecord(func(r *kgo.Record) {
			if got == 0 {
				first = r.Timestamp
			}
			last = r.Timestamp
			got++
		})
	}
	if got < n {
		return first, last, got, fmt.Errorf("sustained run: only %d of %d decisions arrived", got, n)
	}
	return first, last, got, nil
}

// benchTopics creates a throwaway set of topics and publishes the bench
// config on them.
func benchTopics(ctx context.Context, brokers []string, partitions int32) (bus.Names, func(), error) {
	names := bus.NamesWithPrefix(fmt.Sprintf("bench%d.", time.Now().UnixNano()))
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		return names, nil, err
	}
	tc := bus.DefaultTopics()
	tc.RequestPartitions, tc.Names = partitions, names
	adm := kadm.NewClient(cl)
	if _, err := bus.Ensure(ctx, adm, tc.Specs()); err != nil {
		cl.Close()
		return names, nil, err
	}
	cleanup := func() {
		_, _ = adm.DeleteTopics(context.Background(), names.Created()...)
		cl.Close()
	}
	if err := PublishConfig(ctx, brokers, names, []byte(benchLedgerConfig), "bench"); err != nil {
		cleanup()
		return names, nil, err
	}
	return names, cleanup, nil
}
