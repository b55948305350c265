// Package dev runs the whole of Sluice in one process for a quick start:
// an embedded Kafka (franz-go's kfake), the provider simulator, a ledger
// member, and the gateway — the walking skeleton of `make run`.
package dev

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/dashboards/live"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/admin"
	"github.com/sluice-dev/sluice/services/gateway"
	"github.com/sluice-dev/sluice/services/ledgerd"
	"github.com/sluice-dev/sluice/services/sim"
)

// Options configures a dev stack.
type Options struct {
	Addr    string // gateway listen address, default 127.0.0.1:8080 (falls back to a free port)
	Brokers []string
	// Brokers empty = start an embedded kfake cluster.
	Partitions int32
	// Topics names the topics (zero value = defaults); tests use a prefix.
	Topics bus.Names
	APIKey string // demo key; random when empty
	// AdminToken turns on the admin API (/admin/v1) with this operator
	// token; empty = off (the gateway still follows admin changes).
	AdminToken string
	Log        *slog.Logger
	// Sim configures the provider simulator (default sim.DefaultConfig()).
	Sim *sim.Config
	// Config builds the gateway configuration for the simulator's URL
	// (default DevConfig with APIKey). Load tests use it to set tenants,
	// keys and limits.
	Config func(simURL string) (*config.Config, error)
	// SnapshotEvery is the ledger's --snapshot-every (0: its default,
	// 10,000 events). /v1/sluice/usage reads what is left from the
	// snapshots, and a ledger snapshots only as events arrive, so the
	// interactive `sluice dev` sets 1: a few requests are then observed at
	// once rather than after thousands of events.
	SnapshotEvery int
}

// Stack is a running dev stack.
type Stack struct {
	GatewayURL string // http://host:port
	APIKey     string
	Brokers    []string
	SimURL     string
	ViewURL    string // live quota view (dashboards/live), loopback only
	// MetricsURL is the gateway's Prometheus endpoint, on a loopback
	// listener of its own (the API listener serves /metrics only to the
	// operator token).
	MetricsURL string
	// LedgerGroup is the consumer group of the stack's ledger: the group
	// `sluice whatif` and `sluice replay` read committed offsets of.
	LedgerGroup string

	closers []func()

	// The ledger member (StartLedger, StopLedger).
	ledgerCfg  ledgerd.Config
	ledgerMu   sync.Mutex
	ledgerStop func()
}

// StartLedger starts the stack's ledger member (Start does; a test that
// stopped it with StopLedger starts it again). It returns once the member
// is created; it joins its group and takes its partitions after that.
func (s *Stack) StartLedger(ctx context.Context) error {
	s.ledgerMu.Lock()
	defer s.ledgerMu.Unlock()
	if s.ledgerStop != nil {
		return nil
	}
	cfg := s.ledgerCfg
	cfg.Registerer = prometheus.NewRegistry()
	led, err := ledgerd.New(ctx, cfg)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := led.Loop(runCtx); err != nil && runCtx.Err() == nil {
			cfg.Log.Error("ledger stopped", "err", err)
		}
	}()
	s.ledgerStop = func() { cancel(); <-done; led.Close() }
	return nil
}

// StopLedger stops the stack's ledger member, as an operator stopping the
// ledger would: it leaves its group, and the gateway's requests get 503
// ledger_unavailable until StartLedger.
func (s *Stack) StopLedger() {
	s.ledgerMu.Lock()
	defer s.ledgerMu.Unlock()
	if s.ledgerStop != nil {
		s.ledgerStop()
		s.ledgerStop = nil
	}
}

