//go:build integration

package ledgerd_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// capacityPerSec is the fixed one-second request window of every key in
// the test config: the auditor checks that no window grants more.
const capacityPerSec = 20

const testLedgerConfig = `{"scopes":[{"name":"*","buckets":[
 {"level":"key","id":"*","dimension":"requests","refill":"fixed","capacity":20,"period_ms":1000}]}]}`

// alteredLedgerConfig differs only in capacity: replaying with it must diverge.
const alteredLedgerConfig = `{"scopes":[{"name":"*","buckets":[
 {"level":"key","id":"*","dimension":"requests","refill":"fixed","capacity":7,"period_ms":1000}]}]}`

var sluiceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-bin")
	if err != nil {
		panic(err)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "build", "-o", sluiceBin, "./services/sluice")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build sluice: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// rig is one isolated Sluice installation (its own topic prefix and group)
// on the real broker, with a load generator and a decision auditor.
type rig struct {
	t       *testing.T
	brokers []string
	prefix  string
	names   bus.Names
	group   string

	prod *kgo.Client

	mu        sync.Mutex
	sent      map[string]bool // request ids acked by the broker
	terminal  map[string][]schemas.Event
	decisions []decisionAt
	granted   map[string]bool
	errs      []string
	// gatewayActs: grants are reconciled by actOn, a gateway's reader of
	// produced decisions, not by the committed auditor.
	gatewayActs bool
	// logs holds the log files of the ledger processes started, by node.
	logs map[string][]string
}

type decisionAt struct {
	partition int32     // input partition that decided it
	at        time.Time // record (log append) time of the decision
	ev        schemas.Event
}

func newRig(t *testing.T, partitions int32) *rig {
	t.Helper()
	return newRigOn(t, bus.SplitBrokers(testenv.KafkaBrokers(t)), partitions)
}

// newRigOn is newRig on the given brokers (a private broker, for faults
// that must not touch the shared one).
func newRigOn(t *testing.T, brokers []string, partitions int32) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := &rig{t: t, brokers: brokers, logs: map[string][]string{},
		prefix: fmt.Sprintf("test%d.", time.Now().UnixNano()),
		sent:   map[string]bool{}, terminal: map[string][]schemas.Event{}, granted: map[string]bool{}}
	r.names = bus.NamesWithPrefix(r.prefix)
	r.group = r.prefix + "ledger"
	cl, err := bus.NewClient(ctx, r.brokers, 20*time.Second)
	if err != nil {
		t.Fatalf("real Kafka broker required (make up): %v", err)
	}
	defer cl.Close()
	tc := bus.DefaultTopics()
	tc.RequestPartitions, tc.Names = partitions, r.names
	if _, err := bus.Ensure(ctx, kadm.NewClient(cl), tc.Specs()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kadm.NewClient(cl).DeleteTopics(context.Background(), r.names.Created()...) })
	if err := ledgerd.PublishConfig(ctx, r.brokers, r.names, []byte(testLedgerConfig), "test"); err != nil {
		t.Fatal(err)
	}
	r.prod, err = kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.ProducerLinger(0), kgo.RecordPartitioner(bus.ScopePartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.prod.Close)
	return r
}

// ledger starts a `sluice ledger` process at the default snapshot, session
// and transaction settings: shortened values would hide how takeover and
// snapshots behave in production.
func (r *rig) ledger(node string, extra ...string) *exec.Cmd {
	r.t.Helper()
	args := append([]string{"ledger", "--brokers", strings.Join(r.brokers, ","), "--topic-prefix", r.prefix,
		"--group", r.group, "--node", node, "-v"}, extra...)
	cmd := exec.Command(sluiceBin, args...)
	// SLUICE_TEST_LOG_DIR keeps the ledgers' logs after the test (a
	// temporary directory's go with it), for timelines such as a broker
	// restart's (issue 19).
	dir := os.Getenv("SLUICE_TEST_LOG_DIR")
	if dir == "" {
		dir = r.t.TempDir()
	}
	logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.log", node, time.Now().UnixNano())))
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	r.logs[node] = append(r.logs[node], logf.Name())
	r.mu.Unlock()
	r.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		if r.t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			r.t.Logf("%s log (tail):\n%s", node, tail(b, 3000))
		}
	})
	return cmd
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func (r *rig) produce(ctx context.Context, ev *schemas.Event) error {
	b, err := schemas.Encode(ev)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return r.prod.ProduceSync(pctx, &kgo.Record{Topic: r.names.Requests, Key: []byte(ev.Scope), Value: b}).FirstErr()
}

