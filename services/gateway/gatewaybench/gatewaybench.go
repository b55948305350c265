// Package gatewaybench is the gateway's bench harness (`sluice bench
// gateway`, BenchmarkHandlerChat): the whole stack in this process (kfake
// Kafka, a ledger member, the provider simulator, a gateway) on loopback.
// It is apart from package gateway so that the product does not import the
// ledger service and the simulator (issue 24: the gateway stood above
// ledgerd and sim only because of its bench).
package gatewaybench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/quantile"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/gateway"
	"github.com/sluice-dev/sluice/services/ledgerd"
	"github.com/sluice-dev/sluice/services/sim"
)

// Options sizes `sluice bench gateway`. Zero values take defaults.
type Options struct {
	Requests    int           // sequential requests per latency series (default 2000)
	Concurrency int           // clients of the throughput run (default 4 × GOMAXPROCS)
	Duration    time.Duration // throughput run length (default 5s)
	Log         *slog.Logger
}

// Result is what `sluice bench gateway --json` prints.
type Result struct {
	Bench       string `json:"bench"`
	Requests    int    `json:"requests"`
	GoMaxProcs  int    `json:"gomaxprocs"`
	Go          string `json:"go"`
	Description string `json:"description"`
	// Latency of a small non-streaming chat completion, sequential.
	DirectP50Ms  float64 `json:"direct_p50_ms"`
	DirectP99Ms  float64 `json:"direct_p99_ms"`
	GatewayP50Ms float64 `json:"gateway_p50_ms"`
	GatewayP99Ms float64 `json:"gateway_p99_ms"`
	AddedP50Ms   float64 `json:"added_p50_ms"`
	AddedP99Ms   float64 `json:"added_p99_ms"`
	// Throughput through the gateway with the ledger in process.
	Concurrency       int     `json:"concurrency"`
	RequestsPerSec    float64 `json:"requests_per_sec"`
	RequestsPerSecCPU float64 `json:"requests_per_sec_per_core"`
	// RequestsPerCPUSecond divides completed requests by the CPU time the
	// whole process spent in the run — gateway, ledger, kfake broker,
	// simulator and the load clients together — so it understates what a
	// gateway alone does per core.
	RequestsPerCPUSecond float64 `json:"requests_per_cpu_second_whole_process"`
	Errors               int64   `json:"errors"`
	// Estimation of a 4,000-token chat prompt.
	EstimatePromptTokens int64   `json:"estimate_prompt_tokens"`
	EstimateUsPerOp      float64 `json:"estimate_us_per_op"`
	EstimateAllocsPerOp  float64 `json:"estimate_allocs_per_op"`
}

const benchKey = "sk-sluice-bench"

// Run measures the gateway's added latency against calling the
// provider simulator directly (p50, p99), its throughput for small
// non-streaming requests, and the cost of estimating a 4,000-token prompt.
// Everything runs in this process: kfake Kafka, a ledger member, the
// simulator (no modelled latency, limits out of the way) and the gateway,
// all on loopback. Timings belong here, never in tests.
func Run(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	res := &Result{Bench: "gateway", Requests: o.Requests, GoMaxProcs: runtime.GOMAXPROCS(0), Go: runtime.Version(), Concurrency: o.Concurrency,
		Description: "small non-streaming chat completion; in-process kfake Kafka, ledger, simulator without modelled latency; loopback HTTP"}

	env, err := startBenchEnv(ctx, o.Log)
	if err != nil {
		return nil, err
	}
	defer env.close()

	c := newBenchCaller(ctx)
	if err := c.latency(env, o.Requests, res); err != nil {
		return nil, err
	}
	c.throughput(env, o, res)
	res.EstimatePromptTokens, res.EstimateUsPerOp, res.EstimateAllocsPerOp, err = benchEstimate(env.gw.Estimator())
	if err != nil {
		return nil, err
	}
	return res, nil
}

// withDefaults fills the options left at zero; the concurrency follows the
// cores so that the throughput phase keeps every one of them busy.
func (o Options) withDefaults() Options {
	if o.Requests <= 0 {
		o.Requests = 2000
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4 * runtime.GOMAXPROCS(0)
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return o
}

// benchCaller sends the bench's one request, the same body to the
// simulator and to the gateway so that the difference is the gateway's,
// over one client whose idle pool is large enough that the throughput
// phase does not measure connection set-up.
type benchCaller struct {
	ctx    context.Context
	client *http.Client
	body   []byte
}

func newBenchCaller(ctx context.Context) *benchCaller {
	return &benchCaller{ctx: ctx,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}},
		body:   []byte(`{"model":"gpt-4o-mini","max_tokens":16,"messages":[{"role":"user","content":"Say hello to Sluice in five words."}]}`)}
}

