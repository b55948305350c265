package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/analytics"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configsig"
	"github.com/sluice-dev/sluice/services/admin"
	"github.com/sluice-dev/sluice/services/dev"
	"github.com/sluice-dev/sluice/services/gateway"
	"github.com/sluice-dev/sluice/services/gateway/gatewaybench"
	"github.com/sluice-dev/sluice/services/ledgerd"
	"github.com/sluice-dev/sluice/services/loadtest"
	"github.com/sluice-dev/sluice/services/sim"
)

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	return fs
}

func logger(verbose bool) *slog.Logger {
	lvl := slog.LevelInfo
	if !verbose {
		lvl = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// brokersFlag registers --brokers and the Kafka security flags; a command
// that uses it parses with parseFlags.
func brokersFlag(fs *flag.FlagSet) *string {
	securityFlags(fs)
	return fs.String("brokers", envOr("SLUICE_KAFKA_BROKERS", "127.0.0.1:19092"), "Kafka seed brokers, comma separated (env SLUICE_KAFKA_BROKERS)")
}

// kafkaSec is this process's Kafka security: the environment, overridden
// by the flags of securityFlags. There is no password flag (a command line
// is visible to every user of the machine): use the environment or a file.
var kafkaSec, kafkaSecEnvErr = bus.SecurityFromEnv(os.Getenv)

func securityFlags(fs *flag.FlagSet) {
	fs.StringVar(&kafkaSec.Mechanism, "kafka-sasl-mechanism", kafkaSec.Mechanism,
		"SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (env "+bus.EnvSASLMechanism+"; password in env "+bus.EnvSASLPassword+")")
	fs.StringVar(&kafkaSec.User, "kafka-sasl-user", kafkaSec.User, "SASL user (env "+bus.EnvSASLUser+")")
	fs.StringVar(&kafkaSec.PasswordFile, "kafka-sasl-password-file", kafkaSec.PasswordFile, "file holding the SASL password (env "+bus.EnvSASLPasswordFile+")")
	fs.BoolVar(&kafkaSec.TLS, "kafka-tls", kafkaSec.TLS, "dial Kafka with TLS (env "+bus.EnvTLS+"; implied by the other --kafka-tls-* flags)")
	fs.StringVar(&kafkaSec.CAFile, "kafka-tls-ca", kafkaSec.CAFile, "PEM CA bundle of the brokers' certificates (env "+bus.EnvTLSCA+"; default: system roots)")
	fs.StringVar(&kafkaSec.CertFile, "kafka-tls-cert", kafkaSec.CertFile, "PEM client certificate for mutual TLS (env "+bus.EnvTLSCert+")")
	fs.StringVar(&kafkaSec.KeyFile, "kafka-tls-key", kafkaSec.KeyFile, "PEM key of --kafka-tls-cert (env "+bus.EnvTLSKey+")")
	fs.StringVar(&kafkaSec.ServerName, "kafka-tls-server-name", kafkaSec.ServerName, "name the brokers' certificates must carry (env "+bus.EnvTLSServerName+"; default: the host dialed)")
	fs.BoolVar(&kafkaSec.InsecureSkipVerify, "kafka-tls-insecure-skip-verify", kafkaSec.InsecureSkipVerify, "accept any broker certificate: tests only (env "+bus.EnvTLSInsecure+")")
	fs.StringVar(&adminKeyFiles.signing, "admin-signing-key", os.Getenv(configsig.EnvSigningKey),
		"PEM Ed25519 private key that signs ConfigChanged: only the admin writer holds it (env "+configsig.EnvSigningKey+"; docs/admin-api.md, Signed config changes)")
	fs.StringVar(&adminKeyFiles.public, "admin-public-key", os.Getenv(configsig.EnvPublicKey),
		"PEM Ed25519 public key(s) every ConfigChanged must be signed by: ledgers refuse any other, gateways without the signing key serve no admin writes (env "+configsig.EnvPublicKey+")")
}

// adminKeyFiles are the key files of --admin-signing-key and --admin-public-key.
var adminKeyFiles struct{ signing, public string }

// installAdminKeys loads the config-signing keys into the process
// (configsig.SetProcess) and says at start what the process enforces.
func installAdminKeys() error {
	k, err := configsig.FromEnv(func(name string) string {
		switch name {
		case configsig.EnvSigningKey:
			return adminKeyFiles.signing
		case configsig.EnvPublicKey:
			return adminKeyFiles.public
		}
		return ""
	})
	if err != nil {
		return err
	}
	configsig.SetProcess(k)
	return nil
}

// parseFlags parses a command's flags; for a command that talks to Kafka
// (it called brokersFlag) it then installs the Kafka security, before the
// command creates its first client.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.Lookup("kafka-sasl-mechanism") == nil {
		return nil
	}
	if kafkaSecEnvErr != nil {
		return kafkaSecEnvErr
	}
	if err := installAdminKeys(); err != nil {
		return err
	}
	return bus.Configure(kafkaSec)
}

