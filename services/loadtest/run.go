package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/services/dev"
	"github.com/sluice-dev/sluice/services/sim"
)

const usage = `usage: sluice loadtest --scenario NAME|FILE [--embedded | --brokers ADDR | --url URL --api-key K... | --baseline] [flags]

Runs a scenario (deploy/scenarios/NAME.yaml or a file) as open-loop Poisson
arrivals per tenant and prints a report (text, or JSON with --json).

  --embedded   start the whole stack in process (kfake, simulator, ledger, gateway)
               with the scenario's simulator limits and a generated gateway config
  --config FILE  with --embedded or --brokers: run a hand-written gateway config
               instead (its providers pointed at the simulator, a key added per
               scenario tenant; see services/loadtest/README.md)
  --brokers ADDR  start the scenario's stack as separate processes on that Kafka
               cluster (simulator, two ledgers at the default settings, a gateway),
               under a fresh topic prefix, and report the ledgers' transaction
               aborts, snapshots, ledger_unavailable answers and decision gaps
  --url URL    an existing gateway; --api-key once per tenant (in scenario order)
               or once for all; --sim-url for the simulator's /sim/stats
  --baseline   the same load straight to the simulator (/openai/v1/chat/completions)
               with a usual client policy: up to 3 retries, exponential backoff with
               full jitter, Retry-After honoured; no governor

flags:
`

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// Options are the parsed flags of `sluice loadtest`.
type Options struct {
	Scenario     string
	ScenariosDir string
	JSON         bool
	Embedded     bool
	// Brokers selects the real-stack mode; SluiceBin is the binary it
	// starts (default: this executable); KillLedgerAt, if > 0, sends
	// SIGKILL to the busiest ledger that long after the arrivals start.
	Brokers      []string
	SluiceBin    string
	KillLedgerAt time.Duration
	// KillOwnerOf, with KillLedgerAt, picks the ledger to kill by what it
	// owns instead of by its load: the owner of the sluice.requests
	// partition this key hashes to (a budget id for its budget
	// partition, a scope name for its scope partition).
	KillOwnerOf string
	// ConfigFile, with Embedded or Brokers, is a hand-written gateway
	// config to run instead of the generated one (HandwrittenConfigYAML).
	ConfigFile  string
	URL         string
	APIKeys     []string
	SimURL      string
	Baseline    bool
	Duration    time.Duration
	Seed        uint64
	Retries     int // -1 = mode default
	Drain       time.Duration
	MaxInFlight int
	Verbose     bool
	// Started, if set, is called with the embedded stack's gateway
	// metrics URL (its metrics listener's /metrics) and simulator base URL
	// once the stack is warm, before the arrivals start (a test points a
	// Prometheus at the gateway's metrics).
	Started func(metricsURL, simURL string)
	// Faults, if set with Brokers, runs alongside the arrivals from their
	// start and returns the faults it injected; the report gives each its
	// decision gap (StackReport.FaultWindows). The run waits for it before
	// auditing.
	Faults func(ctx context.Context, env FaultEnv) []FaultWindow
	// VerifyReplay, with Brokers, replays the run's committed log after
	// the run and compares it with the recorded decisions
	// (StackReport.Replay), as `sluice replay --verify` does.
	VerifyReplay bool
}

// Run implements `sluice loadtest`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, helped, err := parseRunFlags(args, stdout)
	if err != nil || helped {
		return err
	}
	if err := o.checkModes(); err != nil {
		return err
	}
	sc, err := LoadScenario(o.Scenario, o.ScenariosDir)
	if err != nil {
		return fmt.Errorf("sluice loadtest: %w", err)
	}
	if o.URL != "" && len(o.APIKeys) != 1 && len(o.APIKeys) != len(sc.Tenants) {
		return fmt.Errorf("sluice loadtest: %d --api-key values for %d tenants (give one per tenant, or one for all)", len(o.APIKeys), len(sc.Tenants))
	}
	rep, err := Execute(ctx, sc, o, stderr)
	if err != nil {
		return fmt.Errorf("sluice loadtest: %w", err)
	}
	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(stdout)
}