// load sends ReserveRequested events across scopes at about rate/s until
// ctx ends. Each is counted as sent once the broker acked it.
func (r *rig) load(ctx context.Context, rate int, scopes int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		scope := fmt.Sprintf("scope-%d", i%scopes)
		ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = fmt.Sprintf("req-%06d", i), 1, "loadgen", scope, "t", "k-"+scope, "interactive"
		ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "key", ID: "k-" + scope}}, InputTokens: 10, OutputTokens: 10}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.produce(context.Background(), ev); err != nil {
				r.mu.Lock()
				r.errs = append(r.errs, err.Error())
				r.mu.Unlock()
				return
			}
			r.mu.Lock()
			r.sent[ev.RequestID] = true
			r.mu.Unlock()
		}()
	}
}

// audit consumes decisions (read_committed) until ctx ends, reconciling
// every grant like a gateway would.
func (r *rig) audit(ctx context.Context) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.ConsumeTopics(r.names.Decisions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		r.t.Error(err)
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(rec *kgo.Record) {
			var ev schemas.Event
			if err := schemas.Decode(rec.Value, &ev); err != nil || ev.Decision == nil {
				return
			}
			d := ev.Decision
			r.mu.Lock()
			r.decisions = append(r.decisions, decisionAt{d.InputPartition, rec.Timestamp, ev})
			terminal := d.Status != schemas.StatusQueued && d.Reason != "hold_ttl_abandoned"
			if terminal {
				r.terminal[ev.RequestID] = append(r.terminal[ev.RequestID], ev)
			}
			r.mu.Unlock()
			if d.Status == schemas.StatusGranted && !r.gatewayActs {
				rc := ev
				rc.Type, rc.ID, rc.Decision = schemas.TypeReconciled, eventid.NewID(), nil
				rc.Reconciled = &schemas.Reconciled{InputTokens: 10, OutputTokens: 10, HTTPStatus: 200}
				go func() { _ = r.produce(context.Background(), &rc) }()
			}
		})
	}
}

// settle waits until every sent request has a terminal decision.
func (r *rig) settle(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		missing := 0
		for id := range r.sent {
			if len(r.terminal[id]) == 0 {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// check asserts the exactly-once properties over the whole decision log.
func (r *rig) check() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sent) == 0 {
		r.t.Fatal("no request was sent")
	}
	missing, doubled := 0, 0
	for id := range r.sent {
		switch n := len(r.terminal[id]); {
		case n == 0:
			missing++
			if missing <= 5 {
				r.t.Errorf("request %s has no terminal decision", id)
			}
		case n > 1:
			doubled++
			if doubled <= 5 {
				r.t.Errorf("request %s has %d terminal decisions: %+v", id, n, r.terminal[id])
			}
		}
	}
	// Fixed one-second windows of log time, per key.
	perWindow := map[string]int{}
	statuses := map[schemas.Status]int{}
	for _, d := range r.decisions {
		statuses[d.ev.Decision.Status]++
		if d.ev.Decision.Status == schemas.StatusGranted {
			perWindow[fmt.Sprintf("%s@%d", d.ev.KeyID, d.ev.Decision.LogTimeMs/1000)]++
		}
	}
	for w, n := range perWindow {
		if n > capacityPerSec {
			r.t.Errorf("window %s granted %d > capacity %d", w, n, capacityPerSec)
		}
	}
	r.t.Logf("sent %d requests, %d decisions %v, %d produce errors; missing %d, doubled %d",
		len(r.sent), len(r.decisions), statuses, len(r.errs), missing, doubled)
}

// replay runs `sluice replay --verify` over the rig's log.
func (r *rig) replay(extra ...string) (string, error) {
	args := append([]string{"replay", "--verify", "--brokers", strings.Join(r.brokers, ","), "--topic-prefix", r.prefix, "--group", r.group}, extra...)
	var out bytes.Buffer
	cmd := exec.Command(sluiceBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (r *rig) verifyReplay() {
	r.t.Helper()
	out, err := r.replay()
	if err != nil || !strings.Contains(out, "no divergence") {
		r.t.Errorf("replay --verify: %v\n%s", err, out)
	}
	alt := filepath.Join(r.t.TempDir(), "altered.json")
	if err := os.WriteFile(alt, []byte(alteredLedgerConfig), 0o644); err != nil {
		r.t.Fatal(err)
	}
	out, err = r.replay("--ledger-config", alt)
	if err == nil || !strings.Contains(out, "differs") {
		r.t.Errorf("replay with an altered config reported no divergence: %v\n%s", err, out)
	}
}

// TestFailoverKill9: two ledger members share the partitions under steady
// load; one is killed with SIGKILL; the other takes over. Across the decision
// log every request has exactly one terminal decision and no fixed window
// grants beyond capacity; replay reproduces every decision.
func TestFailoverKill9(t *testing.T) {
	r := newRig(t, 4)
	a := r.ledger("ledger-a")
	r.ledger("ledger-b")

	actx, stopAudit := context.WithCancel(context.Background())
	defer stopAudit()
	go r.audit(actx)

	lctx, stopLoad := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.load(lctx, 240, 8); close(done) }()
	time.Sleep(4 * time.Second)

	killAt := time.Now()
	if err := a.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	time.Sleep(12 * time.Second)
	stopLoad()
	<-done
	r.settle(45 * time.Second)
	stopAudit()
	r.check()

	gapMax := r.longestGapAfter(killAt)
	// The survivor's account of the takeover (eviction, rebuilds).
	r.mu.Lock()
	for _, p := range r.logs["ledger-b"] {
		raw, _ := os.ReadFile(p)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, "peer") || strings.Contains(line, "partition rebuilt") || strings.Contains(line, "session") || strings.Contains(line, "level=WARN") {
				t.Logf("ledger-b: %s", line)
			}
		}
	}
	r.mu.Unlock()
	t.Logf("killed ledger-a at %s", killAt.UTC().Format("15:04:05.000"))
	t.Logf("takeover: longest decision gap on any partition after kill -9 = %v", gapMax.Round(time.Millisecond))
	r.verifyReplay()
}

