package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/quantile"
)

// benchScenario is the stack of `sluice bench gateway --brokers`: one
// tenant, a simulator without modelled latency and limits far above the
// load, so the run measures the gateway's path, not the policy.
const benchScenario = `name: bench-gateway
description: the gateway's own cost
duration: 1s
model: gpt-4o-mini
sim:
  providers:
    openai: {rpm: 1000000000, tpm: 1000000000000, window: 60s}
  latency: {ttft: 0s}
  output: {min: 1.0, max: 1.0}
sluice:
  factor: 0.9
classes:
  interactive: {deadline: 10s, max_wait: 300ms}
tenants:
  - {id: bench, weight: 1, class: interactive, rate: 1, prompt_tokens: 200, max_tokens: 16}
`

// GatewayProcessOptions sizes BenchGatewayProcess. Zero values take
// defaults.
type GatewayProcessOptions struct {
	Brokers   []string
	SluiceBin string        // default: this executable
	Requests  int           // sequential requests per 1-client series (default 2000)
	Clients   int           // clients of the concurrent series (default 16)
	Duration  time.Duration // per concurrent series (default 5s)
	// GatewayCPUProfile, if set, is where the gateway process writes its
	// CPU profile (its --cpuprofile) until the stack stops.
	GatewayCPUProfile string
	// GatewayGOMAXPROCS, if positive, is the gateway process's GOMAXPROCS
	// (default: the Go runtime's, the machine's cores).
	GatewayGOMAXPROCS int
}

// GatewayProcessResult is what `sluice bench gateway --brokers` prints.
type GatewayProcessResult struct {
	Bench       string `json:"bench"`
	Description string `json:"description"`
	Brokers     string `json:"brokers"`
	// One client, sequential requests.
	Requests     int     `json:"requests"`
	DirectP50Ms  float64 `json:"direct_p50_ms"`
	DirectP99Ms  float64 `json:"direct_p99_ms"`
	GatewayP50Ms float64 `json:"gateway_p50_ms"`
	GatewayP99Ms float64 `json:"gateway_p99_ms"`
	AddedP50Ms   float64 `json:"added_p50_ms"`
	AddedP99Ms   float64 `json:"added_p99_ms"`
	// The added mean split in two: the ledger's round trip as the gateway
	// timed it (sluice_gateway_ledger_answer_seconds: reservation produced
	// → first decision), and the rest, the gateway's own work and its
	// extra HTTP hop.
	AddedMeanMs         float64 `json:"added_mean_ms"`
	LedgerAnswerMeanMs  float64 `json:"ledger_answer_mean_ms"`
	AddedLessLedgerMean float64 `json:"added_less_ledger_mean_ms"`
	// Requests per gateway CPU-second in the 1-client series: the cost of
	// a request with nothing to batch it with.
	RequestsPerGatewayCPU1 float64 `json:"requests_per_gateway_cpu_second_1_client"`
	// Produce requests the gateway's request producer wrote per request
	// (reserve and reconcile in one, issue 25 item 1: about 1 at 1 client,
	// less when concurrent requests share a produce request).
	ProducesPerRequest1 float64 `json:"produce_requests_per_request_1_client"`
	ProducesPerRequestN float64 `json:"produce_requests_per_request_concurrent"`
	// Clients concurrent clients, each for the duration.
	Clients               int     `json:"clients"`
	DirectP50MsN          float64 `json:"direct_p50_ms_concurrent"`
	GatewayP50MsN         float64 `json:"gateway_p50_ms_concurrent"`
	GatewayP99MsN         float64 `json:"gateway_p99_ms_concurrent"`
	AddedP50MsN           float64 `json:"added_p50_ms_concurrent"`
	AddedMeanMsN          float64 `json:"added_mean_ms_concurrent"`
	LedgerAnswerMeanMsN   float64 `json:"ledger_answer_mean_ms_concurrent"`
	AddedLessLedgerMeanN  float64 `json:"added_less_ledger_mean_ms_concurrent"`
	RequestsPerSec        float64 `json:"gateway_requests_per_sec_concurrent"`
	GatewayCPUSeconds     float64 `json:"gateway_cpu_seconds"`
	RequestsPerGatewayCPU float64 `json:"requests_per_gateway_cpu_second"`
	// GatewayIdleCores is the gateway's CPU per second of wall time with
	// no request (its consumers' fetch polls, heartbeats, telemetry): the
	// part of the per-request figures above that does not scale with load.
	GatewayIdleCores float64 `json:"gateway_idle_cores"`
	Errors           int64   `json:"errors"`
	// GatewayGOMAXPROCS is the gateway's GOMAXPROCS when the run set it
	// (--gateway-gomaxprocs), 0 for the runtime's default.
	GatewayGOMAXPROCS int `json:"gateway_gomaxprocs,omitempty"`
	// CPU per request of the gateway, the ledgers and the broker, and in
	// total, over the 1-client and the concurrent series (benchcpu.go).
	CPU1 StackCPU `json:"cpu_per_request_1_client"`
	CPUN StackCPU `json:"cpu_per_request_concurrent"`
}