// ledgerGroupFlag registers --group: the ledger's consumer group, from
// SLUICE_LEDGER_GROUP (which `sluice dev` prints) or the ledger's default.
func ledgerGroupFlag(fs *flag.FlagSet, usage string) *string {
	return fs.String("group", envOr("SLUICE_LEDGER_GROUP", dev.DefaultLedgerGroup), usage+" (env SLUICE_LEDGER_GROUP)")
}

func prefixFlag(fs *flag.FlagSet) *string {
	return fs.String("topic-prefix", envOr("SLUICE_TOPIC_PREFIX", ""), "prefix of every Sluice topic name, to share a cluster (env SLUICE_TOPIC_PREFIX)")
}

func runDev(ctx context.Context, args []string) error {
	fs := newFlags("dev")
	addr := fs.String("addr", "", "gateway listen address (default 127.0.0.1:8080, or a free port if taken)")
	key := fs.String("api-key", "", "demo API key (default: random; ignored with --config, whose keys apply)")
	cfgPath := fs.String("config", "", "gateway configuration file for the stack; "+dev.SimURLPlaceholder+" in it becomes the simulator's URL (example: deploy/examples/dev-three-tenants.yaml; default: one demo tenant and key)")
	adminTokenFile := fs.String("admin-token-file", "", "file holding the admin API's operator token (env SLUICE_ADMIN_TOKEN; default: a random one, printed)")
	verbose := fs.Bool("v", false, "log at info level")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	adminToken, err := readAdminToken(*adminTokenFile)
	if err != nil {
		return err
	}
	if adminToken == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		adminToken = "sluice-admin-" + hex.EncodeToString(b[:])
	}
	o := dev.Options{Addr: *addr, APIKey: *key, AdminToken: adminToken, Log: logger(*verbose), SnapshotEvery: 1}
	if *cfgPath != "" {
		load, err := dev.ConfigFile(*cfgPath)
		if err != nil {
			return err
		}
		o.Config = load
	}
	var keys []string
	if *cfgPath != "" {
		if keys, err = dev.ConfigFileKeys(*cfgPath); err != nil {
			return err
		}
	}
	// Config-signing keys named in the environment are the stack's;
	// without any, dev.Start makes an ephemeral pair, which is written to
	// a temporary directory and printed so that the operator commands of
	// the same shell (config apply, replay, history) sign and verify as
	// the stack does.
	envKeys, err := configsig.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	keysFromEnv := envKeys.Signer != nil || envKeys.Verifier != nil
	if keysFromEnv {
		configsig.SetProcess(envKeys)
	}
	st, err := dev.Start(ctx, o)
	if err != nil {
		return err
	}
	defer st.Close()
	if *cfgPath == "" {
		keys = []string{st.APIKey}
	}
	var keyLines string
	if !keysFromEnv {
		dir, lines, err := writeDevKeys(configsig.Process().Signer)
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		keyLines = lines
	}
	// One write: a script that waits for any of these lines has them all.
	if _, err := io.WriteString(os.Stdout, devBanner(st, *cfgPath, keys, adminToken)+keyLines); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// writeDevKeys writes the dev stack's ephemeral signing key pair to a new
