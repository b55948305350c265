//go:build integration

package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/analytics/synth"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/dev"
	"github.com/sluice-dev/sluice/services/loadtest"
)

var record = flag.Bool("record", false, "write the recorded loads to testdata/recorded-NAME.jsonl.gz (TestIntegrationOracleRecordedLoad)")

// recordLoad runs a scenario (testdata/NAME.yaml) against the embedded
// stack (gateway, ledger, simulator on kfake) and returns every committed
// record of every Sluice topic, with its log time: the recorded load. A
// tenant's cancel_fraction cancels every ⌈1/fraction⌉-th of its requests
// after cancel_after (the client goes away).
func recordLoad(t *testing.T, scenario string) []synth.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", scenario))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := loadtest.ParseScenario(b, scenario)
	if err != nil {
		t.Fatal(err)
	}
	keys := loadtest.NewKeys(sc)
	simCfg := sc.SimConfig
	ctx := context.Background()
	f := faultsOf[scenario]
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Sim: &simCfg, APIKey: "sk-oracle-unused",
		Config: func(simURL string) (*config.Config, error) {
			y, err := faultConfigYAML(sc, simURL, keys, "", f)
			if err != nil {
				return nil, err
			}
			return config.Load(bytes.NewReader(y))
		}})
	if err != nil {
		t.Fatalf("embedded stack: %v", err)
	}
	defer st.Close()
	killedURL, kill := "", func() {}
	onKilled := map[string]bool{}
	for _, id := range f.Killed {
		onKilled[id] = true
	}
	if len(f.Killed) > 0 {
		y, err := faultConfigYAML(sc, st.SimURL, keys, "gw-killed", f)
		if err != nil {
			t.Fatal(err)
		}
		killedURL, kill = startGatewayProcess(t, st, y)
		defer kill()
	}
	var killed sync.WaitGroup
	if f.KillAt > 0 {
		killed.Add(1)
		time.AfterFunc(f.KillAt, func() { defer killed.Done(); kill(); t.Logf("gw-killed: SIGKILL at %s", f.KillAt) })
	}
	if f.StallFor > 0 {
		killed.Add(1)
		time.AfterFunc(f.StallAt, func() {
			defer killed.Done()
			st.StopLedger()
			time.Sleep(f.StallFor)
			if err := st.StartLedger(ctx); err != nil {
				t.Errorf("ledger restart: %v", err)
			}
		})
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	start := time.Now()
	dur := sc.Duration.D()
	for ti := range sc.Tenants {
		tn := sc.Tenants[ti]
		m := map[string]any{"model": sc.Model, "max_tokens": tn.MaxTokens,
			"messages": []map[string]string{
				{"role": "system", "content": "You answer for tenant " + tn.ID + "."},
				{"role": "user", "content": strings.Repeat("tok ", int(tn.PromptTokens))}}}
		if tn.Stream {
			m["stream"] = true
			m["stream_options"] = map[string]bool{"include_usage": true}
		}
		body, _ := json.Marshal(m)
		interval := time.Duration(float64(time.Second) / tn.Rate)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Duration(i)*interval < dur; i++ {
				at := time.Duration(i) * interval
				time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
				wg.Add(1)
				cancelled := tn.CancelFraction > 0 && i%int(math.Ceil(1/tn.CancelFraction)) == 0
				go func() {
					defer wg.Done()
					rctx := context.Background()
					if cancelled {
						var cancel context.CancelFunc
						rctx, cancel = context.WithTimeout(rctx, tn.CancelAfter.D())
						defer cancel()
					}
					url := st.GatewayURL
					if onKilled[tn.ID] && at < f.KillAt {
						url = killedURL // until the kill; then it fails over
					}
					req, _ := http.NewRequestWithContext(rctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+keys[tn.ID])
					req.Header.Set("Content-Type", "application/json")
					if resp, err := hc.Do(req); err == nil {
						_, _ = bytes.NewBuffer(nil).ReadFrom(resp.Body)
						resp.Body.Close()
					}
				}()
			}
		}()
	}
	wg.Wait()
	killed.Wait()
	// Let the gateway's last Reconciled/Outcome events and the ledger's
	// expiries land.
	time.Sleep(3 * time.Second)

	// The stack keeps writing while it runs (snapshots, liveness), so
	// "until the topics go quiet" can take minutes: read up to the end
	// offsets of this moment instead. Control records (transaction markers)
	// are kept so that every offset below the end is seen.
	return readToEnd(t, ctx, st.Brokers, bus.NamesWithPrefix("").All())
}

// readToEnd reads topics (read_committed) up to their end offsets of this
// moment: the records that decode as events, partitions folded onto the
// fixture topic's two.
func readToEnd(t *testing.T, ctx context.Context, brokers, topics []string) []synth.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]map[int32]int64{} // partitions not yet read to their end
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			if left[o.Topic] == nil {
				left[o.Topic] = map[int32]int64{}
			}
			left[o.Topic][o.Partition] = o.Offset
		}
	})
	var recs []synth.Record
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("recorded load: not read to the end offsets in 60 s: %v left", left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Topic][r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset == end-1 {
				delete(left[r.Topic], r.Partition)
				if len(left[r.Topic]) == 0 {
					delete(left, r.Topic)
				}
			}
			if r.Attrs.IsControl() {
				return
			}
			var e schemas.Event
			if schemas.Decode(r.Value, &e) != nil {
				return
			}
			recs = append(recs, synth.Record{Partition: r.Partition % 2, LogTimeMs: r.Timestamp.UnixMilli(), Value: r.Value, Event: &e})
		})
	}
	return recs
}

