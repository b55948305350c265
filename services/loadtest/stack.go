package loadtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// stackLedgers is how many `sluice ledger` processes a --brokers run starts:
// two, so the group has a standby that takes over on a crash.
const stackLedgers = 2

// StackReport is what a run on a real broker (--brokers) adds to the
// report: the ledger service's health over the run, read from the ledgers'
// own metrics and from the committed decision log.
type StackReport struct {
	Brokers     string `json:"brokers"`
	TopicPrefix string `json:"topic_prefix"`
	Ledgers     int    `json:"ledgers"`
	LogsDir     string `json:"logs_dir"`
	// TransactionAborts and SnapshotsWritten are summed over the ledgers
	// (the last value scraped from each, so a killed ledger still counts).
	TransactionAborts int64 `json:"transaction_aborts"`
	SnapshotsWritten  int64 `json:"snapshots_written"`
	Rebuilds          int64 `json:"partition_rebuilds"`
	// LedgerUnavailable counts requests answered 503 ledger_unavailable.
	LedgerUnavailable int `json:"ledger_unavailable"`
	// Decisions is the number of committed decisions of the run;
	// LongestDecisionGapMs the longest log-time gap between two
	// consecutive decisions of the busiest partition during the arrival
	// window.
	Decisions            int   `json:"decisions"`
	LongestDecisionGapMs int64 `json:"longest_decision_gap_ms"`
	// ActedDecisionGapMs is the same gap in the stream that gateways act
	// on (read_uncommitted: every decision record as produced, a decision
	// counted at its first appearance, aborted transactions included):
	// how long clients waited for a decision. After a ledger crash the
	// committed view adds up to a commit interval before the kill, whose
	// decisions the crash aborted and the next owner re-derived.
	ActedDecisionGapMs int64 `json:"acted_decision_gap_ms"`
	// DecisionsDoubled counts decision ids committed more than once;
	// RequestsUndecided counts reserve requests with no decision at all.
	DecisionsDoubled  int `json:"decisions_doubled"`
	RequestsUndecided int `json:"requests_undecided"`
	// UndecidedSample names up to 10 of them (request/attempt, scope,
	// input partition and offset, log time from the run start), to find
	// them in the log.
	UndecidedSample []string `json:"undecided_sample,omitempty"`
	// BusiestPartition is the partition with the most decisions, and
	// BusiestSnapshots the snapshots committed of it.
	BusiestPartition int32 `json:"busiest_partition"`
	BusiestSnapshots int   `json:"busiest_partition_snapshots"`
	// InteractiveFailed lists the interactive requests not served: when
	// each was sent (from the run start), how long it took and how it
	// ended, to tell a fault's casualties from the steady state's.
	InteractiveFailed []string `json:"interactive_failed,omitempty"`
	// InteractiveFailedCodes counts the same requests by their answer's
	// error code (the ledger's reason where it decided).
	InteractiveFailedCodes map[string]int `json:"interactive_failed_codes,omitempty"`
	// Faults lists the faults injected, with their wall time from the
	// run start.
	Faults []string `json:"faults,omitempty"`
	// FaultWindows are the faults an Options.Faults injector reported, each
	// with the longest decision gap of the busiest partition around it.
	FaultWindows []FaultWindow `json:"fault_windows,omitempty"`
	// Replay is `sluice replay --verify` over the run's log
	// (Options.VerifyReplay): every committed input re-derived and
	// compared with its recorded decisions.
	Replay *ReplaySummary `json:"replay,omitempty"`
	// Budgets are the run's cross-scope budgets (ledger.budget of the
	// gateway config), read from the committed log (BudgetReport).
	Budgets []BudgetReport `json:"budgets,omitempty"`
}

// ReplaySummary is the outcome of verifying a run's log by replay.
type ReplaySummary struct {
	Partitions  int `json:"partitions"`
	Inputs      int `json:"inputs"`
	Decisions   int `json:"decisions"`
	Divergences int `json:"divergences"`
}

// FaultEnv is what a fault injector (Options.Faults) gets: where the run's
// stack is and when its arrivals started.
type FaultEnv struct {
	Brokers []string
	Topics  bus.Names
	// Group is the ledgers' consumer group.
	Group string
	Start time.Time
	// Provider429 reads the simulator's count of 429s so far (since it
	// started, not since the run did), so an injector can tell which
	// fault they follow.
	Provider429 func(ctx context.Context) (int64, error)
}