// temporary directory (removed when the stack stops) and returns it with
// the banner lines that export it.
func writeDevKeys(s *configsig.Signer) (dir, lines string, err error) {
	if s == nil {
		return "", "", nil
	}
	dir, err = os.MkdirTemp("", "sluice-dev-keys-")
	if err != nil {
		return "", "", fmt.Errorf("dev signing key: %w", err)
	}
	priv, pub := filepath.Join(dir, "admin.key"), filepath.Join(dir, "admin.pub")
	if err := os.WriteFile(priv, s.PrivatePEM(), 0o600); err != nil {
		return dir, "", fmt.Errorf("dev signing key: %w", err)
	}
	if err := os.WriteFile(pub, s.PublicPEM(), 0o644); err != nil {
		return dir, "", fmt.Errorf("dev signing key: %w", err)
	}
	return dir, fmt.Sprintf("# config changes are signed (docs/admin-api.md): this stack's ephemeral key pair, for the operator commands\n%s=%s\n%s=%s\n",
		configsig.EnvSigningKey, priv, configsig.EnvPublicKey, pub), nil
}

// devBanner is what `sluice dev` prints: NAME=value lines that
// `set -a; . FILE; set +a` exports (the README's quick start), so that the
// SDKs, curl and every operator command (explain, whatif, replay, config
// history and apply) reach this stack with their defaults, and commented
// commands that work as pasted, with the literal URL and key.
func devBanner(st *dev.Stack, cfgPath string, keys []string, adminToken string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sluice dev stack: embedded Kafka at %s, provider simulator at %s; Ctrl-C stops.\n", st.Brokers[0], st.SimURL)
	fmt.Fprintf(&b, "# Export these lines into a shell (saved to FILE: set -a; . FILE; set +a).\n")
	fmt.Fprintf(&b, "OPENAI_BASE_URL=%s/v1\n", st.GatewayURL)
	key := "$OPENAI_API_KEY"
	switch {
	case len(keys) > 0:
		key = keys[0]
		fmt.Fprintf(&b, "OPENAI_API_KEY=%s\n", key)
		if len(keys) > 1 {
			fmt.Fprintf(&b, "# other keys of %s: %s\n", cfgPath, strings.Join(keys[1:], " "))
		}
	default:
		fmt.Fprintf(&b, "# API keys: those whose hashes %s lists (none is written in the file: set OPENAI_API_KEY to one)\n", cfgPath)
	}
	fmt.Fprintf(&b, "SLUICE_ADMIN_URL=%s/admin/v1\nSLUICE_ADMIN_TOKEN=%s\n", st.GatewayURL, adminToken)
	fmt.Fprintf(&b, "SLUICE_KAFKA_BROKERS=%s\n", strings.Join(st.Brokers, ","))
	fmt.Fprintf(&b, "SLUICE_LEDGER_GROUP=%s\n", st.LedgerGroup)
	fmt.Fprintf(&b, "# operator commands read SLUICE_KAFKA_BROKERS and SLUICE_LEDGER_GROUP: sluice explain REQUEST_ID (the X-Sluice-Request-Id header), sluice config history, sluice replay --verify, sluice whatif\n")
	fmt.Fprintf(&b, "# admin API (docs/admin-api.md): curl -s %s/admin/v1/tenants -H \"Authorization: Bearer %s\"\n", st.GatewayURL, adminToken)
	fmt.Fprintf(&b, "# your own limits and what is left: sluice usage (reads OPENAI_BASE_URL, OPENAI_API_KEY), or curl -s %s/v1/sluice/usage -H \"Authorization: Bearer %s\"\n", st.GatewayURL, key)
	fmt.Fprintf(&b, "# live quota view: %s (open; append #key=<api key> for a tenant-only view)\n", st.ViewURL)
	fmt.Fprintf(&b, "# Prometheus metrics: %s (loopback; /readyz on the gateway says when it can get decisions)\n", st.MetricsURL)
	fmt.Fprintf(&b, "# try: curl -s %s/v1/chat/completions -H \"Authorization: Bearer %s\" -H 'Content-Type: application/json' -d '{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":16}'\n", st.GatewayURL, key)
	return b.String()
}

