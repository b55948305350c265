//go:build integration

package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/analytics/synth"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/loadtest"
)

// recordBudget is a sluice binary: with it, TestIntegrationBudgetRecorded
// runs `sluice loadtest --scenario budget-two-providers --config
// deploy/scenarios/gateway/budget-two-providers.yaml --brokers ADDR
// --json` on the test broker, records the run's committed log while it
// runs (the loadtest deletes its topics when done) and writes it and the
// loadtest's own stack.budgets to testdata.
var recordBudget = flag.String("record-budget", "", "a sluice binary: record a budget-two-providers --brokers run (TestIntegrationBudgetRecorded)")

// recordBudgetRun runs the loadtest and returns its run's records and its
// JSON report. The run's topic prefix is random and printed only in the
// report, so every loadtest prefix's topics are read (read_committed)
// while it runs and those of the run kept.
func recordBudgetRun(t *testing.T, sluice string) ([]synth.Record, []byte) {
	t.Helper()
	brokers := strings.Split(testenv.KafkaBrokers(t), ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeRegex(),
		kgo.ConsumeTopics(`^lt[0-9]+\.sluice\.(requests|decisions|snapshots|telemetry)$`),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMaxAge(time.Second), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type rec struct {
		topic string
		r     synth.Record
	}
	var mu sync.Mutex
	var all []rec
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				var e schemas.Event
				if schemas.Decode(r.Value, &e) != nil {
					return
				}
				mu.Lock()
				all = append(all, rec{r.Topic, synth.Record{Partition: r.Partition % 2, LogTimeMs: r.Timestamp.UnixMilli(), Value: r.Value, Event: &e}})
				mu.Unlock()
			})
		}
	}()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	cmd := exec.Command(sluice, "loadtest", "--scenario", "budget-two-providers",
		"--config", filepath.Join(root, "deploy/scenarios/gateway/budget-two-providers.yaml"),
		"--brokers", strings.Join(brokers, ","), "--json")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	time.Sleep(2 * time.Second) // the consumer's lag behind the run's last records
	cancel()
	<-done
	if err != nil {
		t.Fatalf("sluice loadtest: %v: %s", err, stderr.String())
	}
	var rep struct {
		Stack *struct {
			TopicPrefix string `json:"topic_prefix"`
		} `json:"stack"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || rep.Stack == nil {
		t.Fatalf("loadtest report: %v", err)
	}
	var recs []synth.Record
	for _, r := range all {
		if strings.HasPrefix(r.topic, rep.Stack.TopicPrefix) {
			recs = append(recs, r.r)
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].LogTimeMs < recs[j].LogTimeMs })
	t.Logf("recorded %d events of prefix %s", len(recs), rep.Stack.TopicPrefix)
	return recs, out
}

const (
	budgetLogFile    = "testdata/budget-two-providers.jsonl.gz"
	budgetFigureFile = "testdata/budget-two-providers.budgets.json"
)

// TestIntegrationBudgetRecorded: the committed log of a real-broker run
// of budget-two-providers (two ledgers, gateways, simulator; recorded
// with -record-budget) through the real Kafka and sink into 18.16 and on
// chDB. budget_burn must equal the Go oracle and the loadtest's own audit
// of the same run (stack.budgets: limit, spent, granted and returned per
// holder scope), which reads the log with its own code.
func TestIntegrationBudgetRecorded(t *testing.T) {
	if *recordBudget != "" {
		recs, b := recordBudgetRun(t, *recordBudget)
		if err := synth.WriteLog(budgetLogFile, recs); err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Stack *struct {
				Budgets []loadtest.BudgetReport `json:"budgets"`
			} `json:"stack"`
		}
		if err := json.Unmarshal(b, &rep); err != nil || rep.Stack == nil || len(rep.Stack.Budgets) == 0 {
			t.Fatalf("loadtest report: no stack.budgets (%v)", err)
		}
		out, _ := json.MarshalIndent(rep.Stack.Budgets, "", " ")
		if err := os.WriteFile(budgetFigureFile, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := synth.ReadLog(budgetLogFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(budgetFigureFile)
	if err != nil {
		t.Fatal(err)
	}
	var figures []loadtest.BudgetReport
	if err := json.Unmarshal(b, &figures); err != nil {
		t.Fatal(err)
	}
	minMs, maxMs := recs[0].LogTimeMs, recs[0].LogTimeMs
	for _, r := range recs {
		minMs, maxMs = min(minMs, r.LogTimeMs), max(maxMs, r.LogTimeMs)
	}
	rng := Range{From: time.UnixMilli(minMs).Add(-time.Hour).Truncate(time.Second), To: time.UnixMilli(maxMs).Add(time.Hour).Truncate(time.Second)}
	want := budgetOracle(recs, rng)
	conn, db := sinkFixture(t, recs)
	got := runAll(t, conn, db, rng)
	res := got["budget_burn"]
	t.Logf("budget_burn on the recorded run: %v %v", res.Columns, res.Rows)
	rows := rowsBy(t, res, "budget", "window_start_ms", "holder")
	if len(rows) != len(want) || len(rows) == 0 {
		t.Errorf("budget_burn has %d rows, the oracle %d", len(rows), len(want))
	}
	for k, w := range want {
		row := rows[k]
		if row == nil {
			t.Errorf("budget_burn: no row %s", k)
			continue
		}
		for _, c := range []struct {
			col  string
			want int64
		}{{"budget_limit", w.limit}, {"spent", w.spent}, {"granted", w.granted}, {"returned", w.returned}, {"outstanding", w.outstanding}, {"lease_messages", w.messages}} {
			if g := num(t, res, row, c.col); g != float64(c.want) {
				t.Errorf("%s %s = %v, oracle %d", k, c.col, g, c.want)
			}
		}
	}
	// The loadtest's audit has no windows: the run is one day's.
	for _, f := range figures {
		var spent, limit float64
		var n int
		for _, h := range f.Holders {
			var row []any
			for k, r := range rows {
				if strings.HasPrefix(k, f.ID+"|") && strings.HasSuffix(k, "|"+h.Scope) {
					if row != nil {
						t.Fatalf("%s %s: more than one window in the run", f.ID, h.Scope)
					}
					row = r
				}
			}
			if row == nil {
				if h.Granted == 0 && h.Spent == 0 && h.Returned == 0 {
					continue // requests on the scope, never a lease message
				}
				t.Errorf("budget_burn: no row for %s %s (loadtest %+v)", f.ID, h.Scope, h)
				continue
			}
			n++
			for _, c := range []struct {
				col  string
				want int64
			}{{"spent", h.Spent}, {"granted", h.Granted}, {"returned", h.Returned}} {
				if g := num(t, res, row, c.col); g != float64(c.want) {
					t.Errorf("%s %s %s = %v, loadtest %d", f.ID, h.Scope, c.col, g, c.want)
				}
			}
			spent += num(t, res, row, "spent")
			limit = num(t, res, row, "budget_limit")
		}
		if n == 0 {
			t.Errorf("%s: no budget_burn row", f.ID)
			continue
		}
		if msgs := sumWhereKey(t, res, f.ID, "lease_messages"); msgs != float64(f.LeaseMessages) {
			t.Errorf("%s: %v lease messages, loadtest %d", f.ID, msgs, f.LeaseMessages)
		}
		if spent != float64(f.Spent) || limit != float64(f.Limit) {
			t.Errorf("%s: spent %v of %v, loadtest %d of %d", f.ID, spent, limit, f.Spent, f.Limit)
		}
		t.Logf("%s: spent %v of %v (%s %%), loadtest %d of %d, overspend %d", f.ID, spent, limit, fmt.Sprint(100*spent/limit), f.Spent, f.Limit, f.Overspend)
	}
	t.Run("chdb_26", func(t *testing.T) { compareWithChDBRange(t, conn, db, got, rng, false) })
}

// sumWhereKey sums col over a budget's budget_burn rows.
func sumWhereKey(t *testing.T, res *Result, budget, col string) float64 {
	t.Helper()
	var s float64
	for _, row := range res.Rows {
		if row[res.Col("budget")] == budget {
			s += num(t, res, row, col)
		}
	}
	return s
}
