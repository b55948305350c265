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

	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/quantile"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// HotBenchOptions configures BenchHot.
type HotBenchOptions struct {
	Brokers    []string
	Partitions []int         // the splits to measure (default 1, 2, 4)
	Duration   time.Duration // measured, per split (default 10 s)
	// Clients is the closed-loop clients per partition (default 256): each
	// sends a reserve, waits for its decision and sends the next, so the
	// backlog of a partition stays below Clients and the lease messages
	// are never stuck behind it.
	Clients int
	// RPM is the hot deployment's requests-per-minute limit (default
	// 100,000,000: the bench measures the path, not the limit).
	RPM      int64
	Progress io.Writer
}

// HotRun is one split of BenchHot.
type HotRun struct {
	Partitions int `json:"partitions"`
	Ledgers    int `json:"ledgers"`
	// SubScopes maps each sub-scope to its partition of sluice.requests;
	// BudgetPartition is where the deployment's requests budget lives.
	SubScopes       map[string]int32 `json:"sub_scopes"`
	BudgetPartition int32            `json:"budget_partition"`
	Clients         int              `json:"clients"`
	Decisions       int              `json:"decisions"`
	Granted         int              `json:"granted"`
	Denied          int              `json:"denied"`
	Errors          int              `json:"errors"`
	DecisionsPerSec float64          `json:"decisions_per_sec"`
	P50Ms           float64          `json:"p50_ms"`
	P99Ms           float64          `json:"p99_ms"`
	// LimitPerMinute is the deployment's limit; GrantedMinuteMax the most
	// grants of any minute of the run (≤ LimitPerMinute).
	LimitPerMinute   int64  `json:"limit_per_minute"`
	GrantedMinuteMax int    `json:"granted_minute_max"`
	LoadAverage      string `json:"load_average"`
}

// HotBenchResult is what `sluice bench hot` prints.
type HotBenchResult struct {
	Bench    string   `json:"bench"`
	Brokers  string   `json:"brokers"`
	Workload string   `json:"workload"`
	Runs     []HotRun `json:"runs"`
	// LoadAverage is /proc/loadavg at the start and the end.
	LoadAverage [2]string `json:"load_average_start_end"`
}

// hotScope is the bench's hot provider scope; hotDeployment its deployment.
const hotDeployment = "dep-hot"

// BenchHot measures one hot deployment's decisions per second through
// the real broker at the ledger's default settings, its scope split over
// 1, 2 and 4 partitions (ledger.ScopeConfig.Partitions), each partition
// decided by its own in-process ledger member: closed-loop clients
// spread over the sub-scopes by key (ledger.PartitionScope), as a gateway
// would, all through one deployment whose limit the sub-scopes lease
// from its budget partition. One partition is today's unsplit scope, its
// deployment limit a bucket.
func BenchHot(ctx context.Context, o HotBenchOptions) (*HotBenchResult, error) {
	if len(o.Partitions) == 0 {
		o.Partitions = []int{1, 2, 4}
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Clients <= 0 {
		o.Clients = 256
	}
	if o.RPM <= 0 {
		o.RPM = 100_000_000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	res := &HotBenchResult{Bench: "hot", Brokers: fmt.Sprint(o.Brokers),
		Workload: fmt.Sprintf("closed loop, %d clients a partition, 1000 keys, one deployment (%d rpm), reserve only, %v measured after warm-up", o.Clients, o.RPM, o.Duration)}
	res.LoadAverage[0] = loadAverage()
	for _, n := range o.Partitions {
		if n < 1 || n > 64 {
			return nil, fmt.Errorf("partitions %d out of [1, 64]", n)
		}
		fmt.Fprintf(o.Progress, "hot deployment over %d partition(s)…\n", n)
		run, err := benchHotRun(ctx, o, n)
		if err != nil {
			return nil, fmt.Errorf("%d partitions: %w", n, err)
		}
		res.Runs = append(res.Runs, *run)
	}
	res.LoadAverage[1] = loadAverage()
	return res, nil
}

// HotConfig is the ledger document of a hot deployment split over n
// partitions under scope: the deployment's rpm limit (checked every
// second) and a generous per-key limit.
func HotConfig(scope string, n int, rpm int64) string {
	return fmt.Sprintf(`{"scopes":[{"name":%q,"partitions":%d,"buckets":[
 {"level":"deployment","id":%q,"dimension":"requests","capacity":%d,"period_ms":60000,"window_ms":1000},
 {"level":"key","id":"*","dimension":"requests","capacity":100000000,"period_ms":60000,"window_ms":60000}]}],
 "hold_ttl_ms":5000}`, scope, n, hotDeployment, rpm)
}

// HotScope picks the name of the bench's hot scope for n partitions: the
// first "hot-<i>" whose sub-scopes land on n different partitions. Since
// the key partitioner puts sub-scopes on consecutive partitions
// (bus.ScopePartitioner) that is "hot-0" for every n; the check stays so
// that a partitioner that undid the split would show here.
func HotScope(n int) string {
	for i := 0; ; i++ {
		s := fmt.Sprintf("hot-%d", i)
		seen := map[int32]bool{}
		for j := 0; j < n; j++ {
			seen[PartitionOf(subScope(s, n, j), n)] = true
		}
		if len(seen) == n {
			return s
		}
	}
}

func subScope(scope string, n, i int) string {
	if n <= 1 {
		return scope
	}
	return ledger.SubScope(scope, i)
}

func benchHotRun(ctx context.Context, o HotBenchOptions, n int) (*HotRun, error) {
	scope := HotScope(n)
	names := bus.NamesWithPrefix(fmt.Sprintf("benchhot%d.", time.Now().UnixNano()))
	cl, err := bus.NewClient(ctx, o.Brokers, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	tc := bus.DefaultTopics()
	tc.RequestPartitions, tc.Names = int32(n), names
	adm := kadm.NewClient(cl)
	if _, err := bus.Ensure(ctx, adm, tc.Specs()); err != nil {
		return nil, err
	}
	defer func() { _, _ = adm.DeleteTopics(context.Background(), names.Created()...) }()
	if err := PublishConfig(ctx, o.Brokers, names, []byte(HotConfig(scope, n, o.RPM)), "bench-hot"); err != nil {
		return nil, err
	}
	run := &HotRun{Partitions: n, Ledgers: n, SubScopes: map[string]int32{}, Clients: o.Clients * n, LimitPerMinute: o.RPM}
	for i := 0; i < n; i++ {
		run.SubScopes[subScope(scope, n, i)] = PartitionOf(subScope(scope, n, i), n)
	}
	if n > 1 {
		run.BudgetPartition = PartitionOf(ledger.SplitBudgetID(scope, hotDeployment, schemas.DimRequests), n)
	}

	// n members of one group: one partition each once they have joined.
	warnings := slog.New(slog.NewTextHandler(o.Progress, &slog.HandlerOptions{Level: slog.LevelWarn}))
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for i := 0; i < n; i++ {
		svc, err := New(ctx, Config{Brokers: o.Brokers, Topics: names, Group: names.Requests + ".bench", Node: fmt.Sprintf("hot-%d", i),
			Log: warnings, Registerer: prometheus.NewRegistry()})
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); defer svc.Close(); _ = svc.Loop(lctx) }()
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rc, err := reserve.New(ctx, reserve.Config{Brokers: o.Brokers, Topics: names, Node: "bench-hot-gw", AnswerTimeout: 30 * time.Second, Log: quiet})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	hc := &hotClient{rc: rc, scope: scope, n: n}
	if err := hc.warm(ctx); err != nil {
		return nil, err
	}
	hc.closedLoop(ctx, o, run)
	return run, nil
}

// hotKeys is how many keys the bench's clients spread over.
const hotKeys = 1000

// hotClient sends the bench's reservations through one gateway client.
type hotClient struct {
	rc    *reserve.Client
	scope string
	n     int
	seq   atomic.Int64
}

// send reserves one request of key and waits for its decision.
func (h *hotClient) send(ctx context.Context, key int) (schemas.Decision, time.Duration, error) {
	k := fmt.Sprintf("k%d", key)
	ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
	ev.RequestID = fmt.Sprintf("h%d-%d", h.n, h.seq.Add(1))
	ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = 1, "bench-hot-gw", ledger.PartitionScope(h.scope, h.n, k), "t", k, "agent"
	ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: ledger.LevelKey, ID: k}, {Level: ledger.LevelDeployment, ID: hotDeployment}},
		InputTokens: 100, OutputTokens: 100}
	t0 := time.Now()
	d, err := h.rc.Reserve(ctx, ev)
	return d, time.Since(t0), err
}