// FaultWindow is one injected fault, from when it began to when the
// injector saw the system whole again (for a broker: back and every
// partition in sync).
type FaultWindow struct {
	Name    string    `json:"name"`
	Start   time.Time `json:"-"`
	End     time.Time `json:"-"`
	StartMs int64     `json:"start_ms"` // from the run start
	EndMs   int64     `json:"end_ms"`
	// LongestDecisionGapMs is the longest log-time gap between consecutive
	// committed decisions of the busiest partition that overlaps the
	// window (up to the window's end when no decision follows).
	LongestDecisionGapMs int64 `json:"longest_decision_gap_ms"`
	// Decisions is how many of that partition's decisions fall inside.
	Decisions int `json:"decisions"`
}

// gapAround returns the longest gap between consecutive times of sorted ts
// that overlaps [from, to], and how many of ts lie in it. The first time in
// the window with none before it counts from from, and a window with no
// time after it counts up to to: a partition that stopped deciding has a
// gap as long as the window, not none.
func gapAround(ts []int64, from, to int64) (gapMs int64, n int) {
	prev, havePrev := from, false
	for _, t := range ts {
		if t >= from && t <= to {
			n++
		}
		if t > from && prev < to {
			start := prev
			if !havePrev {
				start = from
			}
			gapMs = max(gapMs, t-start)
		}
		prev, havePrev = t, true
		if t > to {
			return gapMs, n
		}
	}
	if !havePrev {
		return to - from, n
	}
	return max(gapMs, to-prev), n
}

// stack is a Sluice installation started as separate processes on a real
// broker: the simulator, two ledgers at the default settings and a gateway.
type stack struct {
	bin     string
	brokers []string
	prefix  string
	names   bus.Names
	dir     string
	log     *slog.Logger

	procs   []*proc
	ledgers []*proc
	simURL  string
	gwURL   string
	// gwMetricsURL is the gateway's metrics listener.
	gwMetricsURL string
	// gwEnv is added to the gateway process's environment.
	gwEnv []string

	mu      sync.Mutex
	scraped map[string]map[string]float64 // ledger metrics URL → metric → value
	stop    chan struct{}
}

type proc struct {
	name       string
	cmd        *exec.Cmd
	metricsURL string
	exited     chan struct{}
}

// group is the ledgers' consumer group.
func (st *stack) group() string { return st.prefix + "ledger" }

// env is what a fault injector is told about the stack.
func (st *stack) env(start time.Time) FaultEnv {
	return FaultEnv{Brokers: st.brokers, Topics: st.names, Group: st.group(), Start: start}
}

// startStack starts the scenario's stack on brokers. The topics get a
// fresh prefix, so concurrent runs and earlier runs never mix.
// gwArgs are extra flags of the gateway process.
// gatewayProc is what the gateway process gets beyond the stack's own
// flags: more flags, and environment (e.g. GOMAXPROCS=1).
type gatewayProc struct {
	args, env []string
}

func startStack(ctx context.Context, sc *Scenario, bin string, brokers []string, keys Keys, gwConfig gatewayYAML, log *slog.Logger, gw gatewayProc) (st *stack, err error) {
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the sluice binary (set --sluice-bin): %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "sluice-loadtest-")
	if err != nil {
		return nil, err
	}
	st = &stack{bin: bin, brokers: brokers, dir: dir, log: log,
		prefix:  fmt.Sprintf("lt%d.", time.Now().UnixNano()),
		scraped: map[string]map[string]float64{}, stop: make(chan struct{})}
	st.names = bus.NamesWithPrefix(st.prefix)
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	if err := st.topics(ctx); err != nil {
		return st, err
	}
	if err := st.startSim(ctx, sc); err != nil {
		return st, err
	}
	if err := st.startLedgers(ctx); err != nil {
		return st, err
	}
	// The gateway publishes its config (ConfigChanged on every requests
	// partition) at start, and the ledgers decide and snapshot it: start
	// it once the group is stable, or that first transaction races the
	// second ledger's join, and a partition revoked during a transaction
	// aborts it (a rebalance, not the steady state measured here).
	if err := st.waitLedgersJoined(ctx); err != nil {
		return st, err
	}
	if err := st.startGateway(ctx, gwConfig, gw); err != nil {
		return st, err
	}
	go st.scrapeLoop()
	return st, nil
}