// TestBrokerRestart: the broker is restarted under load; once it is back,
// no decision is lost or duplicated. The broker is the test's own
// (testenv.StartPrivateBroker): restarting the shared one would fail every other
// test running against it.
func TestBrokerRestart(t *testing.T) {
	b := testenv.StartPrivateBroker(t)
	r := newRigOn(t, []string{b.Addr}, 2)
	r.ledger("ledger-r")
	actx, stopAudit := context.WithCancel(context.Background())
	defer stopAudit()
	go r.audit(actx)

	lctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad() // a Fatal before the restart stops the load too
	done := make(chan struct{})
	var sentBefore atomic.Int64
	go func() { r.load(lctx, 60, 4); close(done) }()
	// The member must be deciding before the broker goes: on a fresh
	// broker the first join creates __consumer_offsets and the first
	// InitProducerID __transaction_state, which took longer than the 3 s
	// this used to wait, and the run then timed the broker's first start-up
	// of its coordinators instead of a restart.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r.mu.Lock()
		n := len(r.decisions)
		r.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no decision within 90 s of the start, before the restart")
		}
	}
	time.Sleep(3 * time.Second)
	r.mu.Lock()
	sentBefore.Store(int64(len(r.sent)))
	r.mu.Unlock()

	// SLUICE_TEST_RESTART_HOLD (a duration) keeps the broker down that
	// long: before/after comparisons need outages of one length.
	var hold time.Duration
	if v := os.Getenv("SLUICE_TEST_RESTART_HOLD"); v != "" {
		var err error
		if hold, err = time.ParseDuration(v); err != nil {
			t.Fatalf("SLUICE_TEST_RESTART_HOLD: %v", err)
		}
	}
	restartAt := time.Now()
	b.RestartAfter(t, hold)
	back := time.Now()
	time.Sleep(5 * time.Second)
	stopLoad()
	<-done
	r.settle(60 * time.Second)
	stopAudit()
	r.check()
	r.mu.Lock()
	after := len(r.sent)
	r.mu.Unlock()
	if int64(after) <= sentBefore.Load() {
		t.Errorf("no request was accepted after the restart (%d before, %d after)", sentBefore.Load(), after)
	}
	r.mu.Lock()
	var firstAfter time.Time
	for _, d := range r.decisions {
		if d.at.After(back) && (firstAfter.IsZero() || d.at.Before(firstAfter)) {
			firstAfter = d.at
		}
	}
	r.mu.Unlock()
	const stamp = "15:04:05.000"
	t.Logf("broker restart: began %s, broker answered %s, first decision after it %s (UTC)",
		restartAt.UTC().Format(stamp), back.UTC().Format(stamp), firstAfter.UTC().Format(stamp))
	t.Logf("broker restart: down and up again in %v; first decision %v after it answered; longest decision gap on any partition after the restart began = %v",
		back.Sub(restartAt).Round(time.Millisecond), firstAfter.Sub(back).Round(time.Millisecond), r.longestGapAfter(restartAt).Round(time.Millisecond))
	r.verifyReplay()
}

// longestGapAfter is, per partition, the longest silence in committed
// decisions after from (counted from from), the longest over partitions.
func (r *rig) longestGapAfter(from time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := map[int32]time.Time{}
	var gapMax time.Duration
	sort.Slice(r.decisions, func(i, j int) bool { return r.decisions[i].at.Before(r.decisions[j].at) })
	for _, d := range r.decisions {
		prev, ok := last[d.partition]
		if !ok || prev.Before(from) {
			prev = from
		}
		if d.at.After(from) {
			gapMax = max(gapMax, d.at.Sub(prev))
		}
		last[d.partition] = d.at
	}
	return gapMax
}