// parseRunFlags reads the command line of `sluice loadtest` into Options.
// -h prints the usage and the flags to stdout and reports helped.
func parseRunFlags(args []string, stdout io.Writer) (o Options, helped bool, err error) {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var keys stringList
	fs.StringVar(&o.Scenario, "scenario", "", "scenario name (deploy/scenarios/NAME.yaml) or file")
	fs.StringVar(&o.ScenariosDir, "scenarios-dir", "", "directory of scenario files (default: deploy/scenarios found from the working directory up; env SLUICE_SCENARIOS_DIR)")
	fs.BoolVar(&o.JSON, "json", false, "print the report as JSON")
	fs.BoolVar(&o.Embedded, "embedded", false, "start a whole Sluice stack in process (kfake + simulator)")
	brokers := fs.String("brokers", "", "Kafka seed brokers: start the scenario's stack as processes on them (comma separated)")
	fs.StringVar(&o.SluiceBin, "sluice-bin", "", "sluice binary for --brokers (default: this executable)")
	fs.DurationVar(&o.KillLedgerAt, "kill-ledger-at", 0, "with --brokers: kill -9 the busiest ledger this long into the run")
	fs.StringVar(&o.KillOwnerOf, "kill-owner-of", "", "with --kill-ledger-at: kill the owner of this key's partition (a budget id or a scope) instead of the busiest ledger")
	fs.StringVar(&o.ConfigFile, "config", "", "with --embedded or --brokers: a hand-written gateway config instead of the generated one (providers pointed at the simulator, a key added per tenant)")
	fs.StringVar(&o.URL, "url", "", "gateway base URL (e.g. http://127.0.0.1:8080)")
	fs.Var(&keys, "api-key", "gateway API key; repeat once per tenant in scenario order, or give one for all")
	fs.StringVar(&o.SimURL, "sim-url", "", "simulator base URL for /sim/stats (with --url), or the simulator to load (with --baseline)")
	fs.BoolVar(&o.Baseline, "baseline", false, "send the load straight to the simulator with a client-side retry policy, no governor")
	fs.DurationVar(&o.Duration, "duration", 0, "override the scenario's duration")
	seed := fs.Uint64("seed", 0, "override the scenario's arrival seed")
	fs.IntVar(&o.Retries, "retries", -1, "client retries per logical request (default: 3 with --baseline, 0 through Sluice)")
	fs.DurationVar(&o.Drain, "drain", 0, "how long to wait for in-flight requests after the arrival window (default: the longest class deadline, at most 2m)")
	fs.IntVar(&o.MaxInFlight, "max-in-flight", 20000, "client-side cap on concurrent requests (arrivals above it are counted as dropped)")
	fs.BoolVar(&o.Verbose, "v", false, "log the embedded stack at info level")
	fs.BoolVar(&o.VerifyReplay, "verify-replay", false, "with --brokers: replay the run's log afterwards and compare it with the recorded decisions")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return o, true, nil
		}
		return o, false, fmt.Errorf("sluice loadtest: %w", err)
	}
	if fs.NArg() > 0 {
		return o, false, fmt.Errorf("sluice loadtest: unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	o.APIKeys = keys
	o.Seed = *seed
	if *brokers != "" {
		o.Brokers = bus.SplitBrokers(*brokers)
	}
	return o, false, nil
}

// checkModes refuses a command line that names no scenario, not exactly
// one way to run, or a flag without the mode it needs; the first broken
// rule, in this order, is the error.
func (o *Options) checkModes() error {
	modes := 0
	for _, b := range []bool{o.Embedded, o.URL != "", o.Baseline, len(o.Brokers) > 0} {
		if b {
			modes++
		}
	}
	for _, r := range []struct {
		broken bool
		why    string
	}{
		{o.Scenario == "", "--scenario NAME|FILE is required"},
		{modes != 1, "choose exactly one of --embedded, --brokers ADDR, --url URL, --baseline"},
		{o.KillLedgerAt > 0 && len(o.Brokers) == 0, "--kill-ledger-at needs --brokers"},
		{o.KillOwnerOf != "" && o.KillLedgerAt <= 0, "--kill-owner-of needs --kill-ledger-at"},
		{o.ConfigFile != "" && !o.Embedded && len(o.Brokers) == 0, "--config needs --embedded or --brokers"},
		{o.URL != "" && len(o.APIKeys) == 0, "--url needs --api-key"},
	} {
		if r.broken {
			return errors.New("sluice loadtest: " + r.why)
		}
	}
	return nil
}

// gatewayYAML is the run's gateway config maker: o.ConfigFile made to run
// against the simulator, else the one generated from the scenario.
func (o *Options) gatewayYAML(sc *Scenario, keys Keys) (gatewayYAML, error) {
	if o.ConfigFile == "" {
		return generatedConfig(sc, keys), nil
	}
	return handwrittenConfig(sc, o.ConfigFile, keys)
}

// target is where the load goes.
type target struct {
	mode string
	// gwConfig names the gateway config: "generated", or the --config file.
	gwConfig string
	chatURL  string
	keys     []string // per tenant
	simURL   string
	ownSim   bool
	quota    *SluiceQuota
	retries  int
	routeTag string
	// stack and killLedgerAt: the --brokers mode's processes and fault.
	stack        *stack
	killLedgerAt time.Duration
	killOwnerOf  string
	faults       func(context.Context, FaultEnv) []FaultWindow
	verify       bool
	// budgetBrokers, in an --embedded run whose config has budgets, is
	// the in-process broker whose log the budget report is read from.
	budgetBrokers []string
}

// Execute runs scenario sc with options o and returns the report. progress
// goes to stderr.
func Execute(ctx context.Context, sc *Scenario, o Options, stderr io.Writer) (*Report, error) {
	if o.Seed != 0 {
		sc.Seed = o.Seed
	}
	dur := sc.Duration.D()
	if o.Duration > 0 {
		dur = o.Duration
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 20000
	}
	hc := &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        8192,
		MaxIdleConnsPerHost: 8192,
		IdleConnTimeout:     90 * time.Second,
	}}
	defer hc.CloseIdleConnections()

	var (
		tg   target
		stop func()
		err  error
	)
	switch {
	case o.Embedded:
		tg, stop, err = o.embeddedTarget(ctx, sc, hc, stderr)
	case len(o.Brokers) > 0:
		tg, stop, err = o.stackTarget(ctx, sc, hc, stderr)
	case o.URL != "":
		tg, stop = o.gatewayTarget(sc), func() {}
	case o.Baseline:
		tg, stop, err = o.baselineTarget(sc)
	default:
		stop = func() {}
	}
	if err != nil {
		return nil, err
	}
	defer stop()
	o.finishTarget(sc, &tg)
	drain := o.Drain
	if drain <= 0 {
		for _, t := range sc.Tenants {
			drain = max(drain, sc.Classes[t.Class].Deadline.D())
		}
		drain = min(drain+time.Second, 2*time.Minute)
	}
	return execute(ctx, sc, tg, hc, dur, drain, o.MaxInFlight, stderr)
}