// recordedScenarios are the loads recorded from the embedded stack.
var recordedScenarios = []string{"oracle-load.yaml", "oracle-storm.yaml", "oracle-faults.yaml"}

// recordFaults are the faults a recorded scenario adds to its load, on
// the real code paths: a gateway process killed, a ledger stalled.
type recordFaults struct {
	// Killed names the tenants whose clients talk to a second gateway, a
	// `sluice gateway` process on the same broker, until KillAt, when it
	// gets SIGKILL (no Released, no Reconciled, no more heartbeats) and
	// they fail over to the stack's gateway.
	Killed []string
	KillAt time.Duration
	// StallAt and StallFor stop the ledger member and start it again:
	// the inputs of the stall are decided at their own log time, later
	// than the late-grant bound, so their grants are released as
	// late_grant and asked again.
	StallAt, StallFor time.Duration
	// NodeLivenessMs is the ledger's node_liveness_ms (default 10 s,
	// longer than the run's tail).
	NodeLivenessMs int64
}

var faultsOf = map[string]recordFaults{
	"oracle-faults.yaml": {Killed: []string{"jobs"}, KillAt: 7 * time.Second,
		StallAt: 3 * time.Second, StallFor: 1500 * time.Millisecond, NodeLivenessMs: 2000},
}

// faultConfigYAML is the load tester's gateway config for sc, named node
// (empty: as generated) and with the ledger's node_liveness_ms of f.
func faultConfigYAML(sc *loadtest.Scenario, simURL string, keys loadtest.Keys, node string, f recordFaults) ([]byte, error) {
	y, err := loadtest.GatewayConfigYAML(sc, simURL, keys)
	if err != nil || (node == "" && f.NodeLivenessMs == 0) {
		return y, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(y, &doc); err != nil {
		return nil, err
	}
	if node != "" {
		doc["node"] = node
	}
	if f.NodeLivenessMs > 0 {
		led, ok := doc["ledger"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("generated gateway config: no ledger section")
		}
		led["node_liveness_ms"] = f.NodeLivenessMs
	}
	return yaml.Marshal(doc)
}

// startGatewayProcess runs `sluice gateway` (built from this tree) with
// config cfg on st's broker and ledger group, and returns its URL once
// it is ready, and a kill that sends it SIGKILL.
func startGatewayProcess(t *testing.T, st *dev.Stack, cfg []byte) (string, func()) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", bin, "./services/sluice")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "gateway", "--brokers", strings.Join(st.Brokers, ","), "--config", path,
		"--addr", addr, "--metrics-addr", "", "--ledger-group", st.LedgerGroup)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			logf.Close()
		})
	}
	url := "http://" + addr
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, kill
			}
		}
		if time.Now().After(deadline) {
			kill()
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("sluice gateway not ready in 90 s:\n%s", b)
		}
	}
}

// TestIntegrationOracleRecordedLoad: the load tester's scenarios against
// the embedded stack, recorded, then through the real Kafka and sink into
// ClickHouse 18.16; every query equals Go over the recorded events, and the
// same rows give the same results on ClickHouse 26.x (chDB). With -record
// the logs are written to testdata (recorded-NAME.jsonl.gz), which
// TestIntegrationOracleRecordedLogs and the grammar test read.
func TestIntegrationOracleRecordedLoad(t *testing.T) {
	for _, sc := range recordedScenarios {
		t.Run(strings.TrimSuffix(sc, ".yaml"), func(t *testing.T) {
			recs := recordLoad(t, sc)
			if *record {
				if err := synth.WriteLog(filepath.Join("testdata", "recorded-"+strings.TrimSuffix(sc, ".yaml")+".jsonl.gz"), recs); err != nil {
					t.Fatal(err)
				}
			}
			oracleOverRecorded(t, recs)
		})
	}
}

// TestIntegrationOracleRecordedLogs: the logs recorded in testdata (the
// real gateway, ledger and simulator), every query on 18.16 and chDB
// against the oracle.
func TestIntegrationOracleRecordedLogs(t *testing.T) {
	files, _ := filepath.Glob("testdata/recorded-*.jsonl.gz")
	if len(files) == 0 {
		t.Fatal("no testdata/recorded-*.jsonl.gz (record them with -run RecordedLoad -record)")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			recs, err := synth.ReadLog(f)
			if err != nil {
				t.Fatal(err)
			}
			oracleOverRecorded(t, recs)
		})
	}
}

func oracleOverRecorded(t *testing.T, recs []synth.Record) {
	types := map[schemas.Type]int{}
	minMs, maxMs := recs[0].LogTimeMs, recs[0].LogTimeMs
	for _, r := range recs {
		types[r.Event.Type]++
		minMs, maxMs = min(minMs, r.LogTimeMs), max(maxMs, r.LogTimeMs)
	}
	t.Logf("recorded %d events: %v", len(recs), types)
	for _, typ := range []schemas.Type{schemas.TypeReserveRequested, schemas.TypeDecision, schemas.TypeDispatched, schemas.TypeReconciled, schemas.TypeOutcome} {
		if types[typ] == 0 {
			t.Fatalf("recorded load has no %s", typ)
		}
	}
	conn, db := sinkFixture(t, recs)
	rng := Range{From: time.UnixMilli(minMs).Add(-time.Hour).Truncate(time.Second), To: time.UnixMilli(maxMs).Add(time.Hour).Truncate(time.Second)}
	// Producer times (produced_at) are the gateway's wall clock, close to
	// the log times: the hour either side covers them.
	got := runAll(t, conn, db, rng)
	checkOracle(t, recs, got, rng, false)
	t.Run("chdb_26", func(t *testing.T) { compareWithChDBRange(t, conn, db, got, rng, false) })
}