// startSim starts the provider simulator with the scenario's config and
// records its URL.
func (st *stack) startSim(ctx context.Context, sc *Scenario) error {
	simYAML, err := yaml.Marshal(sc.SimConfig)
	if err != nil {
		return fmt.Errorf("simulator config: %w", err)
	}
	simCfg := filepath.Join(st.dir, "sim.yaml")
	if err := os.WriteFile(simCfg, simYAML, 0o600); err != nil {
		return err
	}
	_, line, err := st.start(ctx, "sim", "sim", "--config", simCfg, "--addr", "127.0.0.1:0")
	if err != nil {
		return err
	}
	st.simURL = strings.TrimSpace(line)
	return nil
}

// startLedgers starts stackLedgers ledgers in one group, each with its own
// metrics listener.
func (st *stack) startLedgers(ctx context.Context) error {
	for i := 1; i <= stackLedgers; i++ {
		maddr, err := freeAddr()
		if err != nil {
			return err
		}
		name := "ledger-" + strconv.Itoa(i)
		p, _, err := st.start(ctx, name, "ledger", "--brokers", strings.Join(st.brokers, ","), "--topic-prefix", st.prefix,
			"--group", st.prefix+"ledger", "--node", st.prefix+name, "--metrics", maddr,
			// Info: rebuilds and evictions, a few lines per takeover.
			"-v")
		if err != nil {
			return err
		}
		p.metricsURL = "http://" + maddr + "/metrics"
		st.ledgers = append(st.ledgers, p)
	}
	return nil
}

// startGateway writes the gateway's config (which points at the simulator)
// and starts it on free API and metrics addresses; gwArgs are extra flags.
func (st *stack) startGateway(ctx context.Context, gwConfig gatewayYAML, gw gatewayProc) error {
	gwYAML, err := gwConfig(st.simURL)
	if err != nil {
		return err
	}
	gwCfg := filepath.Join(st.dir, "gateway.yaml")
	if err := os.WriteFile(gwCfg, gwYAML, 0o600); err != nil {
		return err
	}
	gaddr, err := freeAddr()
	if err != nil {
		return err
	}
	gmaddr, err := freeAddr()
	if err != nil {
		return err
	}
	st.gwEnv = gw.env
	if _, _, err := st.start(ctx, "gateway", append([]string{"gateway", "--brokers", strings.Join(st.brokers, ","), "--topic-prefix", st.prefix,
		"--config", gwCfg, "--addr", gaddr, "--metrics-addr", gmaddr, "--ledger-group", st.prefix + "ledger"}, gw.args...)...); err != nil {
		return err
	}
	st.gwURL = "http://" + gaddr
	st.gwMetricsURL = "http://" + gmaddr + "/metrics"
	return nil
}