// warm sends every key once, 50 at a time: every sub-scope answers and
// every lease is held before the measurement.
func (h *hotClient) warm(ctx context.Context) error {
	var werr error
	var wmu sync.Mutex
	var wwg sync.WaitGroup
	for k := 0; k < hotKeys; k += hotKeys / 50 {
		wwg.Add(1)
		go func(k int) {
			defer wwg.Done()
			for j := k; j < k+hotKeys/50; j++ {
				if _, _, err := h.send(ctx, j); err != nil {
					wmu.Lock()
					werr = fmt.Errorf("warm-up reserve: %w", err)
					wmu.Unlock()
					return
				}
			}
		}(k)
	}
	wwg.Wait()
	return werr
}

// closedLoop runs o.Clients × n clients, each sending its next request as
// soon as the last is decided: a second warm, then o.Duration measured
// into run.
func (h *hotClient) closedLoop(ctx context.Context, o HotBenchOptions, run *HotRun) {
	var mu sync.Mutex
	var lat []float64
	perSec := map[int64]int{}
	measuring := atomic.Bool{}
	done := make(chan struct{})
	var cwg sync.WaitGroup
	for c := 0; c < o.Clients*h.n; c++ {
		cwg.Add(1)
		go func(c int) {
			defer cwg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				d, el, err := h.send(ctx, (c*7919+i)%hotKeys)
				if !measuring.Load() {
					continue
				}
				mu.Lock()
				switch {
				case err != nil:
					run.Errors++
				case d.Status == schemas.StatusGranted:
					run.Granted++
					perSec[time.Now().Unix()]++
				default:
					run.Denied++
				}
				if err == nil {
					lat = append(lat, float64(el.Microseconds())/1000)
				}
				mu.Unlock()
			}
		}(c)
	}
	time.Sleep(time.Second)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(o.Duration)
	measuring.Store(false)
	el := time.Since(start)
	close(done)
	cwg.Wait()
	run.LoadAverage = loadAverage()
	mu.Lock()
	defer mu.Unlock()
	run.Decisions = run.Granted + run.Denied
	run.DecisionsPerSec = float64(run.Decisions) / el.Seconds()
	sort.Float64s(lat)
	if len(lat) > 0 {
		run.P50Ms, run.P99Ms = quantile.Nearest(lat, 0.5), quantile.Nearest(lat, 0.99)
	}
	run.GrantedMinuteMax = minuteMax(perSec)
}

// minuteMax is the most grants of any 60 consecutive seconds of perSec.
func minuteMax(perSec map[int64]int) int {
	best := 0
	for s := range perSec {
		sum := 0
		for j := s - 59; j <= s; j++ {
			sum += perSec[j]
		}
		best = max(best, sum)
	}
	return best
}