// call sends the request to url with key and reads the whole answer; any
// status but 200 is an error.
func (c *benchCaller) call(url, key string) error {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, url, bytes.NewReader(c.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// series times n requests one after another, after 50 untimed ones that
// warm the connections, the tokenizer and the ledger's nodes.
func (c *benchCaller) series(url, key string, n int) ([]time.Duration, error) {
	for i := 0; i < 50; i++ {
		if err := c.call(url, key); err != nil {
			return nil, fmt.Errorf("warm-up %s: %w", url, err)
		}
	}
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := c.call(url, key); err != nil {
			return nil, fmt.Errorf("%s: %w", url, err)
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// latency measures one request at a time, straight to the simulator and
// then through the gateway, and records the latency the gateway adds.
// Sequential requests see no queueing, so the difference is the path's.
func (c *benchCaller) latency(env *benchEnv, n int, res *Result) error {
	direct, err := c.series(env.simURL+"/openai/v1/chat/completions", "unused", n)
	if err != nil {
		return err
	}
	viaGW, err := c.series(env.gwURL+"/v1/chat/completions", benchKey, n)
	if err != nil {
		return err
	}
	res.DirectP50Ms, res.DirectP99Ms = quantileMs(direct, 0.50), quantileMs(direct, 0.99)
	res.GatewayP50Ms, res.GatewayP99Ms = quantileMs(viaGW, 0.50), quantileMs(viaGW, 0.99)
	res.AddedP50Ms, res.AddedP99Ms = res.GatewayP50Ms-res.DirectP50Ms, res.GatewayP99Ms-res.DirectP99Ms
	return nil
}

// throughput runs o.Concurrency callers against the gateway for
// o.Duration and records requests per second, per core and per CPU second
// of the process (the stack is in-process, so that is the whole stack's
// cost). Errors after the deadline are the deadline's, not counted.
func (c *benchCaller) throughput(env *benchEnv, o Options, res *Result) {
	var done, errs atomic.Int64
	cpu0 := processCPU()
	runCtx, cancel := context.WithTimeout(c.ctx, o.Duration)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < o.Concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				if err := c.call(env.gwURL+"/v1/chat/completions", benchKey); err != nil {
					if runCtx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	cancel()
	el := time.Since(start).Seconds()
	res.RequestsPerSec = float64(done.Load()) / el
	res.RequestsPerSecCPU = res.RequestsPerSec / float64(runtime.GOMAXPROCS(0))
	if cpu := processCPU() - cpu0; cpu > 0 {
		res.RequestsPerCPUSecond = float64(done.Load()) / cpu.Seconds()
	}
	res.Errors = errs.Load()
}

// benchEstimate times the estimate of a chat prompt of about 4,000 tokens.
// Each estimate is of another prompt (a window, one byte further on, of
// words in a pseudo-random order), because the tokenizer keeps the count
// of a whole text it has seen twice (admission/estimate, the text cache):
// this is the cost of a prompt not seen before, with the words of a
// deployment's earlier prompts in the piece cache.
func benchEstimate(est *estimate.Estimator) (int64, float64, float64, error) {
	const n = 2000
	words := strings.Fields("the quick brown fox jumps over the lazy dog while quota governors reserve tokens and reconcile usage")
	var sb strings.Builder
	x := uint32(2463534242)
	for sb.Len() < 23_500+n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		sb.WriteString(words[x%uint32(len(words))])
		sb.WriteByte(' ')
	}
	text := sb.String()
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "max_tokens": 512, "messages": []map[string]string{
		{"role": "system", "content": "You are a careful assistant."}, {"role": "user", "content": text[:23_500]}}})
	req, err := estimate.ParseOpenAIChat(b)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("bench prompt: %w", err)
	}
	if len(req.Messages) != 2 || len(req.Messages[1].Parts) != 1 {
		return 0, 0, 0, fmt.Errorf("bench prompt parsed as %d messages", len(req.Messages))
	}
	e := est.Estimate(req, 0)
	tokens := e.InputTokens
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t0 := time.Now()
	for i := 1; i <= n; i++ {
		req.Messages[1].Parts[0].Text = text[i : i+23_500]
		e = est.Estimate(req, 0)
	}
	el := time.Since(t0)
	runtime.ReadMemStats(&after)
	return tokens, float64(el.Microseconds()) / n, float64(after.Mallocs-before.Mallocs) / n, nil
}

func quantileMs(ds []time.Duration, q float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(quantile.Nearest(s, q).Microseconds()) / 1000
}

type benchEnv struct {
	simURL, gwURL string
	gw            *gateway.Server
	closers       []func()
}

func (e *benchEnv) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// startBenchEnv brings up kfake, the simulator, a ledger and a gateway with
// limits far above what the bench sends, so every request is granted.
func startBenchEnv(ctx context.Context, log *slog.Logger) (env *benchEnv, err error) {
	env = &benchEnv{}
	// The error returns below say `return nil, err`, which clears env
	// before deferred calls run: close through a copy.
	started := env
	defer func() {
		if err != nil {
			started.close()
		}
	}()
	brokers, err := env.startBus(ctx)
	if err != nil {
		return nil, err
	}
	if err := env.startSim(); err != nil {
		return nil, err
	}
	cfg, err := benchConfig(env.simURL)
	if err != nil {
		return nil, err
	}
	names := bus.DefaultNames()
	if err := ledgerd.PublishConfig(ctx, brokers, names, cfg.LedgerJSON(), "bench"); err != nil {
		return nil, err
	}
	if err := env.startLedger(ctx, brokers, log); err != nil {
		return nil, err
	}
	rc, err := reserve.New(ctx, reserve.Config{Brokers: brokers, Topics: names, Node: cfg.Node, AnswerTimeout: 5 * time.Second, Log: log})
	if err != nil {
		return nil, err
	}
	env.closers = append(env.closers, rc.Close)
	env.gw = gateway.New(cfg, rc, log)
	var stop func()
	if env.gwURL, stop, err = benchServe(env.gw); err != nil {
		return nil, err
	}
	env.closers = append(env.closers, stop)
	return env, nil
}

// startBus starts a one-broker kfake cluster with the default topics and
// returns its address.
func (e *benchEnv) startBus(ctx context.Context) ([]string, error) {
	cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		return nil, fmt.Errorf("embedded kafka: %w", err)
	}
	e.closers = append(e.closers, cl.Close)
	brokers := cl.ListenAddrs()
	adm, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		return nil, err
	}
	e.closers = append(e.closers, adm.Close)
	if _, err := bus.Ensure(ctx, kadm.NewClient(adm), bus.DefaultTopics().Specs()); err != nil {
		return nil, fmt.Errorf("topics: %w", err)
	}
	return brokers, nil
}