// waitLedgersJoined waits until every ledger is a member of the group and
// the group is stable with every requests partition assigned. Load that
// starts while the second ledger is still joining measures a rebalance,
// not the steady state a production system is in.
func (st *stack) waitLedgersJoined(ctx context.Context) error {
	cl, err := bus.NewClient(ctx, st.brokers, 10*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx, st.names.Requests)
	if err != nil {
		return fmt.Errorf("list %s: %w", st.names.Requests, err)
	}
	parts := len(td[st.names.Requests].Partitions)
	group := st.prefix + "ledger"
	deadline := time.Now().Add(60 * time.Second)
	last := "not described"
	for time.Now().Before(deadline) {
		if gs, err := adm.DescribeGroups(ctx, group); err == nil {
			if g, ok := gs[group]; ok && g.Err == nil {
				assigned := len(g.AssignedPartitions()[st.names.Requests])
				last = fmt.Sprintf("state %s, %d members, %d of %d partitions assigned", g.State, len(g.Members), assigned, parts)
				if g.State == "Stable" && len(g.Members) == len(st.ledgers) && assigned == parts {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the %d ledgers did not form a stable group %s in 60s (%s); logs in %s", len(st.ledgers), group, last, st.dir)
}

func (st *stack) topics(ctx context.Context) error {
	cl, err := bus.NewClient(ctx, st.brokers, 20*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	tc := bus.DefaultTopics()
	tc.Names = st.names
	// The cluster's own default.replication.factor: 1 on the single
	// development broker, 3 on deploy/local/cluster.sh's three nodes.
	tc.Replication = -1
	if _, err := bus.Ensure(ctx, kadm.NewClient(cl), tc.Specs()); err != nil {
		return fmt.Errorf("create the run's topics: %w", err)
	}
	return nil
}

// start runs `sluice <args>` with its output in the run's log directory and
// waits for its first stdout line (the simulator's URL, the gateway's
// OPENAI_BASE_URL) when it prints one; a ledger prints nothing, so its start
// is not awaited here (warm-up waits for the ledger to serve).
func (st *stack) start(ctx context.Context, name string, args ...string) (*proc, string, error) {
	logf, err := os.Create(filepath.Join(st.dir, name+".log"))
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(st.bin, args...)
	if v := os.Getenv("XGWPROCS"); v != "" && name == "gateway" {
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+v)
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{})}
	st.procs = append(st.procs, p)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		first := true
		for sc.Scan() {
			if first {
				lines <- sc.Text()
				first = false
			}
			fmt.Fprintln(logf, sc.Text())
		}
		close(lines)
	}()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	if args[0] == "ledger" {
		return p, "", nil
	}
	select {
	case l, ok := <-lines:
		if !ok {
			return p, "", fmt.Errorf("%s exited at start; see %s", name, logf.Name())
		}
		return p, l, nil
	case <-time.After(30 * time.Second):
		return p, "", fmt.Errorf("%s printed nothing in 30s; see %s", name, logf.Name())
	case <-ctx.Done():
		return p, "", ctx.Err()
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// scrapeLoop reads every ledger's metrics each second and keeps the last
// values, so a ledger killed during the run still counts.
func (st *stack) scrapeLoop() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		st.scrape()
		select {
		case <-st.stop:
			return
		case <-t.C:
		}
	}
}

func (st *stack) scrape() {
	hc := &http.Client{Timeout: 2 * time.Second}
	for _, p := range st.ledgers {
		resp, err := hc.Get(p.metricsURL)
		if err != nil {
			continue
		}
		vals := parseMetrics(resp.Body)
		resp.Body.Close()
		st.mu.Lock()
		st.scraped[p.metricsURL] = vals
		st.mu.Unlock()
	}
}

// parseMetrics reads unlabelled samples of the Prometheus text format.
func parseMetrics(r io.Reader) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out
}

func (st *stack) sum(metric string) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	var n float64
	for _, vals := range st.scraped {
		n += vals[metric]
	}
	return int64(n)
}

// killBusiestLedger sends SIGKILL to the ledger that has applied the most
// inputs (so the one owning the busy partition): a crash, not a shutdown.
// It returns the ledger's name.
func (st *stack) killBusiestLedger() (string, error) {
	st.scrape()
	st.mu.Lock()
	var victim *proc
	best := -1.0
	for _, p := range st.ledgers {
		if v := st.scraped[p.metricsURL]["sluice_ledger_events_applied_total"]; v > best {
			victim, best = p, v
		}
	}
	st.mu.Unlock()
	if victim == nil {
		return "", errors.New("no ledger to kill")
	}
	return victim.name, victim.cmd.Process.Signal(syscall.SIGKILL)
}