// runLog is the stack's logger: silent unless --verbose.
func (o *Options) runLog(stderr io.Writer) *slog.Logger {
	if o.Verbose {
		return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// embeddedTarget starts the whole stack in this process (services/dev).
func (o *Options) embeddedTarget(ctx context.Context, sc *Scenario, hc *http.Client, stderr io.Writer) (target, func(), error) {
	tg := target{mode: "embedded"}
	keys := NewKeys(sc)
	gwYAML, err := o.gatewayYAML(sc, keys)
	if err != nil {
		return tg, nil, err
	}
	simCfg := sc.SimConfig
	hasBudgets := false
	st, err := dev.Start(ctx, dev.Options{
		Addr:   "127.0.0.1:0",
		APIKey: keys[warmupTenant] + "-dev",
		Sim:    &simCfg,
		Config: func(simURL string) (*config.Config, error) {
			y, err := gwYAML(simURL)
			if err != nil {
				return nil, err
			}
			cfg, err := config.Load(bytes.NewReader(y))
			if err == nil {
				if lc, perr := ledger.ParseConfig(cfg.LedgerJSON()); perr == nil && lc.Budget != nil && len(lc.Budget.Budgets) > 0 {
					hasBudgets = true
				}
			}
			return cfg, err
		},
		Log: o.runLog(stderr),
	})
	if err != nil {
		return tg, nil, fmt.Errorf("embedded stack: %w", err)
	}
	tg.chatURL = st.GatewayURL + "/v1/chat/completions"
	tg.simURL, tg.ownSim = st.SimURL, true
	if hasBudgets { // read back from the in-process broker's log after the run
		tg.budgetBrokers = st.Brokers
	}
	o.tenantKeys(sc, keys, &tg)
	if err := warmup(ctx, hc, tg.chatURL, keys[warmupTenant], sc.Model); err != nil {
		st.Close()
		return tg, nil, err
	}
	if o.Started != nil {
		o.Started(st.MetricsURL, st.SimURL)
	}
	return tg, st.Close, nil
}

// stackTarget starts the stack as separate processes on the brokers.
func (o *Options) stackTarget(ctx context.Context, sc *Scenario, hc *http.Client, stderr io.Writer) (target, func(), error) {
	tg := target{mode: "stack"}
	keys := NewKeys(sc)
	gwYAML, err := o.gatewayYAML(sc, keys)
	if err != nil {
		return tg, nil, err
	}
	fmt.Fprintf(stderr, "starting the stack on %s (simulator, %d ledgers, gateway)…\n", strings.Join(o.Brokers, ","), stackLedgers)
	st, err := startStack(ctx, sc, o.SluiceBin, o.Brokers, keys, gwYAML, o.runLog(stderr), gatewayProc{})
	if err != nil {
		return tg, nil, fmt.Errorf("stack on %s: %w", strings.Join(o.Brokers, ","), err)
	}
	tg.stack = st
	tg.killLedgerAt, tg.killOwnerOf = o.KillLedgerAt, o.KillOwnerOf
	tg.chatURL = st.gwURL + "/v1/chat/completions"
	tg.simURL, tg.ownSim = st.simURL, true
	o.tenantKeys(sc, keys, &tg)
	if err := warmup(ctx, hc, tg.chatURL, keys[warmupTenant], sc.Model); err != nil {
		st.Close()
		return tg, nil, fmt.Errorf("%w (logs in %s)", err, st.dir)
	}
	return tg, st.Close, nil
}

// tenantKeys gives each tenant its key, and the quota the report checks
// against when the config is generated (a hand-written config's limits are
// its own).
func (o *Options) tenantKeys(sc *Scenario, keys Keys, tg *target) {
	for _, t := range sc.Tenants {
		tg.keys = append(tg.keys, keys[t.ID])
	}
	if o.ConfigFile == "" {
		q := EffectiveQuota(sc)
		tg.quota = &q
	}
}

// gatewayTarget drives a gateway that is already running (--url).
func (o *Options) gatewayTarget(sc *Scenario) target {
	tg := target{mode: "gateway"}
	base := strings.TrimRight(o.URL, "/")
	base = strings.TrimSuffix(base, "/v1")
	tg.chatURL = base + "/v1/chat/completions"
	tg.simURL = strings.TrimRight(o.SimURL, "/")
	for i := range sc.Tenants {
		tg.keys = append(tg.keys, o.APIKeys[min(i, len(o.APIKeys)-1)])
	}
	q := EffectiveQuota(sc)
	tg.quota = &q
	return tg
}

// baselineTarget sends straight to a simulator (--baseline): no Sluice.
func (o *Options) baselineTarget(sc *Scenario) (target, func(), error) {
	tg := target{mode: "baseline"}
	stop := func() {}
	if o.SimURL != "" {
		tg.simURL = strings.TrimRight(o.SimURL, "/")
	} else {
		srv, err := sim.New(sc.SimConfig)
		if err != nil {
			return tg, nil, fmt.Errorf("simulator: %w", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return tg, nil, err
		}
		hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		stop = func() { hs.Close() }
		tg.simURL, tg.ownSim = "http://"+ln.Addr().String(), true
	}
	tg.chatURL = tg.simURL + "/openai/v1/chat/completions"
	for range sc.Tenants {
		tg.keys = append(tg.keys, "sk-baseline")
	}
	return tg, stop, nil
}

// finishTarget sets what every mode shares: the config label, SDK
// retries, the route tag and the stack's faults.
func (o *Options) finishTarget(sc *Scenario, tg *target) {
	tg.gwConfig = "generated"
	if o.ConfigFile != "" {
		tg.gwConfig = o.ConfigFile
	} else if tg.mode == "gateway" || tg.mode == "baseline" {
		tg.gwConfig = ""
	}
	tg.retries = o.Retries
	if tg.retries < 0 {
		tg.retries = 0
		if tg.mode == "baseline" {
			tg.retries = 3
		}
	}
	tg.routeTag = sc.Model
	if tg.mode == "baseline" {
		tg.routeTag = "sim:" + sc.Provider + "/" + sc.Model
	}
	if tg.stack != nil {
		tg.faults, tg.verify = o.Faults, o.VerifyReplay
	}
}

// warmup waits until the gateway serves a request end to end (the ledger
// member may still be joining its group right after start).
func warmup(ctx context.Context, hc *http.Client, url, key, model string) error {
	body := []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"warm up"}],"max_tokens":1}`)
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("embedded stack never served a warm-up request: %s", last)
}

func fetchStats(ctx context.Context, hc *http.Client, simURL string) (*sim.Stats, error) {
	if simURL == "" {
		return nil, errors.New("no simulator URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, simURL+"/sim/stats", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/sim/stats: HTTP %d", resp.StatusCode)
	}
	var s sim.Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, err
	}
	return &s, nil
}

func resetSim(ctx context.Context, hc *http.Client, simURL string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, simURL+"/sim/reset", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/sim/reset: HTTP %d", resp.StatusCode)
	}
	return nil
}

// statsDelta is b − a for one provider (nil when either is missing).
func statsDelta(a, b *sim.Stats, provider string) *sim.ProviderStats {
	if a == nil || b == nil {
		return nil
	}
	if provider == allProviders {
		return sumDeltas(a, b)
	}
	pa, pb := a.Providers[provider], b.Providers[provider]
	if pb == nil {
		return &sim.ProviderStats{RateLimitedBy: map[string]int64{}}
	}
	if pa == nil {
		pa = &sim.ProviderStats{}
	}
	d := &sim.ProviderStats{
		Requests: pb.Requests - pa.Requests, OK: pb.OK - pa.OK, RateLimited: pb.RateLimited - pa.RateLimited,
		Overloaded: pb.Overloaded - pa.Overloaded, BadRequests: pb.BadRequests - pa.BadRequests,
		Streams: pb.Streams - pa.Streams, Cancelled: pb.Cancelled - pa.Cancelled, CancelledTokens: pb.CancelledTokens - pa.CancelledTokens,
		RateLimitedBy: map[string]int64{},
		Tokens: sim.TokenStats{Input: pb.Tokens.Input - pa.Tokens.Input, Output: pb.Tokens.Output - pa.Tokens.Output,
			Total: pb.Tokens.Total - pa.Tokens.Total, CacheRead: pb.Tokens.CacheRead - pa.Tokens.CacheRead, CacheWrite: pb.Tokens.CacheWrite - pa.Tokens.CacheWrite},
	}
	for k, v := range pb.RateLimitedBy {
		if x := v - pa.RateLimitedBy[k]; x != 0 {
			d.RateLimitedBy[k] = x
		}
	}
	return d
}

// allProviders asks statsDelta for the simulator's totals over every
// provider dialect: a hand-written config's fallback (OpenAI → Azure) sends
// calls to more than the scenario's own provider, and a 429 there is as
// much a provider 429 as one at the primary.
const allProviders = ""

// sumDeltas is the sum over every provider of b of its delta since a.
func sumDeltas(a, b *sim.Stats) *sim.ProviderStats {
	t := &sim.ProviderStats{RateLimitedBy: map[string]int64{}}
	for name := range b.Providers {
		t.Add(statsDelta(a, b, name))
	}
	return t
}

// perProvider is the delta of each provider that saw calls over the run,
// when more than one did (nil otherwise: the headline says it all).
func perProvider(a, b *sim.Stats) map[string]*sim.ProviderStats {
	if a == nil || b == nil {
		return nil
	}
	out := map[string]*sim.ProviderStats{}
	for name := range b.Providers {
		if d := statsDelta(a, b, name); d != nil && d.Requests > 0 {
			out[name] = d
		}
	}
	if len(out) < 2 {
		return nil
	}
	return out
}

// Cancellation causes.
var (
	errClientCancel = errors.New("client cancelled the request")
	errRunOver      = errors.New("drain period over")
)

type progress struct {
	sent, done, ok, n429 atomic.Int64
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func execute(ctx context.Context, sc *Scenario, tg target, hc *http.Client, dur, drain time.Duration, maxInFlight int, stderr io.Writer) (*Report, error) {
	x := &execution{sc: sc, tg: tg, hc: hc, dur: dur, drain: drain, maxInFlight: maxInFlight, faultsDone: make(chan struct{})}
	x.sched = Schedule(sc, sc.Seed, dur)
	x.bodies = make([][]byte, len(sc.Tenants))
	for i, t := range sc.Tenants {
		x.bodies[i] = requestBody(t.Model, &t)
	}
	if tg.ownSim {
		if err := resetSim(ctx, hc, tg.simURL); err != nil {
			return nil, err
		}
	}
	x.before, x.statsErr = fetchStats(ctx, hc, tg.simURL)

	// Requests run under runCtx; it is cancelled when the drain period ends.
	runCtx, abort := context.WithCancelCause(context.WithoutCancel(ctx))
	defer abort(nil)
	go func() {
		select {
		case <-ctx.Done():
			abort(errRunOver)
		case <-runCtx.Done():
		}
	}()
	x.records = make([]record, len(x.sched))
	x.start = time.Now()
	stopProgress := startProgress(stderr, &x.pr, x.start, dur, len(x.sched))
	defer x.startFaults(runCtx)()
	defer x.startSnapshots(ctx)()

	interrupted := x.send(ctx, runCtx)
	// Arrival window over: wait for in-flight requests up to the drain.
	if w := time.Until(x.start.Add(dur)); w > 0 && !interrupted {
		select {
		case <-ctx.Done():
		case <-time.After(w):
		}
	}
	waitDone := make(chan struct{})
	go func() { x.wg.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case <-time.After(drain):
		abort(errRunOver)
		<-waitDone
	case <-ctx.Done():
		abort(errRunOver)
		<-waitDone
	}
	x.end = time.Now()
	<-x.faultsDone
	stopProgress()
	return x.report(context.WithoutCancel(ctx))
}

// execution is one run of execute: the schedule, what each arrival
// became, and the simulator's counters at the points the report needs.
type execution struct {
	sc          *Scenario
	tg          target
	hc          *http.Client
	dur, drain  time.Duration
	maxInFlight int

	sched      []Arrival
	bodies     [][]byte
	records    []record
	start, end time.Time
	pr         progress
	inflight   atomic.Int64
	maxIn      atomic.Int64
	wg         sync.WaitGroup

	before   *sim.Stats
	statsErr error
	gStart   atomic.Pointer[sim.Stats] // after the first enforcement window
	atEnd    atomic.Pointer[sim.Stats] // at the end of the arrival window

	faultMu    sync.Mutex
	faults     []string
	windows    []FaultWindow
	faultsDone chan struct{}
}

// startFaults arms the run's faults: the ledger kill at killLedgerAt and
// the scenario's fault script. The returned func disarms the kill timer.
func (x *execution) startFaults(runCtx context.Context) (stop func()) {
	tg := x.tg
	stop = func() {}
	if tg.stack != nil && tg.killLedgerAt > 0 {
		t := time.AfterFunc(tg.killLedgerAt, func() {
			var f string
			if tg.killOwnerOf != "" {
				name, owned, err := tg.stack.killOwnerOf(runCtx, tg.killOwnerOf)
				f = fmt.Sprintf("kill -9 %s (owner of %q's partition; it owned %v) at %s, %s (err: %v)", name, tg.killOwnerOf, owned, time.Since(x.start).Truncate(time.Millisecond), time.Now().UTC().Format("15:04:05.000"), err)
			} else {
				name, err := tg.stack.killBusiestLedger()
				f = fmt.Sprintf("kill -9 %s (the busiest) at %s, %s (err: %v)", name, time.Since(x.start).Truncate(time.Millisecond), time.Now().UTC().Format("15:04:05.000"), err)
			}
			x.faultMu.Lock()
			x.faults = append(x.faults, f)
			x.faultMu.Unlock()
		})
		stop = func() { t.Stop() }
	}
	if tg.stack == nil || tg.faults == nil {
		close(x.faultsDone)
		return stop
	}
	go func() {
		defer close(x.faultsDone)
		env := tg.stack.env(x.start)
		env.Provider429 = func(ctx context.Context) (int64, error) {
			st, err := fetchStats(ctx, x.hc, tg.simURL)
			if err != nil {
				return 0, err
			}
			if p := st.Providers[x.sc.Provider]; p != nil {
				return p.RateLimited, nil
			}
			return 0, nil
		}
		x.windows = tg.faults(runCtx, env)
	}()
	return stop
}

// startSnapshots takes the simulator's counters at the end of the
// arrival window and after the first enforcement window: goodput is
// measured from there, so the provider's initially full buckets do not
// count as sustained capacity.
func (x *execution) startSnapshots(ctx context.Context) (stop func()) {
	snap := func(into *atomic.Pointer[sim.Stats]) func() {
		return func() {
			if s, err := fetchStats(ctx, x.hc, x.tg.simURL); err == nil {
				into.Store(s)
			}
		}
	}
	endTimer := time.AfterFunc(x.dur, snap(&x.atEnd))
	skip := x.sc.ProviderLimits().Window.D()
	if skip <= 0 || skip > x.dur/2 {
		x.gStart.Store(x.before)
		return func() { endTimer.Stop() }
	}
	t := time.AfterFunc(skip, snap(&x.gStart))
	return func() { endTimer.Stop(); t.Stop() }
}

// send starts each arrival at its time, dropping those over maxInFlight,
// and reports whether ctx ended the arrival window early (the arrivals
// not sent are recorded as unfinished).
func (x *execution) send(ctx, runCtx context.Context) (interrupted bool) {
	sc, tg := x.sc, x.tg
	for i := range x.sched {
		a := x.sched[i]
		if wait := time.Until(x.start.Add(a.At)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				for j := i; j < len(x.sched); j++ {
					x.records[j] = record{tenant: x.sched[j].Tenant, class: sc.Tenants[x.sched[j].Tenant].Class, route: tg.route(sc, x.sched[j].Tenant), outcome: OutUnfinished}
				}
				return true
			case <-t.C:
			}
		}
		x.pr.sent.Add(1)
		if int(x.inflight.Load()) >= x.maxInFlight {
			x.records[i] = record{tenant: a.Tenant, class: sc.Tenants[a.Tenant].Class, route: tg.route(sc, a.Tenant), outcome: OutDropped}
			x.pr.done.Add(1)
			continue
		}
		n := x.inflight.Add(1)
		for m := x.maxIn.Load(); n > m && !x.maxIn.CompareAndSwap(m, n); m = x.maxIn.Load() {
		}
		x.wg.Add(1)
		go func(i int, a Arrival) {
			defer x.wg.Done()
			defer x.inflight.Add(-1)
			x.records[i] = doRequest(runCtx, sc, tg, x.hc, x.bodies[a.Tenant], a, x.start, &x.pr)
			x.pr.done.Add(1)
		}(i, a)
	}
	return false
}

// report builds the run's report, with the budgets and the stack's audit
// of the log when the run has them.
func (x *execution) report(ctx context.Context) (*Report, error) {
	tg := x.tg
	final, _ := fetchStats(ctx, x.hc, tg.simURL)
	atEnd := x.atEnd.Load()
	if atEnd == nil {
		atEnd = final
	}
	rep := buildReport(x.sc, tg, x.records, x.before, x.gStart.Load(), atEnd, final, x.statsErr, x.start, x.end, x.dur, x.drain, int(x.maxIn.Load()), x.maxInFlight)
	if tg.budgetBrokers != nil {
		bs, err := readBudgets(ctx, tg.budgetBrokers, bus.DefaultNames(), x.start)
		if err != nil {
			return rep, fmt.Errorf("read the run's budgets: %w", err)
		}
		rep.Budgets = bs
	}
	if tg.stack == nil {
		return rep, nil
	}
	sr, err := tg.stack.report(ctx, x.start, x.start.Add(x.dur), rep, x.windows, tg.verify)
	x.faultMu.Lock()
	sr.Faults = x.faults
	x.faultMu.Unlock()
	for _, r := range x.records {
		if r.class == "interactive" && r.outcome != OutSuccess {
			sr.InteractiveFailed = append(sr.InteractiveFailed, fmt.Sprintf("%s: sent at %.3fs, ended after %.3fs (status %d, %s, %s)",
				r.outcome, (r.doneAt-r.latency).Seconds(), r.latency.Seconds(), r.status, r.decision, r.code))
			if sr.InteractiveFailedCodes == nil {
				sr.InteractiveFailedCodes = map[string]int{}
			}
			sr.InteractiveFailedCodes[r.code]++
		}
	}
	rep.Stack = sr
	if err != nil {
		return rep, fmt.Errorf("audit the run's log: %w", err)
	}
	return rep, nil
}

func startProgress(w io.Writer, pr *progress, start time.Time, dur time.Duration, total int) func() {
	term := isTerminal(w)
	every := 5 * time.Second
	if term {
		every = 250 * time.Millisecond
	}
	line := func() string {
		el := time.Since(start).Truncate(time.Second)
		return fmt.Sprintf("loadtest %s/%s  sent %d/%d  done %d  ok %d  429s %d", el, dur, pr.sent.Load(), total, pr.done.Load(), pr.ok.Load(), pr.n429.Load())
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				if term {
					fmt.Fprintf(w, "\r\033[K%s\n", line())
				} else {
					fmt.Fprintln(w, line())
				}
				return
			case <-t.C:
				if term {
					fmt.Fprintf(w, "\r\033[K%s", line())
				} else {
					fmt.Fprintln(w, line())
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop); <-done }) }
}

// requestBody is tenant t's chat request: one user message of about
// PromptTokens tokens by the simulator's count (4 bytes per token, 8 tokens
// of overhead and role) and max_tokens.
func requestBody(model string, t *TenantSpec) []byte {
	n := max(1, t.PromptTokens-8)
	m := map[string]any{
		"model":      model,
		"messages":   []map[string]string{{"role": "user", "content": strings.Repeat("tok ", int(n))}},
		"max_tokens": t.MaxTokens,
	}
	if t.Stream {
		m["stream"] = true
		m["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, _ := json.Marshal(m)
	return b
}

// errorBody is the part of an error response the client reads.
type errorBody struct {
	Error struct {
		Code   any `json:"code"`
		Sluice *struct {
			Type            string `json:"type"`
			GatewayDecision string `json:"gateway_decision"`
			RetryAfterMs    int64  `json:"retry_after_ms"`
		} `json:"sluice"`
	} `json:"error"`
}

const (
	backoffBase = 500 * time.Millisecond
	backoffCap  = 8 * time.Second
)

// route is the route tag of tenant i's requests: the scenario's route,
// or the tenant's own model's when it has one.
func (tg target) route(sc *Scenario, i int) string {
	m := sc.Tenants[i].Model
	if m == "" || m == sc.Model {
		return tg.routeTag
	}
	if tg.mode == "baseline" {
		return "sim:" + sc.Provider + "/" + m
	}
	return m
}

// doRequest runs one logical request with its own deadline, optional
// client cancel and the client retry policy.
func doRequest(runCtx context.Context, sc *Scenario, tg target, hc *http.Client, body []byte, a Arrival, runStart time.Time, pr *progress) (rec record) {
	t := &sc.Tenants[a.Tenant]
	rec = record{tenant: a.Tenant, class: t.Class, route: tg.route(sc, a.Tenant)}
	deadline := sc.Classes[t.Class].Deadline.D()
	cctx, cancel := context.WithCancelCause(runCtx)
	defer cancel(nil)
	ctx, cancelDL := context.WithTimeout(cctx, deadline)
	defer cancelDL()
	if a.Cancel {
		tm := time.AfterFunc(a.CancelAt, func() { cancel(errClientCancel) })
		defer tm.Stop()
	}
	c := &logicalCall{runCtx: runCtx, cctx: cctx, ctx: ctx, tg: tg, t: t, a: a, body: body, deadline: deadline,
		rng: rand.New(rand.NewPCG(a.Seed, uint64(a.Tenant)))}
	c.start = time.Now()
	defer func() { rec.latency, rec.doneAt = time.Since(c.start), time.Since(runStart) }()
	for attempt := 0; ; attempt++ {
		rec.attempts++
		resp, rb, headersAt, err := c.send(hc, attempt)
		var again bool
		if err != nil {
			again = c.transportFailed(&rec, attempt)
		} else {
			again = c.answered(&rec, resp, rb, headersAt, attempt, pr)
		}
		if !again {
			return rec
		}
	}
}

// logicalCall is one logical request of doRequest: its three contexts (the
// run's; the client's, which a client cancel ends; and the deadline's
// within it), its retry randomness and when it started.
type logicalCall struct {
	runCtx, cctx, ctx context.Context
	tg                target
	t                 *TenantSpec
	a                 Arrival
	body              []byte
	deadline          time.Duration
	rng               *rand.Rand
	start             time.Time
}

// endedBy names what ended the call early (a client cancel, the run's end,
// the deadline), or "" if nothing did.
func (c *logicalCall) endedBy() string {
	switch {
	case context.Cause(c.cctx) == errClientCancel:
		return OutCancelled
	case context.Cause(c.runCtx) != nil:
		return OutUnfinished
	case c.ctx.Err() != nil:
		return OutTimeout
	}
	return ""
}

// send makes one attempt and reads its whole answer; headersAt is when the
// response headers arrived.
func (c *logicalCall) send(hc *http.Client, attempt int) (resp *http.Response, rb []byte, headersAt time.Time, err error) {
	req, _ := http.NewRequestWithContext(c.ctx, http.MethodPost, c.tg.chatURL, bytes.NewReader(c.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.tg.keys[c.a.Tenant])
	// What the official SDKs send (no X-Sluice-Deadline-Ms): the
	// client's timeout and its retry count, so the gateway learns the
	// deadline the way it does from real callers.
	setSDKHeaders(req.Header, time.Until(c.start.Add(c.deadline)), attempt)
	if c.tg.mode != "baseline" {
		req.Header.Set("X-Sluice-Class", c.t.Class)
	}
	resp, err = hc.Do(req)
	headersAt = time.Now()
	if err == nil {
		rb, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	return resp, rb, headersAt, err
}

// transportFailed records an attempt that got no answer and says whether
// to try again (after a backoff): not if the call was ended, nor when the
// retries are spent.
func (c *logicalCall) transportFailed(rec *record, attempt int) (again bool) {
	if out := c.endedBy(); out != "" {
		rec.outcome = out
		return false
	}
	rec.outcome, rec.code = OutFinalFailure, "transport_error"
	if attempt < c.tg.retries && sleepBackoff(c.ctx, c.rng, attempt, 0) {
		return true
	}
	if out := c.endedBy(); out != "" {
		rec.outcome = out
	}
	return false
}

// answered records an attempt's answer and says whether to try again: a
// retryable failure with retries left, once its backoff (or Retry-After)
// has passed within the deadline.
func (c *logicalCall) answered(rec *record, resp *http.Response, rb []byte, headersAt time.Time, attempt int, pr *progress) (again bool) {
	rec.status = resp.StatusCode
	gwAttempts := 1
	if v, err := strconv.Atoi(resp.Header.Get("X-Sluice-Attempts")); err == nil && v >= 0 {
		gwAttempts = v
	}
	if resp.StatusCode < 300 {
		rec.succeeded(resp.Header, gwAttempts, headersAt.Sub(c.start), pr)
		return false
	}
	retryable := rec.failed(resp, rb, gwAttempts, c.tg.mode != "baseline", pr)
	if retryable && attempt < c.tg.retries {
		if sleepBackoff(c.ctx, c.rng, attempt, retryAfter(resp.Header)) {
			return true
		}
		if out := c.endedBy(); out != "" {
			rec.outcome = out
		}
	}
	return false
}

// succeeded records a success: the gateway's attempts upstream, and the
// queue wait from X-Sluice-Queue-Ms or else the caller's wait until the
// response headers (retries and backoff included).
func (rec *record) succeeded(h http.Header, gwAttempts int, waited time.Duration, pr *progress) {
	rec.outcome = OutSuccess
	rec.upstream += gwAttempts
	rec.dispatched = true
	pr.ok.Add(1)
	if q := h.Get("X-Sluice-Queue-Ms"); q != "" {
		if v, err := strconv.ParseFloat(q, 64); err == nil {
			rec.queueMs, rec.queueKnown = v, true
		}
	}
	if !rec.queueKnown {
		rec.queueMs = float64(waited.Microseconds()) / 1000
	}
}

// failed records an error answer: its code, the gateway's decision, whether
// the provider refused it (it was dispatched) or the gateway did, and
// returns whether an SDK would retry it.
func (rec *record) failed(resp *http.Response, body []byte, gwAttempts int, viaSluice bool, pr *progress) (retryable bool) {
	var eb errorBody
	_ = json.Unmarshal(body, &eb)
	code := ""
	switch c := eb.Error.Code.(type) {
	case string:
		code = c
	case float64:
		code = strconv.Itoa(int(c))
	}
	rec.code = code
	local := false
	decision := ""
	if s := eb.Error.Sluice; s != nil && viaSluice {
		decision = s.GatewayDecision
		local = decision != "admitted_then_provider_rejected" && decision != "admitted" && decision != "queued_then_admitted"
	}
	rec.decision = decision
	if resp.StatusCode == http.StatusTooManyRequests {
		pr.n429.Add(1)
	}
	if !local {
		rec.upstream += max(1, gwAttempts)
		rec.dispatched = true
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			rec.p429++
		case resp.StatusCode >= 500:
			rec.p503++
		}
	} else if resp.StatusCode == http.StatusTooManyRequests {
		rec.l429++
	}
	rec.outcome = OutFinalFailure
	if decision == "queued_then_expired" {
		rec.outcome = OutTimeout
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, 500, 502, 503, 504, 529:
		retryable = true
	}
	if code == "insufficient_quota" || code == "cancelled" || resp.Header.Get("x-should-retry") == "false" {
		retryable = false
	}
	return retryable
}

// setSDKHeaders sets the headers every request of the official OpenAI and
// Anthropic Python SDKs carries (openai 3.57.0, anthropic 2.14.0):
// X-Stainless-Read-Timeout, the client's timeout in seconds as Python
// prints a float ("60.0"), here the time left of the request's deadline;
// and X-Stainless-Retry-Count, the retries made so far.
func setSDKHeaders(h http.Header, left time.Duration, retries int) {
	if left >= time.Millisecond {
		v := strconv.FormatFloat(left.Round(time.Millisecond).Seconds(), 'f', -1, 64)
		if !strings.ContainsAny(v, ".e") {
			v += ".0"
		}
		h.Set("X-Stainless-Read-Timeout", v)
	}
	h.Set("X-Stainless-Retry-Count", strconv.Itoa(retries))
}

// retryAfter reads retry-after-ms or Retry-After (seconds or HTTP date).
func retryAfter(h http.Header) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
			return time.Duration(s * float64(time.Second))
		}
		if t, err := http.ParseTime(v); err == nil {
			return time.Until(t)
		}
	}
	return 0
}

// sleepBackoff waits max(Retry-After, full-jitter exponential backoff) and
// reports whether the request may try again (false when its context ended).
func sleepBackoff(ctx context.Context, rng *rand.Rand, attempt int, ra time.Duration) bool {
	ceil := min(backoffCap, backoffBase*time.Duration(math.Pow(2, float64(attempt))))
	d := time.Duration(rng.Int64N(int64(ceil) + 1))
	d = max(d, ra)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += "-dirty"
		}
	}
	return v
}

// conditions are the run's conditions as the report states them.
func conditions(sc *Scenario, tg target, records []record, start, end time.Time, dur, drain time.Duration, maxIn, limit int) Conditions {
	var cc Conditions
	c := &cc
	c.Version, c.GoVersion, c.Seed = version(), runtime.Version(), sc.Seed
	c.StartedAt, c.EndedAt = start.UTC().Truncate(time.Millisecond), end.UTC().Truncate(time.Millisecond)
	c.DurationS, c.DrainS = round3(dur.Seconds()), round3(drain.Seconds())
	c.Target, c.SimURL = tg.chatURL, tg.simURL
	c.Routes = []string{tg.routeTag}
	for i := range sc.Tenants {
		if r := tg.route(sc, i); !slices.Contains(c.Routes, r) {
			c.Routes = append(c.Routes, r)
		}
	}
	c.Model, c.Provider = sc.Model, sc.Provider
	c.Streaming = sc.Streaming()
	c.Arrivals = "open-loop Poisson per tenant (non-homogeneous by thinning for ramps and bursts)"
	c.Concurrency.MaxInFlight, c.Concurrency.Limit = maxIn, limit
	c.Timeouts = map[string]ClassConditions{}
	for name, cl := range sc.Classes {
		c.Timeouts[name] = ClassConditions{DeadlineMs: cl.Deadline.D().Milliseconds(), MaxWaitMs: cl.MaxWait.D().Milliseconds(),
			MaxDepth: cl.MaxDepth, AgeOffsetMs: cl.AgeOffset.D().Milliseconds()}
	}
	c.ClientRetries = tg.retries
	c.ClientBackoff = fmt.Sprintf("full jitter: uniform [0, min(%s, %s×2^attempt)], at least Retry-After; retries 429/5xx and transport errors, not insufficient_quota or x-should-retry: false", backoffCap, backoffBase)
	c.ProviderLimits = sc.ProviderLimits()
	c.SluiceQuota = tg.quota
	c.GatewayConfig = tg.gwConfig
	c.Storms = sc.SimConfig.Storms
	c.SimLatency, c.SimOutput = sc.SimConfig.Latency, sc.SimConfig.Output
	c.QueueWaitSource = "client_ttfb: the gateway sends no X-Sluice-Queue-Ms header, so queue_wait_ms is the client-measured time from sending to the response headers of a success (retries and backoff included; for non-streaming responses the whole response); it bounds the gateway queue wait from above"
	for _, r := range records {
		if r.queueKnown {
			c.QueueWaitSource = "header: X-Sluice-Queue-Ms of successful responses"
			break
		}
	}
	return cc
}

// providerCounts fills what the provider saw (the simulator's own
// counters, else the client's view) and the goodput over the window after
// the first enforcement window.
func (rep *Report) providerCounts(sc *Scenario, tg target, before, gStart, atEnd, final *sim.Stats, statsErr error,
	dur time.Duration, offRPS, offTPS, offIn, offOut float64) {
	rep.Local429 = int64(rep.Totals.Local429)
	if d := statsDelta(before, final, allProviders); d != nil {
		rep.Simulator, rep.SimulatorProviders = d, perProvider(before, final)
		rep.Provider429, rep.Provider503, rep.Provider429Source = d.RateLimited, d.Overloaded, "simulator"
		rep.UpstreamAttempts = d.Requests
		rep.Wasted = Wasted{Source: "simulator", UpstreamCalls: d.Cancelled, Tokens: d.CancelledTokens,
			Ratio: ratio(float64(d.Cancelled), float64(d.OK+d.Cancelled))}
	} else {
		rep.Wasted = Wasted{Source: "unavailable"}
		rep.Provider429, rep.Provider503, rep.Provider429Source = int64(rep.Totals.Provider429), int64(rep.Totals.Provider503), "client"
		rep.UpstreamAttempts = int64(rep.Totals.UpstreamAttempts)
	}
	rep.RetryAmplification = ratio(float64(rep.UpstreamAttempts), float64(rep.Totals.Requests))
	window := dur
	var gd *sim.ProviderStats
	if gStart == nil {
		gStart = before
	}
	if atEnd != nil && gStart != nil {
		gd = statsDelta(gStart, atEnd, sc.Provider)
		if s, e := atEnd.Now, gStart.Now; !s.IsZero() && !e.IsZero() && s.After(e) {
			window = s.Sub(e)
		}
	}
	rep.Goodput = computeGoodput(sc, gd, window, offRPS, offTPS, offIn, offOut, tg.quota, rep.Totals.Outcomes.Success)
	if statsErr != nil && gd == nil {
		rep.Goodput.Note = strings.TrimSpace(rep.Goodput.Note + " (" + statsErr.Error() + ")")
	}
}

// buildReport sums a run's records and the simulator's counts into the
// report: offered load, then classes, routes and totals, then tenants and
// their fair shares, then what the provider saw.
func buildReport(sc *Scenario, tg target, records []record, before, gStart, atEnd, final *sim.Stats, statsErr error,
	start, end time.Time, dur, drain time.Duration, maxIn, limit int) *Report {
	rep := &Report{Schema: ReportSchema, Scenario: sc.Name, Description: sc.Description, Mode: tg.mode,
		Classes: map[string]*Group{}, Routes: map[string]*Group{}}
	rep.Conditions = conditions(sc, tg, records, start, end, dur, drain, maxIn, limit)
	off := offeredLoad(sc, dur)
	tAcc := rep.groupRecords(sc, records, dur, off)
	rep.tenantShares(sc, tAcc, dur, off.tenants)
	rep.providerCounts(sc, tg, before, gStart, atEnd, final, statsErr, dur, off.rps, off.tps, off.in, off.out)
	rep.GoodputRatio = rep.Goodput.Ratio
	rep.CapacityStorm = stormReport(sc, records, dur, off.rps)
	return rep
}

// offered is the scenario's offered load: each tenant's request rate, and
// over all tenants requests, tokens, prompt and completion tokens a second.
type offered struct {
	tenants           []float64
	rps, tps, in, out float64
}

func offeredLoad(sc *Scenario, dur time.Duration) offered {
	o := offered{tenants: make([]float64, len(sc.Tenants))}
	for i := range sc.Tenants {
		t := &sc.Tenants[i]
		o.tenants[i] = OfferedRate(t, dur)
		o.rps += o.tenants[i]
		o.in += o.tenants[i] * float64(t.PromptTokens)
		o.out += o.tenants[i] * float64(t.MaxTokens)
	}
	o.tps = o.in + o.out
	return o
}

// groupRecords sums the records by class, by route and in total into the
// report, and returns each tenant's sums for tenantShares.
func (rep *Report) groupRecords(sc *Scenario, records []record, dur time.Duration, off offered) []groupAcc {
	tAcc := make([]groupAcc, len(sc.Tenants))
	for i := range tAcc {
		tAcc[i].window = dur
	}
	cAcc := map[string]*groupAcc{}
	rAcc := map[string]*groupAcc{}
	all := groupAcc{window: dur}
	cOff := map[string]float64{}
	for i, t := range sc.Tenants {
		cOff[t.Class] += off.tenants[i]
	}
	for i := range records {
		r := &records[i]
		tAcc[r.tenant].add(r)
		if cAcc[r.class] == nil {
			cAcc[r.class] = &groupAcc{window: dur}
		}
		cAcc[r.class].add(r)
		if rAcc[r.route] == nil {
			rAcc[r.route] = &groupAcc{window: dur}
		}
		rAcc[r.route].add(r)
		all.add(r)
	}
	for k, a := range cAcc {
		rep.Classes[k] = a.finish(dur, cOff[k])
	}
	for k, a := range rAcc {
		rep.Routes[k] = a.finish(dur, off.rps)
	}
	rep.Totals = *all.finish(dur, off.rps)
	return tAcc
}

// tenantShares reports each tenant and its weighted fair share of what was
// served, and the run's fairness.
func (rep *Report) tenantShares(sc *Scenario, tAcc []groupAcc, dur time.Duration, offeredRPS []float64) {
	var served float64
	weights := make([]float64, len(sc.Tenants))
	for i := range sc.Tenants {
		g := tAcc[i].finish(dur, offeredRPS[i])
		rep.Tenants = append(rep.Tenants, TenantReport{ID: sc.Tenants[i].ID, Weight: sc.Tenants[i].Weight, Class: sc.Tenants[i].Class, Group: *g})
		served += g.ThroughputRPS
		weights[i] = float64(sc.Tenants[i].Weight)
	}
	// Demand = the requests that actually arrived (so Poisson noise is not
	// counted as unfairness), less those the client itself cancelled.
	demand := make([]float64, len(sc.Tenants))
	for i := range rep.Tenants {
		g := &rep.Tenants[i].Group
		demand[i] = float64(g.Requests-g.Outcomes.Cancelled-g.Outcomes.Dropped) / dur.Seconds()
	}
	shares := FairShares(served, demand, weights)
	for i := range rep.Tenants {
		rep.Tenants[i].FairShareRPS = round3(shares[i])
		rep.Tenants[i].FairRatio = ratio(rep.Tenants[i].ThroughputRPS, shares[i])
	}
	rep.Fairness, rep.JainFairness = fairness(sc, rep.Tenants)
}