// BenchGatewayProcess measures a gateway process alone: the simulator, two
// ledgers (on brokers) and the gateway run as separate processes, as in
// `sluice loadtest --brokers`; this process only sends requests, straight
// to the simulator and through the gateway, at 1 and Clients clients, and
// reads the gateway's CPU time from /proc. Timings belong here, never in
// tests.
func BenchGatewayProcess(ctx context.Context, o GatewayProcessOptions) (*GatewayProcessResult, error) {
	if o.Requests <= 0 {
		o.Requests = 2000
	}
	if o.Clients <= 0 {
		o.Clients = 16
	}
	if o.Duration <= 0 {
		o.Duration = 5 * time.Second
	}
	sc, err := ParseScenario([]byte(benchScenario), "bench")
	if err != nil {
		return nil, err
	}
	keys := NewKeys(sc)
	var gw gatewayProc
	if o.GatewayCPUProfile != "" {
		gw.args = append(gw.args, "--cpuprofile", o.GatewayCPUProfile)
	}
	if o.GatewayGOMAXPROCS > 0 {
		gw.env = append(gw.env, "GOMAXPROCS="+strconv.Itoa(o.GatewayGOMAXPROCS))
	}
	st, err := startStack(ctx, sc, o.SluiceBin, o.Brokers, keys, generatedConfig(sc, keys), slog.New(slog.NewTextHandler(io.Discard, nil)), gw)
	if err != nil {
		return nil, fmt.Errorf("stack on %s: %w", strings.Join(o.Brokers, ","), err)
	}
	defer st.Close()
	b := &gwBench{ctx: ctx, o: o, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}},
		key: keys["bench"], pids: pidsOf(st, o.Brokers), metricsURL: st.gwMetricsURL,
		gwURL: st.gwURL + "/v1/chat/completions", directURL: st.simURL + "/openai/v1/chat/completions"}
	if err := warmup(ctx, b.hc, b.gwURL, keys[warmupTenant], sc.Model); err != nil {
		return nil, fmt.Errorf("%w (logs in %s)", err, st.dir)
	}
	b.body = []byte(`{"model":"` + sc.Model + `","max_tokens":16,"messages":[{"role":"user","content":"` +
		strings.Repeat("Say hello to Sluice in five words. ", 25) + `"}]}`)

	res := &GatewayProcessResult{Bench: "gateway-process", Brokers: strings.Join(o.Brokers, ","), Requests: o.Requests, Clients: o.Clients, GatewayGOMAXPROCS: max(0, o.GatewayGOMAXPROCS),
		Description: "gateway process alone against a separate simulator (no modelled latency) and two ledgers on the broker; 200-token non-streaming chat completion; loopback HTTP"}
	// The stack's burn with no request, to split fixed from marginal cost.
	idle, gwIdle, err := b.pids.idleCores(3 * time.Second)
	if err != nil {
		return nil, err
	}
	res.GatewayIdleCores = gwIdle
	if err := b.oneClient(res, idle); err != nil {
		return nil, err
	}
	if err := b.manyClients(res, idle); err != nil {
		return nil, err
	}
	res.Errors = b.errs.Load()
	return res, nil
}

// gwBench is one run of BenchGatewayProcess: the stack's processes and
// addresses, the client, and the request it sends.
type gwBench struct {
	ctx                          context.Context
	o                            GatewayProcessOptions
	hc                           *http.Client
	body                         []byte
	key                          string
	pids                         stackPIDs
	gwURL, directURL, metricsURL string
	errs                         atomic.Int64 // failed requests of every series
}