// killOwnerOf sends SIGKILL to the ledger that owns the partition of
// sluice.requests that key hashes to (the gateways' partitioner,
// ledgerd.PartitionOf): a scope's partition for a scope name, a budget's
// partition for a budget id. The owner is found as the peers find it: the
// group's assignment names a member id, and the member's newest heartbeat
// on the members topic names its node. It returns the ledger's name and
// the partitions it owned.
func (st *stack) killOwnerOf(ctx context.Context, key string) (string, []int32, error) {
	cl, err := bus.NewClient(ctx, st.brokers, 10*time.Second)
	if err != nil {
		return "", nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx, st.names.Requests)
	if err != nil {
		return "", nil, fmt.Errorf("list %s: %w", st.names.Requests, err)
	}
	part := ledgerd.PartitionOf(key, len(td[st.names.Requests].Partitions))
	gs, err := adm.DescribeGroups(ctx, st.group())
	if err != nil {
		return "", nil, fmt.Errorf("describe group %s: %w", st.group(), err)
	}
	var member string
	var owned []int32
	for _, m := range gs[st.group()].Members {
		ca, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, t := range ca.Topics {
			if t.Topic == st.names.Requests && slices.Contains(t.Partitions, part) {
				member, owned = m.MemberID, t.Partitions
			}
		}
	}
	if member == "" {
		return "", nil, fmt.Errorf("no member of %s owns %s/%d (key %q)", st.group(), st.names.Requests, part, key)
	}
	node := ""
	err = ledgerd.ReadPartition(ctx, st.brokers, st.names.Members, 0, kgo.NewOffset().AtStart(), -1, func(r *kgo.Record) error {
		var b struct {
			Node     string `json:"node"`
			MemberID string `json:"member_id"`
		}
		if json.Unmarshal(r.Value, &b) == nil && b.MemberID == member {
			node = b.Node
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("read %s: %w", st.names.Members, err)
	}
	for _, p := range st.ledgers {
		if st.prefix+p.name == node {
			sort.Slice(owned, func(i, j int) bool { return owned[i] < owned[j] })
			return p.name, owned, p.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	return "", nil, fmt.Errorf("member %s of %s (owner of partition %d) has no heartbeat naming one of this run's ledgers (node %q)", member, st.group(), part, node)
}

// report fills the stack's part of the report: metrics, and an audit of the
// committed decision log over the run.
// Each of windows gets the decision gap around it; with verify, the log is
// also replayed and compared.
func (st *stack) report(ctx context.Context, runStart, arrivalsEnd time.Time, rep *Report, windows []FaultWindow, verify bool) (*StackReport, error) {
	st.scrape()
	sr := &StackReport{Brokers: strings.Join(st.brokers, ","), TopicPrefix: st.prefix, Ledgers: len(st.ledgers), LogsDir: st.dir,
		TransactionAborts: st.sum("sluice_ledger_transaction_aborts_total"),
		SnapshotsWritten:  st.sum("sluice_ledger_snapshots_total"),
		Rebuilds:          st.sum("sluice_ledger_partition_rebuilds_total"),
		LedgerUnavailable: rep.Totals.GatewayDecisions[string(schemas.GDLedgerUnavailable)],
	}
	if err := st.waitConsumed(ctx, 20*time.Second); err != nil {
		st.log.Warn("audit before the ledgers committed the run's inputs", "err", err)
	}
	a, err := st.audit(ctx, runStart, arrivalsEnd)
	if err != nil {
		return sr, err
	}
	sr.Decisions, sr.LongestDecisionGapMs, sr.DecisionsDoubled, sr.RequestsUndecided = a.decisions, a.longestGapMs, a.doubled, a.undecided
	sr.UndecidedSample = a.undecidedSample
	if sr.ActedDecisionGapMs, err = st.actedGap(ctx, a.busiest, runStart, arrivalsEnd); err != nil {
		return sr, err
	}
	sr.BusiestPartition, sr.BusiestSnapshots = a.busiest, a.busiestSnapshots
	sr.Budgets = a.budgets
	for _, w := range windows {
		w.StartMs, w.EndMs = w.Start.Sub(runStart).Milliseconds(), w.End.Sub(runStart).Milliseconds()
		w.LongestDecisionGapMs, w.Decisions = gapAround(a.busiestTimes, w.Start.UnixMilli(), w.End.UnixMilli())
		sr.FaultWindows = append(sr.FaultWindows, w)
	}
	if verify {
		vr, err := ledgerd.Verify(ctx, ledgerd.ReplayOptions{Brokers: st.brokers, Topics: st.names, Group: st.group()})
		if err != nil {
			return sr, fmt.Errorf("replay --verify: %w", err)
		}
		sr.Replay = &ReplaySummary{Partitions: vr.Partitions, Inputs: vr.Inputs, Decisions: vr.Decisions, Divergences: len(vr.Divergences)}
	}
	return sr, nil
}

// waitConsumed waits (at most bound) until the ledgers' group has
// committed every requests partition up to its end offset as of now. The
// audit reads the committed log: a run whose last answers were acted on
// from a transaction not yet committed (after a takeover the survivor
// commits all the partitions) would otherwise count their reservations
// as undecided.
func (st *stack) waitConsumed(ctx context.Context, bound time.Duration) error {
	cl, err := bus.NewClient(ctx, st.brokers, 10*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, st.names.Requests)
	if err != nil {
		return fmt.Errorf("end offsets of %s: %w", st.names.Requests, err)
	}
	deadline := time.Now().Add(bound)
	for {
		behind := 0
		committed, err := adm.FetchOffsets(ctx, st.group())
		if err == nil {
			ends.Each(func(o kadm.ListedOffset) {
				if c, ok := committed.Lookup(o.Topic, o.Partition); o.Err == nil && (!ok || c.At < o.Offset) {
					behind++
				}
			})
			if behind == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d partitions of %s not committed up to their end after %v (last error: %v)", behind, st.names.Requests, bound, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type auditResult struct {
	decisions, doubled, undecided int
	longestGapMs                  int64
	busiest                       int32
	busiestSnapshots              int
	// busiestTimes are the busiest partition's decision times (ms,
	// sorted) in the arrival window.
	busiestTimes    []int64
	budgets         []BudgetReport
	undecidedSample []string
}

// auditAttempt names one attempt of one request.
type auditAttempt struct {
	id string
	n  int32
}

// auditor holds what audit gathers while it reads the run's topics record
// by record, so that each step of the audit is a method over one state.
type auditor struct {
	runStart, arrivalsEnd time.Time
	a                     auditResult
	reserved              map[auditAttempt]string // what each reserve or retry asked, for the undecided sample
	decided               map[auditAttempt]bool
	seen                  map[string]bool   // decision ids, to count doubles
	times                 map[int32][]int64 // decision times in the arrival window, by input partition
	ba                    *budgetAudit
}

// audit reads the run's committed requests and decisions.
func (st *stack) audit(ctx context.Context, runStart, arrivalsEnd time.Time) (auditResult, error) {
	au := &auditor{runStart: runStart, arrivalsEnd: arrivalsEnd,
		reserved: map[auditAttempt]string{}, decided: map[auditAttempt]bool{},
		seen: map[string]bool{}, times: map[int32][]int64{}, ba: newBudgetAudit(runStart)}
	if err := st.auditTopics(ctx, au); err != nil {
		return au.a, err
	}
	au.a.budgets = au.ba.reports()
	au.countUndecided()
	busiest := au.busiestPartition()
	au.a.busiest = max(busiest, 0)
	if err := st.auditSnapshots(ctx, au); err != nil {
		return au.a, err
	}
	au.gaps(busiest)
	return au.a, nil
}

// auditTopics feeds every committed record of the requests and decisions
// topics, partition by partition, to the auditor.
func (st *stack) auditTopics(ctx context.Context, au *auditor) error {
	cl, err := bus.NewClient(ctx, st.brokers, 10*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, topic := range []string{st.names.Requests, st.names.Decisions} {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		for _, p := range td[topic].Partitions.Numbers() {
			var ev schemas.Event
			err := ledgerd.ReadPartition(ctx, st.brokers, topic, p, kgo.NewOffset().AtStart(), -1, func(r *kgo.Record) error {
				if schemas.Decode(r.Value, &ev) != nil {
					return nil
				}
				au.record(r, &ev)
				return nil
			})
			if err != nil {
				return fmt.Errorf("audit %s/%d: %w", topic, p, err)
			}
		}
	}
	return nil
}

// record takes one decoded event: a reserve or retry is remembered until a
// decision for its attempt arrives; a decision is counted, checked for a
// double and, in the arrival window, timed.
func (au *auditor) record(r *kgo.Record, ev *schemas.Event) {
	au.ba.add(ev, r.Timestamp)
	switch {
	case ev.ReserveRequested != nil, ev.RetryRequested != nil:
		kind := "reserve"
		if ev.RetryRequested != nil {
			kind = "retry"
		}
		au.reserved[auditAttempt{ev.RequestID, ev.Attempt}] = fmt.Sprintf("%s/%d %s %s p%d@%d at %d ms", ev.RequestID, ev.Attempt, kind, ev.Scope,
			r.Partition, r.Offset, r.Timestamp.Sub(au.runStart).Milliseconds())
	case ev.Decision != nil:
		au.a.decisions++
		if au.seen[ev.ID] {
			au.a.doubled++
		}
		au.seen[ev.ID] = true
		au.decided[auditAttempt{ev.RequestID, ev.Attempt}] = true
		if ts := r.Timestamp; !ts.Before(au.runStart) && ts.Before(au.arrivalsEnd) {
			// Decisions go to their gateway's partition: group
			// them by the input partition that decided them.
			ip := ev.Decision.InputPartition
			au.times[ip] = append(au.times[ip], ts.UnixMilli())
		}
	}
}

// countUndecided counts the attempts that never got a decision and keeps
// up to 10 of them, sorted, as a sample to show.
func (au *auditor) countUndecided() {
	for k, what := range au.reserved {
		if !au.decided[k] {
			au.a.undecided++
			if len(au.a.undecidedSample) < 10 {
				au.a.undecidedSample = append(au.a.undecidedSample, what)
			}
		}
	}
	sort.Strings(au.a.undecidedSample)
}

// busiestPartition is the input partition with the most decisions in the
// arrival window, or -1 if there were none.
func (au *auditor) busiestPartition() int32 {
	busiest := int32(-1)
	for p, ts := range au.times {
		if busiest < 0 || len(ts) > len(au.times[busiest]) {
			busiest = p
		}
	}
	return busiest
}

// auditSnapshots counts the snapshots written for the busiest partition.
func (st *stack) auditSnapshots(ctx context.Context, au *auditor) error {
	key := string(ledgerd.SnapshotKey(au.a.busiest))
	err := ledgerd.ReadPartition(ctx, st.brokers, st.names.Snapshots, 0, kgo.NewOffset().AtStart(), -1, func(r *kgo.Record) error {
		if string(r.Key) == key {
			au.a.busiestSnapshots++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit %s: %w", st.names.Snapshots, err)
	}
	return nil
}

// gaps sorts the busiest partition's decision times and finds the longest
// gap between two in a row.
func (au *auditor) gaps(busiest int32) {
	if ts := au.times[busiest]; len(ts) > 1 {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		au.a.busiestTimes = ts
		for i := 1; i < len(ts); i++ {
			au.a.longestGapMs = max(au.a.longestGapMs, ts[i]-ts[i-1])
		}
	}
}

// actedGap returns the longest gap between consecutive decisions of input
// partition busiest in [runStart, arrivalsEnd), as gateways see them: the
// decisions topic read uncommitted, each decision id at its first record.
func (st *stack) actedGap(ctx context.Context, busiest int32, runStart, arrivalsEnd time.Time) (int64, error) {
	cl, err := bus.NewClient(ctx, st.brokers, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, st.names.Decisions)
	if err != nil {
		return 0, fmt.Errorf("list end offsets of %s: %w", st.names.Decisions, err)
	}
	seen := map[string]bool{}
	var ts []int64
	var readErr error
	ends.Each(func(o kadm.ListedOffset) {
		if readErr != nil || o.Err != nil || o.Offset <= 0 {
			readErr = errors.Join(readErr, o.Err)
			return
		}
		rc, err := bus.NewClient(ctx, st.brokers, 10*time.Second,
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{o.Topic: {o.Partition: kgo.NewOffset().AtStart()}}),
			kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
		if err != nil {
			readErr = err
			return
		}
		defer rc.Close()
		var ev schemas.Event
		for next := int64(0); next < o.Offset; {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			fs := rc.PollFetches(pctx)
			cancel()
			if ctx.Err() != nil || fs.NumRecords() == 0 {
				readErr = fmt.Errorf("read %s/%d uncommitted: stopped at %d of %d: %w", o.Topic, o.Partition, next, o.Offset, errors.Join(ctx.Err(), fs.Err0()))
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				next = r.Offset + 1
				if r.Attrs.IsControl() || schemas.Decode(r.Value, &ev) != nil || ev.Decision == nil || seen[ev.ID] {
					return
				}
				seen[ev.ID] = true
				if ev.Decision.InputPartition == busiest && !r.Timestamp.Before(runStart) && r.Timestamp.Before(arrivalsEnd) {
					ts = append(ts, r.Timestamp.UnixMilli())
				}
			})
		}
	})
	if readErr != nil {
		return 0, readErr
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	var gap int64
	for i := 1; i < len(ts); i++ {
		gap = max(gap, ts[i]-ts[i-1])
	}
	return gap, nil
}

// Close stops every process (SIGTERM, then SIGKILL after 5 s) and deletes
// the run's topics. The logs stay in LogsDir.
func (st *stack) Close() {
	select {
	case <-st.stop:
	default:
		close(st.stop)
	}
	for i := len(st.procs) - 1; i >= 0; i-- {
		p := st.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if len(st.brokers) > 0 && st.names.Requests != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if cl, err := bus.NewClient(ctx, st.brokers, 5*time.Second); err == nil {
			if _, err := kadm.NewClient(cl).DeleteTopics(ctx, st.names.Created()...); err != nil && !errors.Is(err, context.Canceled) {
				st.log.Warn("delete the run's topics", "prefix", st.prefix, "err", err)
			}
			cl.Close()
		}
	}
}