// gatewayFlags are the command line of sluice gateway, read once so that
// the steps of runGateway share them without a dozen pointers.
type gatewayFlags struct {
	brokers, prefix, cfgPath, addr, metricsAddr string
	ledgerGroup, adminTokenFile, cpuprofile     string
	tenantLabels, publish, verbose              bool
}

// parseGatewayFlags declares and parses the gateway's flags; their names
// and help texts are the command's interface, so they live in one place.
func parseGatewayFlags(args []string) (gatewayFlags, error) {
	fs := newFlags("gateway")
	brokers := brokersFlag(fs)
	prefix := prefixFlag(fs)
	cfgPath := fs.String("config", "deploy/examples/sluice.yaml", "gateway configuration file (YAML)")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9464", "serve Prometheus /metrics on this address, unauthenticated (loopback by default: the metrics list every tenant; \"\" = off). The API listener serves /metrics only to the operator token")
	tenantLabels := fs.Bool("metrics-tenant-labels", true, "label token metrics by tenant (false: one series for all tenants, for large fleets)")
	ledgerGroup := fs.String("ledger-group", "sluice-ledger", "the ledger's consumer group (sluice ledger --group): /readyz waits for a round trip through it")
	publish := fs.Bool("publish-config", true, "publish the ledger section as a ConfigChanged event at start")
	adminTokenFile := fs.String("admin-token-file", "", "file holding the operator token that turns on the admin API at /admin/v1 (env SLUICE_ADMIN_TOKEN; default: admin API off)")
	verbose := fs.Bool("v", false, "log at info level")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the process to this file until it stops (sluice bench gateway --process --cpuprofile uses it)")
	if err := parseFlags(fs, args); err != nil {
		return gatewayFlags{}, err
	}
	return gatewayFlags{
		brokers: *brokers, prefix: *prefix, cfgPath: *cfgPath, addr: *addr, metricsAddr: *metricsAddr,
		ledgerGroup: *ledgerGroup, adminTokenFile: *adminTokenFile, cpuprofile: *cpuprofile,
		tenantLabels: *tenantLabels, publish: *publish, verbose: *verbose,
	}, nil
}

func runGateway(ctx context.Context, args []string) error {
	f, err := parseGatewayFlags(args)
	if err != nil {
		return err
	}
	if f.cpuprofile != "" {
		stop, err := startCPUProfile(f.cpuprofile)
		if err != nil {
			return err
		}
		defer stop()
	}
	log := logger(f.verbose)
	cfg, err := config.LoadFile(f.cfgPath)
	if err != nil {
		return err
	}
	adminToken, err := readAdminToken(f.adminTokenFile)
	if err != nil {
		return err
	}
	bs := bus.SplitBrokers(f.brokers)
	names := bus.NamesWithPrefix(f.prefix)
	rc, err := reserve.New(ctx, reserve.Config{Brokers: bs, Topics: names, Node: cfg.Node, AnswerTimeout: time.Duration(cfg.LedgerTimeoutMs) * time.Millisecond, Log: log})
	if err != nil {
		return err
	}
	defer rc.Close()
	levels, err := gateway.FollowSnapshots(ctx, bs, names, log)
	if err != nil {
		return err
	}
	defer levels.Close()
	gw := gateway.New(cfg, rc, log, gateway.WithLevels(levels), gateway.WithExplainer(dev.Explainer(bs, names)),
		gateway.WithLedgerProbe(f.ledgerGroup), gateway.WithAdminState(), gateway.WithTenantLabels(f.tenantLabels))
	// Every gateway follows the admin topic, token or not: a change made
	// on any gateway takes effect on all. Once the admin API has made a
	// change, tenants, keys and the ledger section are its, not the file's.
	adm, err := admin.Start(ctx, gw, cfg, bs, names, adminToken, log)
	if err != nil {
		return err
	}
	defer adm.Close()
	if f.publish {
		if err := publishGatewayConfig(ctx, bs, names, gw, f.cfgPath, log); err != nil {
			return err
		}
	}
	// Hot reload: SIGHUP, or a change of the file seen by polling. A bad
	// file keeps the running config (and says why); a good one whose
	// ledger section changed is published as ConfigChanged first.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reloader := gateway.NewReloader(f.cfgPath, gw, func(ctx context.Context, ledgerJSON []byte, source string) error {
		return ledgerd.PublishConfig(ctx, bs, names, ledgerJSON, source)
	}, log)
	reloader.SetOverlay(adm.Binding.Overlay, adm.Binding.Installed)
	go reloader.Run(ctx, time.Duration(cfg.ReloadIntervalMs)*time.Millisecond, hup)
	return serveGateway(ctx, f, gw)
}