// Close stops everything.
func (s *Stack) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// Start brings the stack up and returns when the gateway accepts requests.
func Start(ctx context.Context, o Options) (st *Stack, err error) {
	o = o.withDefaults()
	st = &Stack{APIKey: o.APIKey}
	// The error returns below say `return nil, err`, which clears st
	// before deferred calls run: close through a copy.
	started := st
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	if err := st.startBus(ctx, o); err != nil {
		return nil, err
	}
	cfg, err := st.startSim(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := ensureKeys(); err != nil {
		return nil, err
	}
	if err := ledgerd.PublishConfigChange(ctx, st.Brokers, o.Topics, schemas.ConfigChanged{Ledger: cfg.LedgerJSON(), Source: "sluice dev",
		Actor: "sluice dev", Reason: "start-up: the ledger section of the stack's configuration"}); err != nil {
		return nil, err
	}
	if err := st.startLedgerMember(ctx, o); err != nil {
		return nil, err
	}
	gw, err := st.startGateway(ctx, o, cfg)
	if err != nil {
		return nil, err
	}
	if err := st.startView(ctx, o, gw); err != nil {
		return nil, err
	}
	return st, nil
}

// withDefaults fills what the caller left out, before anything starts, so
// that every later step reads one settled set of options (the demo key in
// particular is drawn once and shared by the Stack and DevConfig).
func (o Options) withDefaults() Options {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	o.Topics = o.Topics.OrDefault()
	if o.Partitions <= 0 {
		o.Partitions = bus.DefaultTopics().RequestPartitions
	}
	if o.APIKey == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		o.APIKey = "sk-sluice-demo-" + hex.EncodeToString(b[:])
	}
	return o
}

// startBus settles the brokers (an embedded kfake cluster when none are
// given) and creates the stack's topics, first: every later member reads or
// writes them, and a member that starts before its topic exists fails.
func (s *Stack) startBus(ctx context.Context, o Options) error {
	s.Brokers = o.Brokers
	if len(s.Brokers) == 0 {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
		if err != nil {
			return fmt.Errorf("embedded kafka: %w", err)
		}
		s.closers = append(s.closers, c.Close)
		s.Brokers = c.ListenAddrs()
	}
	admCl, err := bus.NewClient(ctx, s.Brokers, 10*time.Second)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, admCl.Close)
	tc := bus.DefaultTopics()
	tc.RequestPartitions = o.Partitions
	tc.Names = o.Topics
	if _, err := bus.Ensure(ctx, kadm.NewClient(admCl), tc.Specs()); err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	return nil
}

// startSim starts the provider simulator and builds the gateway
// configuration from its URL: the configuration names the simulator as
// every provider's upstream, so it cannot be built before the simulator
// listens.
func (s *Stack) startSim(ctx context.Context, o Options) (*config.Config, error) {
	simCfg := sim.DefaultConfig()
	if o.Sim != nil {
		simCfg = *o.Sim
	}
	simSrv, err := sim.New(simCfg)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	simURL, stopSim, err := serve("127.0.0.1:0", simSrv)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	s.closers = append(s.closers, stopSim)
	s.SimURL = simURL

	build := o.Config
	if build == nil {
		build = func(u string) (*config.Config, error) { return DevConfig(u, o.APIKey) }
	}
	return build(simURL)
}

// startLedgerMember starts the ledger member. The node names the
// transactional id: two stacks on one broker (tests of several packages run
// at once) must not fence each other, so it follows the topics, as the
// group does.
func (s *Stack) startLedgerMember(ctx context.Context, o Options) error {
	s.LedgerGroup = LedgerGroup(o.Topics)
	s.ledgerCfg = ledgerd.Config{Brokers: s.Brokers, Topics: o.Topics, Group: s.LedgerGroup, Node: "ledger-dev-" + o.Topics.Requests,
		SnapshotEvery: o.SnapshotEvery, Log: o.Log}
	if err := s.StartLedger(ctx); err != nil {
		return err
	}
	s.closers = append(s.closers, s.StopLedger)
	return nil
}

// startGateway starts the gateway with what it leans on (the reserve
// client, the snapshot follower, the admin API) and its two listeners. It
// comes after the ledger member, whose group the gateway's ledger probe
// watches, so that the first request finds a ledger to answer it.
func (s *Stack) startGateway(ctx context.Context, o Options, cfg *config.Config) (*gateway.Server, error) {
	rc, err := reserve.New(ctx, reserve.Config{Brokers: s.Brokers, Topics: o.Topics, Node: cfg.Node, AnswerTimeout: time.Duration(cfg.LedgerTimeoutMs) * time.Millisecond, Log: o.Log})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, rc.Close)
	levels, err := gateway.FollowSnapshots(ctx, s.Brokers, o.Topics, o.Log)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, levels.Close)
	gw := gateway.New(cfg, rc, o.Log, gateway.WithLevels(levels), gateway.WithExplainer(Explainer(s.Brokers, o.Topics)),
		gateway.WithLedgerProbe(s.LedgerGroup), gateway.WithAdminState())
	adm, err := admin.Start(ctx, gw, cfg, s.Brokers, o.Topics, o.AdminToken, o.Log)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	s.closers = append(s.closers, adm.Close)
	if err := s.listenGateway(o, gw); err != nil {
		return nil, err
	}
	return gw, nil
}