// startSim starts the simulator with no modelled latency (its sleeps
// return at once) and the OpenAI, Anthropic and Gemini limits out of
// reach, so that the bench measures the gateway and not the simulated
// provider.
func (e *benchEnv) startSim() error {
	sc := sim.DefaultConfig()
	sc.Sleep = func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	for name, l := range map[string]sim.Limits{
		sim.OpenAI:    {RPM: 1 << 40, TPM: 1 << 40},
		sim.Anthropic: {RPM: 1 << 40, ITPM: 1 << 40, OTPM: 1 << 40},
		sim.Gemini:    {RPM: 1 << 40, ITPM: 1 << 40},
	} {
		pc := sc.Providers[name]
		pc.Limits = l
		sc.Providers[name] = pc
	}
	simSrv, err := sim.New(sc)
	if err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	var stop func()
	if e.simURL, stop, err = benchServe(simSrv); err != nil {
		return err
	}
	e.closers = append(e.closers, stop)
	return nil
}

// benchConfig is the gateway configuration of the bench: a route to the
// simulator per provider kind it translates to or not (gpt-4o-mini, the
// bench's; claude-sonnet-4-5 and gemini-2.0-flash, translated, for
// BenchmarkHandlerChatTranslated), one tenant with the bench key, and a
// ledger whose buckets are far above what the bench sends, so that every
// request is granted and none waits.
func benchConfig(simURL string) (*config.Config, error) {
	lc := ledger.DefaultDevConfig()
	lc.Scopes[0].Buckets = []ledger.BucketConfig{{Level: ledger.LevelKey, ID: "*", Dimension: schemas.DimRequests, Capacity: 1 << 40, PeriodMs: 60_000}}
	for _, name := range []string{"sim-anthropic", "sim-gemini"} {
		sc := lc.Scopes[0]
		sc.Name = name
		lc.Scopes = append(lc.Scopes, sc)
	}
	led, err := json.Marshal(lc)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(strings.NewReader(fmt.Sprintf(`node: gw-bench
providers:
  - {name: sim-openai, kind: openai, scope: sim-openai, base_url: %[1]s/openai/v1}
  - {name: sim-anthropic, kind: anthropic, scope: sim-anthropic, base_url: %[1]s/anthropic/v1}
  - {name: sim-gemini, kind: gemini, scope: sim-gemini, base_url: %[1]s/gemini/v1beta}
routes:
  - {model: gpt-4o-mini, provider: sim-openai}
  - {model: claude-sonnet-4-5, provider: sim-anthropic}
  - {model: gemini-2.0-flash, provider: sim-gemini}
tenants:
  - id: bench
    keys:
      - {id: bench-key, sha256: %[2]s}
ledger: %[3]s
`, simURL, config.HashKey(benchKey), led)))
	if err != nil {
		return nil, fmt.Errorf("bench config: %w", err)
	}
	return cfg, nil
}

// startLedger runs a ledger member in the background until the env is
// closed; its metrics go to a registry of its own, so that a second Run in
// one process registers nothing twice.
func (e *benchEnv) startLedger(ctx context.Context, brokers []string, log *slog.Logger) error {
	ld, err := ledgerd.New(ctx, ledgerd.Config{Brokers: brokers, Topics: bus.DefaultNames(), Group: "bench-ledger", Node: "ledger-bench", Log: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	ldDone := make(chan struct{})
	go func() {
		defer close(ldDone)
		_ = ld.Loop(runCtx)
	}()
	e.closers = append(e.closers, func() { cancel(); <-ldDone; ld.Close() })
	return nil
}

func benchServe(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("bench server", "err", err)
		}
	}()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// processCPU is the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