// publishGatewayConfig publishes the file's ledger section at start. A
// gateway that is not the admin writer (the deployment signs its config;
// this one holds no signing key) publishes nothing: the ledgers would
// refuse it. The admin writer publishes.
func publishGatewayConfig(ctx context.Context, bs []string, names bus.Names, gw *gateway.Server, cfgPath string, log *slog.Logger) error {
	err := ledgerd.PublishConfig(ctx, bs, names, gw.Config().LedgerJSON(), cfgPath)
	switch {
	case errors.Is(err, configsig.ErrNotAdminWriter):
		log.Warn("ledger section of the config file not published: this gateway is not the admin writer", "err", err)
	case err != nil:
		return err
	}
	return nil
}

// serveGateway runs the API listener and, if asked, the metrics listener
// until either fails or ctx ends; at the end the API server shuts down
// gracefully within 5 s and then the metrics listener closes.
func serveGateway(ctx context.Context, f gatewayFlags, gw *gateway.Server) error {
	srv := &http.Server{Addr: f.addr, Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- srv.ListenAndServe() }()
	if f.metricsAddr != "" {
		msrv := &http.Server{Addr: f.metricsAddr, Handler: metricsMux(gw.MetricsHandler()), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- fmt.Errorf("metrics listener: %w", msrv.ListenAndServe()) }()
		defer msrv.Close()
	}
	fmt.Printf("OPENAI_BASE_URL=http://%s/v1\n", f.addr)
	select {
	case err := <-errc:
		return fmt.Errorf("listen on %s: %w", f.addr, err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// metricsMux serves h at /metrics, as the API listener did.
func metricsMux(h http.Handler) http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", h)
	return m
}

func runLedger(ctx context.Context, args []string) error {
	fs := newFlags("ledger")
	brokers := brokersFlag(fs)
	host, _ := os.Hostname()
	node := fs.String("node", fmt.Sprintf("%s-%d", host, os.Getpid()), "unique node id (part of the transactional id)")
	prefix := prefixFlag(fs)
	group := ledgerGroupFlag(fs, "consumer group")
	snapEvery := fs.Int("snapshot-every", 10000, "write a partition snapshot after this many events")
	snapInterval := fs.Duration("snapshot-interval", 30*time.Second, "write a partition snapshot after this long")
	snapPlain := fs.Bool("snapshot-plain", false, "write snapshots as plain JSON, not gzipped: for a rolling upgrade while ledgers that read only plain snapshots still run (docs/ledger-service.md, The snapshot's format)")
	commitEvery := fs.Duration("commit-interval", ledgerd.DefaultCommitInterval, "end the open transaction after this long; decisions are produced, and acted on, before it commits (each commit delays the decisions of a few ms)")
	metricsAddr := fs.String("metrics", "", "serve Prometheus /metrics and the liveness check /healthz on this address (e.g. 127.0.0.1:9101)")
	peerDeadAfter := fs.Duration("peer-dead-after", ledgerd.DefaultPeerDeadAfter, "fence and evict a peer member whose heartbeats stopped this long ago (negative: leave it to the group session timeout)")
	verbose := fs.Bool("v", false, "log at info level")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// /healthz fails (503 and the reason) while the member cannot commit
	// (docs/ledger-service.md, No wedge); a liveness probe on it restarts
	// a member that nothing else recovers.
	health := ledgerd.NewHealth()
	if *metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promHandler())
		mux.Handle("/healthz", health)
		go func() { _ = http.ListenAndServe(*metricsAddr, mux) }()
	}
	log := logger(*verbose)
	if k := configsig.Process(); k.Enforced() {
		log.Info("ConfigChanged must be signed by the admin writer", "trusted_keys", k.Verifier.KeyIDs())
	} else {
		log.Warn("ConfigChanged is not authenticated: anyone who can write the requests topic can reconfigure this ledger; set " +
			configsig.EnvPublicKey + " (docs/admin-api.md, Signed config changes)")
	}
	return ledgerd.Run(ctx, ledgerd.Config{Brokers: bus.SplitBrokers(*brokers), Topics: bus.NamesWithPrefix(*prefix), Node: *node, Group: *group,
		SnapshotEvery: *snapEvery, SnapshotInterval: *snapInterval, SnapshotPlain: *snapPlain, CommitInterval: *commitEvery, PeerDeadAfter: *peerDeadAfter, Health: health, Log: log})
}