// listenGateway opens the API listener (the default port falls back to a
// free one, a chosen address does not) and the metrics listener, on a
// loopback port of its own because metrics list every tenant.
func (s *Stack) listenGateway(o Options, gw *gateway.Server) error {
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	url, stopGW, err := serve(addr, gw)
	if err != nil && o.Addr == "" {
		url, stopGW, err = serve("127.0.0.1:0", gw)
	}
	if err != nil {
		return fmt.Errorf("gateway listen on %s: %w", addr, err)
	}
	s.closers = append(s.closers, stopGW)
	s.GatewayURL = url
	murl, stopMetrics, err := serve("127.0.0.1:0", gw.MetricsHandler())
	if err != nil {
		return fmt.Errorf("metrics listen: %w", err)
	}
	s.closers = append(s.closers, stopMetrics)
	s.MetricsURL = murl + "/metrics"
	return nil
}

// startView starts the live quota view: an open operator view on loopback;
// an API key narrows it to the key's tenant. Keys are looked up in the
// gateway's current configuration, so admin changes count.
func (s *Stack) startView(ctx context.Context, o Options, gw *gateway.Server) error {
	viewURL, stopView, err := live.Listen(ctx, live.Config{Brokers: s.Brokers, Topics: o.Topics, Addr: "127.0.0.1:0", Log: o.Log,
		Lookup: func(key string) (string, bool) {
			if id := gw.Config().Lookup(key); id != nil && !id.Disabled { // admin changes included
				return id.Tenant, true
			}
			return "", false
		}})
	if err != nil {
		return fmt.Errorf("live view: %w", err)
	}
	s.closers = append(s.closers, stopView)
	s.ViewURL = viewURL
	return nil
}

// DefaultLedgerGroup is the ledger's default consumer group (that of
// ledgerd.Config and `sluice ledger`), and so the default --group of the
// operator tools that read its committed offsets (whatif, replay).
const DefaultLedgerGroup = "sluice-ledger"

// LedgerGroup is the consumer group of a dev stack's ledger on names:
// DefaultLedgerGroup on the default topics, so that the operator tools'
// defaults find it; one per topic prefix otherwise, so that the stacks of
// tests sharing a broker do not join one group.
func LedgerGroup(names bus.Names) string {
	if names.OrDefault() == bus.DefaultNames() {
		return DefaultLedgerGroup
	}
	return names.Requests + ".ledger"
}

// DevConfig is the gateway configuration of the dev stack: the simulator
// behind four providers (OpenAI, Azure OpenAI, Anthropic, Gemini styles),
// a route per model family, one demo tenant and key, and the ledger's dev
// quota document with a scope per provider.
func DevConfig(simURL, apiKey string) (*config.Config, error) {
	return devConfig(simURL, apiKey, nil)
}