// pidsOf finds the stack's processes (and the first broker's, by its
// listener) for the CPU samples.
func pidsOf(st *stack, brokers []string) stackPIDs {
	var pids stackPIDs
	for _, p := range st.procs {
		switch {
		case p.name == "gateway":
			pids.gateway = p.cmd.Process.Pid
		case p.name == "sim":
			pids.sim = p.cmd.Process.Pid
		case strings.HasPrefix(p.name, "ledger"):
			pids.ledgers = append(pids.ledgers, p.cmd.Process.Pid)
		}
	}
	if len(brokers) > 0 {
		pids.broker = listenerPID(brokers[0])
	}
	return pids
}

// call sends the bench request to url and reads the answer.
func (b *gwBench) call(url string) error {
	req, err := http.NewRequestWithContext(b.ctx, http.MethodPost, url, bytes.NewReader(b.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+b.key)
	resp, err := b.hc.Do(req)
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

// sequential runs the 1-client series on url; warmed, if not nil, is
// called between the warm-up and the measured requests.
func (b *gwBench) sequential(url string, warmed func() error) ([]float64, error) {
	for range 100 { // warm connections, tokenizer, ledger nodes
		_ = b.call(url)
	}
	if warmed != nil {
		if err := warmed(); err != nil {
			return nil, err
		}
	}
	out := make([]float64, 0, b.o.Requests)
	for range b.o.Requests {
		t0 := time.Now()
		if err := b.call(url); err != nil {
			b.errs.Add(1)
			continue
		}
		out = append(out, ms(time.Since(t0)))
	}
	slices.Sort(out)
	return out, nil
}

// concurrent runs Clients clients on url for Duration and returns their
// latencies, sorted, and how many requests succeeded.
func (b *gwBench) concurrent(url string) ([]float64, int) {
	var mu sync.Mutex
	var all []float64
	runCtx, cancel := context.WithTimeout(b.ctx, b.o.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for range b.o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			for runCtx.Err() == nil {
				t0 := time.Now()
				if err := b.call(url); err != nil {
					if runCtx.Err() == nil {
						b.errs.Add(1)
					}
					continue
				}
				mine = append(mine, ms(time.Since(t0)))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(all)
	return all, len(all)
}

// oneClient measures the 1-client series, direct then through the
// gateway, with the gateway's CPU and the ledger's answer time over the
// measured requests only.
func (b *gwBench) oneClient(res *GatewayProcessResult, idle float64) error {
	direct, _ := b.sequential(b.directURL, nil)
	var a0 answerTotals
	var c0 time.Duration
	var s0 cpuSample
	var t0 time.Time
	via, err := b.sequential(b.gwURL, func() (err error) {
		if a0, err = ledgerAnswer(b.ctx, b.hc, b.metricsURL); err != nil {
			return err
		}
		if s0, err = b.pids.sample(); err != nil {
			return err
		}
		t0 = time.Now()
		c0, err = procCPU(b.pids.gateway, "gateway")
		return err
	})
	if err != nil {
		return err
	}
	c1, err := procCPU(b.pids.gateway, "gateway")
	if err != nil {
		return err
	}
	s1, err := b.pids.sample()
	if err != nil {
		return err
	}
	res.CPU1 = perRequest(s0, s1, len(via), time.Since(t0), idle, b.pids.broker)
	if c1 > c0 {
		res.RequestsPerGatewayCPU1 = float64(len(via)) / (c1 - c0).Seconds()
	}
	a1, err := ledgerAnswer(b.ctx, b.hc, b.metricsURL)
	if err != nil {
		return err
	}
	res.DirectP50Ms, res.DirectP99Ms = quantile.Nearest(direct, 0.50), quantile.Nearest(direct, 0.99)
	res.GatewayP50Ms, res.GatewayP99Ms = quantile.Nearest(via, 0.50), quantile.Nearest(via, 0.99)
	res.AddedP50Ms, res.AddedP99Ms = res.GatewayP50Ms-res.DirectP50Ms, res.GatewayP99Ms-res.DirectP99Ms
	res.AddedMeanMs = mean(via) - mean(direct)
	res.LedgerAnswerMeanMs = a1.since(a0)
	res.ProducesPerRequest1 = a1.producesPer(a0, len(via))
	res.AddedLessLedgerMean = res.AddedMeanMs - res.LedgerAnswerMeanMs
	return nil
}

// manyClients measures the concurrent series, direct then through the
// gateway, with the stack's CPU and the ledger's answer time over the
// gateway's series.
func (b *gwBench) manyClients(res *GatewayProcessResult, idle float64) error {
	directN, _ := b.concurrent(b.directURL)
	cpu0, err := procCPU(b.pids.gateway, "gateway")
	if err != nil {
		return err
	}
	a2, err := ledgerAnswer(b.ctx, b.hc, b.metricsURL)
	if err != nil {
		return err
	}
	s2, err := b.pids.sample()
	if err != nil {
		return err
	}
	start := time.Now()
	viaN, n := b.concurrent(b.gwURL)
	el := time.Since(start)
	cpu1, err := procCPU(b.pids.gateway, "gateway")
	if err != nil {
		return err
	}
	s3, err := b.pids.sample()
	if err != nil {
		return err
	}
	res.CPUN = perRequest(s2, s3, n, el, idle, b.pids.broker)
	a3, err := ledgerAnswer(b.ctx, b.hc, b.metricsURL)
	if err != nil {
		return err
	}
	res.DirectP50MsN = quantile.Nearest(directN, 0.50)
	res.GatewayP50MsN, res.GatewayP99MsN = quantile.Nearest(viaN, 0.50), quantile.Nearest(viaN, 0.99)
	res.AddedP50MsN = res.GatewayP50MsN - res.DirectP50MsN
	res.AddedMeanMsN = mean(viaN) - mean(directN)
	res.LedgerAnswerMeanMsN = a3.since(a2)
	res.ProducesPerRequestN = a3.producesPer(a2, n)
	res.AddedLessLedgerMeanN = res.AddedMeanMsN - res.LedgerAnswerMeanMsN
	res.RequestsPerSec = float64(n) / el.Seconds()
	res.GatewayCPUSeconds = (cpu1 - cpu0).Seconds()
	if res.GatewayCPUSeconds > 0 {
		res.RequestsPerGatewayCPU = float64(n) / res.GatewayCPUSeconds
	}
	return nil
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// answerTotals are the sum and count of the gateway's
// sluice_gateway_ledger_answer_seconds, and its produce requests
// (sluice_gateway_ledger_produce_requests_total), at one moment.
type answerTotals struct{ sum, count, produces float64 }

// producesPer is the produce requests per request between a and b, for n
// requests.
func (b answerTotals) producesPer(a answerTotals, n int) float64 {
	if n <= 0 {
		return 0
	}
	return (b.produces - a.produces) / float64(n)
}

// since is the mean answer time, in ms, of the answers after a.
func (b answerTotals) since(a answerTotals) float64 {
	if b.count <= a.count {
		return 0
	}
	return (b.sum - a.sum) / (b.count - a.count) * 1000
}

// ledgerAnswer reads the gateway's answer-time histogram totals.
func ledgerAnswer(ctx context.Context, hc *http.Client, url string) (answerTotals, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return answerTotals{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return answerTotals{}, fmt.Errorf("gateway metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answerTotals{}, fmt.Errorf("gateway metrics: %w", err)
	}
	var t answerTotals
	for _, line := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch name {
		case "sluice_gateway_ledger_answer_seconds_sum":
			t.sum, err = strconv.ParseFloat(v, 64)
		case "sluice_gateway_ledger_answer_seconds_count":
			t.count, err = strconv.ParseFloat(v, 64)
		case "sluice_gateway_ledger_produce_requests_total":
			t.produces, err = strconv.ParseFloat(v, 64)
		}
		if err != nil {
			return answerTotals{}, fmt.Errorf("gateway metrics: %s: %w", name, err)
		}
	}
	return t, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// procCPU is the user+system CPU time of process pid, from /proc (Linux;
// clock ticks of 10 ms, the kernel's USER_HZ). who names the process in
// the error (the gateway, a ledger, the simulator, the broker): a failed
// read of one of them used to say "gateway" whichever it was.
func procCPU(pid int, who string) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("%s CPU time (pid %d): %w", who, pid, err)
	}
	d, err := parseProcStat(b)
	if err != nil {
		return 0, fmt.Errorf("%s CPU time: /proc/%d/stat: %w", who, pid, err)
	}
	return d, nil
}

// parseProcStat reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line. They are counted after the command name, which
// is in parentheses and may itself hold spaces and parentheses: the last
// ')' ends it.
func parseProcStat(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	ut, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	st, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}