func runSink(ctx context.Context, args []string) error {
	fs := newFlags("sink")
	brokers := brokersFlag(fs)
	ch := fs.String("clickhouse", envOr("SLUICE_CLICKHOUSE_ADDR", "127.0.0.1:19000"), "ClickHouse native address (env SLUICE_CLICKHOUSE_ADDR)")
	db := fs.String("database", "sluice", "ClickHouse database")
	prefix := prefixFlag(fs)
	group := fs.String("group", "sluice-sink", "consumer group")
	batch := fs.Int("batch-size", analytics.DefaultBatchSize, "rows per insert")
	flush := fs.Duration("flush-interval", time.Second, "insert at least this often when rows are waiting")
	inserts := fs.Int("inserts", analytics.DefaultSinkInserts, "batches inserting at once, each on its own connection (1–3; commits stay in poll order)")
	verbose := fs.Bool("v", false, "log at info level")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return analytics.RunSink(ctx, analytics.SinkConfig{Brokers: bus.SplitBrokers(*brokers), Topics: bus.NamesWithPrefix(*prefix).All(), Group: *group,
		ClickHouseAddr: *ch, Database: *db, BatchSize: *batch, Inserts: *inserts, FlushInterval: *flush}, logger(*verbose))
}

func runTopics(ctx context.Context, args []string) error {
	const usage = "usage: sluice topics ensure [--brokers …] [--partitions N] [--replication N] [--retention 168h] (sluice topics ensure -h lists the flags)"
	if helpAsked(args) {
		return usageHelp(usage)
	}
	if len(args) == 0 || args[0] != "ensure" {
		return errors.New(usage)
	}
	fs := newFlags("topics ensure")
	brokers := brokersFlag(fs)
	def := bus.DefaultTopics()
	parts := fs.Int("partitions", int(def.RequestPartitions), "partitions of sluice.requests / decisions / telemetry (provider-scope partitions)")
	repl := fs.Int("replication", int(def.Replication), "replication factor")
	prefix := prefixFlag(fs)
	ret := fs.Duration("retention", time.Duration(def.RetentionMs)*time.Millisecond, "retention of the request, decision and telemetry logs")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	// Validate before connecting: a bad flag must not wait on a broker.
	var bad []error
	if *parts < 1 || *parts > math.MaxInt32 {
		bad = append(bad, fmt.Errorf("--partitions %d: want 1 to %d", *parts, math.MaxInt32))
	}
	if *repl < 1 || *repl > math.MaxInt16 {
		bad = append(bad, fmt.Errorf("--replication %d: want 1 to %d", *repl, math.MaxInt16))
	}
	if *ret <= 0 && *ret != -time.Millisecond {
		bad = append(bad, fmt.Errorf("--retention %s: want a positive duration (or -1ms: keep forever)", *ret))
	}
	if len(bad) > 0 {
		return errors.Join(bad...)
	}
	cl, err := bus.NewClient(ctx, bus.SplitBrokers(*brokers), 10*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	tc := bus.TopicsConfig{RequestPartitions: int32(*parts), Replication: int16(*repl), RetentionMs: ret.Milliseconds(), Names: bus.NamesWithPrefix(*prefix)}
	res, err := bus.Ensure(ctx, kadm.NewClient(cl), tc.Specs())
	for _, r := range res {
		fmt.Printf("%-18s %s\n", r.Topic, r.Action)
	}
	return err
}

func runLoadtest(ctx context.Context, args []string) error {
	return loadtest.Run(ctx, args, os.Stdout, os.Stderr)
}

func runSim(ctx context.Context, args []string) error {
	return sim.Run(ctx, args, os.Stdout, os.Stderr)
}

func runKeys(_ context.Context, args []string) error {
	const usage = "usage: sluice keys hash KEY (print a key's SHA-256 for the config) | sluice keys new (make a key and its hash)" +
		" | sluice keys admin-pair PREFIX (write the config-signing key pair PREFIX.key and PREFIX.pub; docs/admin-api.md)"
	switch {
	case helpAsked(args):
		return usageHelp(usage)
	case len(args) == 2 && args[0] == "hash":
		fmt.Println(config.HashKey(args[1]))
		return nil
	case len(args) == 1 && args[0] == "new":
		var b [24]byte
		_, _ = rand.Read(b[:])
		k := "sk-sluice-" + hex.EncodeToString(b[:])
		fmt.Printf("key:    %s\nsha256: %s\n", k, config.HashKey(k))
		return nil
	case len(args) == 2 && args[0] == "admin-pair":
		return writeAdminPair(args[1])
	}
	return errors.New(usage)
}

// writeAdminPair writes a fresh Ed25519 config-signing key pair: PREFIX.key
// (the admin writer's SLUICE_ADMIN_SIGNING_KEY, mode 0600) and PREFIX.pub
// (every ledger's and gateway's SLUICE_ADMIN_PUBLIC_KEY). It never
// overwrites a file.
func writeAdminPair(prefix string) error {
	s, err := configsig.Generate()
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		b    []byte
		mode os.FileMode
	}{{prefix + ".key", s.PrivatePEM(), 0o600}, {prefix + ".pub", s.PublicPEM(), 0o644}} {
		fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return fmt.Errorf("admin-pair: %w", err)
		}
		_, err = fh.Write(f.b)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("admin-pair: write %s: %w", f.path, err)
		}
	}
	fmt.Printf("%s=%s.key   # the admin writer only\n%s=%s.pub   # every ledger and gateway\nkey_id: %s\n",
		configsig.EnvSigningKey, prefix, configsig.EnvPublicKey, prefix, s.KeyID())
	return nil
}