// devConfig is DevConfig with its ledger document changed by edit (nil:
// as it is), for tests of other quota documents on the dev stack.
func devConfig(simURL, apiKey string, edit func(*ledger.Config)) (*config.Config, error) {
	lc := ledger.DefaultDevConfig()
	for _, sc := range []string{"sim-azure", "sim-anthropic", "sim-gemini"} {
		c := lc.Scopes[0]
		c.Name = sc
		lc.Scopes = append(lc.Scopes, c)
	}
	if edit != nil {
		edit(&lc)
	}
	led, err := json.Marshal(lc)
	if err != nil {
		return nil, err
	}
	y := fmt.Sprintf(`node: gw-dev
providers:
  - {name: sim-openai, kind: openai, scope: sim-openai, base_url: %[1]s/openai/v1}
  - {name: sim-azure, kind: azure, scope: sim-azure, base_url: %[1]s/azure, deployment: gpt-4o-mini, api_version: 2024-10-21}
  - {name: sim-anthropic, kind: anthropic, scope: sim-anthropic, base_url: %[1]s/anthropic/v1}
  - {name: sim-gemini, kind: gemini, scope: sim-gemini, base_url: %[1]s/gemini/v1beta}
routes:
  - {model: gpt-4o-mini, provider: sim-openai, profile: gpt-4o-mini}
  - {model: gpt-4o, provider: sim-openai, profile: gpt-4o}
  - {model: o4-mini, provider: sim-openai, profile: o4-mini}
  - {model: gpt-3.5-turbo-instruct, provider: sim-openai, profile: gpt-3.5-turbo-instruct}
  - {model: text-embedding-3-small, provider: sim-openai, profile: text-embedding-3-small}
  - {model: azure-gpt-4o-mini, provider: sim-azure, upstream_model: gpt-4o-mini, profile: gpt-4o-mini}
  - {model: claude-sonnet-4-5, provider: sim-anthropic, profile: claude-sonnet-4-5}
  - {model: claude-3-5-haiku-latest, provider: sim-anthropic, profile: claude-3-5-haiku}
  - {model: gemini-2.0-flash, provider: sim-gemini, profile: gemini-2.0-flash}
tenants:
  - id: demo
    org: demo-org
    keys:
      - {id: demo-key, sha256: %[2]s, team: demo-team, class: interactive}
ledger: %[3]s
`, simURL, config.HashKey(apiKey), led)
	c, err := config.Load(strings.NewReader(y))
	if err != nil {
		return nil, fmt.Errorf("dev config: %w", err)
	}
	return c, nil
}

// SimURLPlaceholder is replaced by the simulator's base URL in a config
// file given to ConfigFile (`sluice dev --config`).
const SimURLPlaceholder = "${SIM_URL}"

// ConfigFile reads a gateway configuration file for the dev stack: an
// Options.Config that replaces SimURLPlaceholder with the simulator's URL
// and loads the result. The file is read and checked (with a placeholder
// URL) now, so a bad file fails before anything starts.
func ConfigFile(path string) (func(simURL string) (*config.Config, error), error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	load := func(simURL string) (*config.Config, error) {
		c, err := config.Load(bytes.NewReader(ResolveSimURL(raw, simURL)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return c, nil
	}
	if _, err := load("http://127.0.0.1:1"); err != nil {
		return nil, err
	}
	return load, nil
}

// keyLike matches what may be a plaintext Sluice API key in a file.
var keyLike = regexp.MustCompile(`sk-[A-Za-z0-9_-]{8,}`)

// KnownKeys returns the plaintext API keys written in raw (a dev config
// names its local-only keys in a comment, as
// deploy/examples/dev-three-tenants.yaml does) that c accepts, in the
// order they appear: what `sluice dev --config` can print as a key that
// works, instead of a variable the shell does not have.
func KnownKeys(raw []byte, c *config.Config) []string {
	var out []string
	for _, m := range keyLike.FindAll(raw, -1) {
		k := string(m)
		if id := c.Lookup(k); id != nil && !id.Disabled && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// ConfigFileKeys is KnownKeys of the configuration file at path (loaded
// as ConfigFile loads it).
func ConfigFileKeys(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := config.Load(bytes.NewReader(ResolveSimURL(raw, "http://127.0.0.1:1")))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return KnownKeys(raw, c), nil
}

// ResolveSimURL replaces SimURLPlaceholder in a configuration document by
// simURL, as `sluice dev --config` does; a document without it is
// returned as is. Every tool that loads a dev config (config apply
// validating a patched one) resolves it this way.
func ResolveSimURL(raw []byte, simURL string) []byte {
	return bytes.ReplaceAll(raw, []byte(SimURLPlaceholder), []byte(simURL))
}

// serve listens on addr and serves h until the returned stop is called.
func serve(addr string, h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("http server", "addr", addr, "err", err)
		}
	}()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return "http://" + ln.Addr().String(), stop, nil
}