// runEstimate prints the gateway's pre-flight estimate of the request on
// stdin as JSON. (Registered in main.go as "estimate".)
func runEstimate(_ context.Context, args []string) error {
	fs := newFlags("estimate")
	api := fs.String("api", "", "request shape: chat, messages, embeddings, responses or completions (default: guessed from the body)")
	p95 := fs.Int64("p95", 0, "the route's p95 output tokens (0: unknown)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	body, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
	if err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	est := estimate.New(estimate.Options{})
	rep, err := gateway.EstimateBody(est, body, *api, *p95)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// benchGateway runs `sluice bench gateway` (wired in bench.go).
func benchGateway(ctx context.Context, n, concurrency int) (any, error) {
	return gatewaybench.Run(ctx, gatewaybench.Options{Requests: n, Concurrency: concurrency})
}

// readAdminToken returns the operator token of the admin API: the file's
// first line, else SLUICE_ADMIN_TOKEN, else "" (admin API off). There is no
// token flag: a command line is visible to every user of the machine.
func readAdminToken(path string) (string, error) {
	if path == "" {
		return strings.TrimSpace(os.Getenv("SLUICE_ADMIN_TOKEN")), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	if tok = strings.TrimSpace(tok); tok == "" {
		return "", fmt.Errorf("admin token: %s is empty", path)
	}
	return tok, nil
}
