//go:build integration

package analytics

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/analytics/synth"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// fixtureRange covers the generated week and a day after it.
func fixtureRange() Range {
	from := time.UnixMilli(synth.DefaultStartMs).UTC()
	return Range{From: from, To: from.Add(8 * 24 * time.Hour)}
}

// sinkFixture produces the records to a real topic (CreateTime, so the
// recorded log times are kept), runs the real sink into a fresh database
// and waits until ClickHouse holds every event.
func sinkFixture(t *testing.T, recs []synth.Record) (driver.Conn, string) {
	t.Helper()
	conn := openCH(t)
	db := testDatabase(t, conn)
	_, adm := kafkaAdmin(t)
	topic := createTopic(t, adm, 2)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(testenv.KafkaBrokers(t), ",")...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var krs []*kgo.Record
	for _, r := range recs {
		krs = append(krs, &kgo.Record{Topic: topic, Partition: r.Partition, Value: r.Value, Timestamp: time.UnixMilli(r.LogTimeMs)})
	}
	if err := cl.ProduceSync(context.Background(), krs...).FirstErr(); err != nil {
		t.Fatalf("produce fixture: %v", err)
	}
	rs := startSink(t, SinkConfig{Brokers: strings.Split(testenv.KafkaBrokers(t), ","), Topics: []string{topic},
		Group: "oracle-" + randSuffix(t), ClickHouseAddr: testenv.ClickHouseAddr(t), Database: db,
		BatchSize: 5000, FlushInterval: 200 * time.Millisecond})
	defer rs.stop(t)
	// Rows in events become visible before the materialized views of
	// the same insert are written: wait for the sink's insert to return
	// (its counter) too, not only for the rows.
	waitFor(t, "every fixture event in ClickHouse", 120*time.Second, rs, func() (bool, string) {
		n := countRows(t, conn, db, topic, true)
		ins := rs.counter(t, "sluice_sink_rows_inserted_total")
		return n == uint64(len(recs)) && ins >= float64(len(recs)), fmt.Sprintf("%d of %d rows (%v inserted)", n, len(recs), ins)
	})
	return conn, db
}

func runAll(t *testing.T, conn driver.Conn, db string, r Range) map[string]*Result {
	t.Helper()
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*Result{}
	for _, q := range qs {
		res, err := q.Run(context.Background(), conn, db, r)
		if err != nil {
			t.Fatalf("18.16: %v", err)
		}
		out[q.Name] = res
	}
	return out
}

// rowsBy indexes a result's rows by the values of its key columns.
func rowsBy(t *testing.T, res *Result, keys ...string) map[string][]any {
	t.Helper()
	out := map[string][]any{}
	for _, row := range res.Rows {
		var k []string
		for _, c := range keys {
			i := res.Col(c)
			if i < 0 {
				t.Fatalf("no column %s in %v", c, res.Columns)
			}
			k = append(k, fmt.Sprint(row[i]))
		}
		out[strings.Join(k, "|")] = row
	}
	return out
}

func num(t *testing.T, res *Result, row []any, col string) float64 {
	t.Helper()
	i := res.Col(col)
	if i < 0 {
		t.Fatalf("no column %s in %v", col, res.Columns)
	}
	switch v := row[i].(type) {
	case int64:
		return float64(v)
	case float64:
		return v
	}
	t.Fatalf("column %s: %T is not a number", col, row[i])
	return 0
}

// TestIntegrationOracle: a recorded week of gateway and ledger events goes
// through the real Kafka and the real sink into ClickHouse 18.16; every
// query must equal what Go computes from the same events. Counts, token·ms
// and ratios exactly (floating point to 1e-9); quantiles within one rank of
// ClickHouse's quantileExact pick (the element at ⌊level·n⌋).
func TestIntegrationOracle(t *testing.T) {
	recs := synth.Generate(synth.Options{Seed: 7, Requests: 3000})
	conn, db := sinkFixture(t, recs)
	got := runAll(t, conn, db, fixtureRange())
	checkOracle(t, recs, got, fixtureRange(), true)

	// The same fixture on a current engine: every migration and query,
	// results compared with 18.16's.
	t.Run("chdb_26", func(t *testing.T) {
		compareWithChDB(t, conn, db, got)
	})
}

// checkOracle compares the queries' results with Go over the same records.
// synthetic adds checks that only the generated log is built to meet.
var oracleTable = flag.String("oracle-table", "", "append every figure the oracle compares (report, oracle) as a markdown table to this file")

func checkOracle(t *testing.T, recs []synth.Record, got map[string]*Result, rng Range, synthetic bool) {
	o := newOracle(recs)
	if o.streamDisagree > 0 {
		t.Logf("%d attempts whose ReserveRequested and Reconciled disagree on streaming", o.streamDisagree)
	}
	const eps = 1e-9
	var table strings.Builder // every compared figure, for -oracle-table
	if *oracleTable != "" {
		fmt.Fprintf(&table, "\n### %s\n\n| figure | report (18.16) | oracle | rule |\n| --- | --- | --- | --- |\n", t.Name())
		t.Cleanup(func() {
			f, err := os.OpenFile(*oracleTable, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				_, err = f.WriteString(table.String())
				f.Close()
			}
			if err != nil {
				t.Errorf("-oracle-table: %v", err)
			}
		})
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if *oracleTable != "" {
			fmt.Fprintf(&table, "| %s | %v | %v | equal |\n", strings.ReplaceAll(what, "|", " / "), got, want)
		}
		if math.Abs(got-want) > eps*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	inBand := func(what string, got float64, xs []float64, level float64) {
		t.Helper()
		lo, at, hi := quantileRank(xs, level)
		if *oracleTable != "" {
			fmt.Fprintf(&table, "| %s | %v | %v | within one rank [%v, %v] |\n", strings.ReplaceAll(what, "|", " / "), got, at, lo, hi)
		}
		if got < lo-eps || got > hi+eps {
			t.Errorf("%s = %v, want %v (within [%v, %v])", what, got, at, lo, hi)
		}
	}

	t.Run("estimation_error", func(t *testing.T) {
		res := got["estimation_error"]
		rows := rowsBy(t, res, "by", "key")
		want := o.estimationError()
		if len(rows) != len(want) {
			t.Errorf("%d groups, want %d", len(rows), len(want))
		}
		for k, s := range want {
			row, ok := rows[k]
			if !ok {
				t.Errorf("group %s missing", k)
				continue
			}
			near(k+" n", num(t, res, row, "n"), float64(s.n))
			near(k+" in_bias", num(t, res, row, "in_bias"), s.inSum/float64(s.n))
			near(k+" out_bias", num(t, res, row, "out_bias"), s.oSum/float64(s.n))
			inBand(k+" in_p50", num(t, res, row, "in_p50"), s.inE, 0.5)
			inBand(k+" in_p95", num(t, res, row, "in_p95"), s.inE, 0.95)
			inBand(k+" out_p50", num(t, res, row, "out_p50"), s.outE, 0.5)
			inBand(k+" out_p95", num(t, res, row, "out_p95"), s.outE, 0.95)
		}
		if r := rows["route|chat-4x"]; synthetic && (r == nil || num(t, res, r, "out_bias") < 2.5) {
			t.Errorf("chat-4x should over-reserve output ~4x: %v", r)
		}
	})

	t.Run("stranded_quota", func(t *testing.T) {
		res := got["stranded_quota"]
		rows := rowsBy(t, res, "scope", "bucket", "dimension")
		tok, refused := o.stranded()
		if len(rows) != len(tok) {
			t.Errorf("%d buckets, want %d: %v", len(rows), len(tok), res.Rows)
		}
		for k, want := range tok {
			row, ok := rows[k]
			if !ok {
				t.Errorf("bucket %s missing", k)
				continue
			}
			near(k+" stranded_token_ms", float64(row[res.Col("stranded_token_ms")].(int64)), float64(want))
			near(k+" refused", num(t, res, row, "refused"), float64(refused[k]))
			near(k+" pct", num(t, res, row, "pct_of_capacity"), 100*float64(want)/(o.held[k]*float64(rng.To.Unix()-rng.From.Unix())*1000))
		}
		if len(tok) == 0 {
			t.Fatal("fixture strands nothing")
		}
	})

	t.Run("stranded_by_owner", func(t *testing.T) {
		res := got["stranded_by_owner"]
		rows := rowsBy(t, res, "scope", "tenant", "route", "class")
		type acc struct {
			grants, late, expired, retried, unsettled int64
			in, out, lateMs, expiredMs, retriedMs     int64
		}
		want := map[string]*acc{}
		for _, a := range o.attempts {
			if a.grantedMs == 0 {
				continue
			}
			k := a.scope + "|" + a.tenant + "|" + a.route + "|" + a.class
			w := want[k]
			if w == nil {
				w = &acc{}
				want[k] = w
			}
			sIn, sOut := a.strandedIn(), a.strandedOut()
			w.grants++
			w.in += sIn
			w.out += sOut
			switch a.holdEnd {
			case "late_grant":
				w.late++
				w.lateMs += sIn + sOut
			case "hold_expired":
				w.expired++
				w.expiredMs += sIn + sOut
			case "provider_rejected", "retried":
				w.retried++
				w.retriedMs += sIn + sOut
			case "":
				w.unsettled++
			}
		}
		if len(rows) != len(want) {
			t.Errorf("%d groups, want %d", len(rows), len(want))
		}
		for k, w := range want {
			row := rows[k]
			if row == nil {
				t.Errorf("group %s missing", k)
				continue
			}
			for _, c := range []struct {
				col  string
				want float64
			}{{"grants", float64(w.grants)}, {"stranded_input_token_s", float64(w.in) / 1000}, {"stranded_output_token_s", float64(w.out) / 1000},
				{"stranded_token_s", float64(w.in+w.out) / 1000}, {"late_grants", float64(w.late)}, {"late_grant_token_s", float64(w.lateMs) / 1000},
				{"hold_expired", float64(w.expired)}, {"hold_expired_token_s", float64(w.expiredMs) / 1000},
				{"retried", float64(w.retried)}, {"retried_token_s", float64(w.retriedMs) / 1000}, {"unsettled", float64(w.unsettled)}} {
				near(k+" "+c.col, num(t, res, row, c.col), c.want)
			}
		}
	})

	t.Run("retry_amplification", func(t *testing.T) {
		res := got["retry_amplification"]
		rows := rowsBy(t, res, "provider", "tenant", "class")
		want := o.amplification()
		if len(rows) != len(want) {
			t.Errorf("%d groups, want %d", len(rows), len(want))
		}
		retried := false
		var sdk, dups int64
		for k, s := range want {
			row := rows[k]
			if row == nil {
				t.Errorf("group %s missing", k)
				continue
			}
			near(k+" requests", num(t, res, row, "requests"), float64(len(s.requests)))
			near(k+" upstream", num(t, res, row, "upstream_attempts"), float64(s.upstream))
			near(k+" amplification", num(t, res, row, "amplification"), float64(s.upstream)/float64(len(s.requests)))
			near(k+" retried_tokens", num(t, res, row, "retried_tokens"), float64(s.retriedTokens))
			near(k+" logical_requests", num(t, res, row, "logical_requests"), float64(len(s.logical)))
			near(k+" attempts_per_logical", num(t, res, row, "attempts_per_logical"), float64(s.upstream)/float64(len(s.logical)))
			near(k+" gateway_retries", num(t, res, row, "gateway_retries"), float64(s.gatewayRetry))
			near(k+" sdk_retries", num(t, res, row, "sdk_retries"), float64(s.sdkRetry))
			near(k+" client_duplicates", num(t, res, row, "client_duplicates"), float64(s.duplicates))
			retried = retried || s.retriedTokens > 0
			sdk, dups = sdk+s.sdkRetry, dups+s.duplicates
		}
		if synthetic && !retried {
			t.Error("fixture has no retried upstream attempt")
		}
		if synthetic && (sdk == 0 || dups == 0) {
			t.Errorf("fixture has %d SDK retries and %d client duplicates, want some of each", sdk, dups)
		}
		t.Logf("retry_amplification: %d SDK retries, %d client duplicates", sdk, dups)
	})

	t.Run("requests", func(t *testing.T) {
		type acc struct{ received, dispatched int64 }
		acceptance := map[string]*acc{}
		outcomes := map[string]int64{}
		decisions := map[string]int64{}
		waits := map[string][]float64{}
		for _, rq := range o.requests {
			k := rq.tenant + "|" + rq.class
			if acceptance[k] == nil {
				acceptance[k] = &acc{}
			}
			acceptance[k].received++
			if rq.firstDispatchMs > 0 {
				acceptance[k].dispatched++
				waits[rq.class] = append(waits[rq.class], float64(rq.firstDispatchMs-rq.receivedMs))
			}
			outcomes[rq.status]++
			if rq.status != "" {
				decisions[rq.decision]++
			}
		}
		res := got["acceptance"]
		rows := rowsBy(t, res, "tenant", "class")
		for k, a := range acceptance {
			near(k+" received", num(t, res, rows[k], "received"), float64(a.received))
			near(k+" acceptance", num(t, res, rows[k], "acceptance_rate"), float64(a.dispatched)/float64(a.received))
		}
		res = got["outcome_mix"]
		rows = rowsBy(t, res, "status")
		// share: of the requests that ended (a gateway killed mid-request
		// writes no Outcome).
		var ended int64
		for k, n := range outcomes {
			if k != "" {
				ended += n
			}
		}
		for k, n := range outcomes {
			if k == "" {
				continue
			}
			near("outcome "+k, num(t, res, rows[k], "requests"), float64(n))
			near("outcome share "+k, num(t, res, rows[k], "share"), float64(n)/float64(ended))
		}
		res = got["gateway_decision_mix"]
		rows = rowsBy(t, res, "gateway_decision")
		for k, n := range decisions {
			near("gateway_decision "+k, num(t, res, rows[k], "requests"), float64(n))
		}
		res = got["queue_wait"]
		rows = rowsBy(t, res, "class")
		for k, xs := range waits {
			near(k+" n", num(t, res, rows[k], "n"), float64(len(xs)))
			inBand(k+" p50", num(t, res, rows[k], "p50_ms"), xs, 0.5)
			inBand(k+" p95", num(t, res, rows[k], "p95_ms"), xs, 0.95)
			inBand(k+" p99", num(t, res, rows[k], "p99_ms"), xs, 0.99)
		}
	})

	t.Run("shadow_limits", func(t *testing.T) {
		res := got["shadow_limits"]
		rows := rowsBy(t, res, "scope", "tenant", "class", "limit_path", "dimension")
		groups, evaluated := shadowLimits(recs, rng)
		if len(rows) != len(groups) {
			t.Errorf("%d groups, want %d: %v", len(rows), len(groups), res.Rows)
		}
		refusing := false
		for k, g := range groups {
			row := rows[k]
			if row == nil {
				t.Errorf("group %s missing", k)
				continue
			}
			ev := float64(evaluated[g.stc])
			near(k+" grants", num(t, res, row, "grants"), float64(g.grants))
			near(k+" evaluated", num(t, res, row, "evaluated"), ev)
			near(k+" would_refuse", num(t, res, row, "would_refuse"), float64(len(g.shortfall)))
			near(k+" refuse_share", num(t, res, row, "refuse_share"), float64(len(g.shortfall))/ev)
			if len(g.shortfall) == 0 {
				near(k+" shortfall_p50", num(t, res, row, "shortfall_p50"), 0)
				continue
			}
			refusing = true
			inBand(k+" shortfall_p50", num(t, res, row, "shortfall_p50"), g.shortfall, 0.5)
			inBand(k+" shortfall_p95", num(t, res, row, "shortfall_p95"), g.shortfall, 0.95)
		}
		if synthetic && !refusing {
			t.Error("fixture has no grant a shadow limit would have refused")
		}
	})

	t.Run("ratio_429", func(t *testing.T) {
		up, rej := map[string]int64{}, map[string]int64{}
		for _, a := range o.attempts {
			if !a.dispatched {
				continue
			}
			for _, k := range []string{"model|" + a.model, "tenant|" + a.tenant, "class|" + a.class} {
				up[k]++
				if a.rej429 {
					rej[k]++
				}
			}
		}
		res := got["ratio_429"]
		rows := rowsBy(t, res, "by", "key")
		for k, n := range up {
			near(k+" upstream", num(t, res, rows[k], "upstream_attempts"), float64(n))
			near(k+" ratio", num(t, res, rows[k], "ratio"), float64(rej[k])/float64(n))
		}
	})

}

// chdbPython returns the venv python that has chdb-core (sdktest/setup.sh
// installs it; `make test` runs that first).
func chdbPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv("SLUICE_CHDB_PYTHON")
	if py == "" {
		home, _ := os.UserHomeDir()
		py = filepath.Join(home, ".cache", "sluice", "venv", "bin", "python")
	}
	if err := exec.Command(py, "-c", "import chdb").Run(); err != nil {
		t.Fatalf("chdb-core not importable by %s (run `make sdk-deps` or sdktest/setup.sh): %v", py, err)
	}
	return py
}

// compareWithChDB runs every migration and query on chDB over the rows
// 18.16 holds (read back from it, so both engines see the same fixture)
// and compares the results.
func compareWithChDB(t *testing.T, conn driver.Conn, db string, want map[string]*Result) {
	compareWithChDBRange(t, conn, db, want, fixtureRange(), true)
}

// compareWithChDBRange: requireRows fails a query without rows (the
// generated fixture exercises every one; a recorded load may not).
func compareWithChDBRange(t *testing.T, conn driver.Conn, db string, want map[string]*Result, rng Range, requireRows bool) {
	py := chdbPython(t)
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "chdbrun.py")

	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{"CREATE DATABASE IF NOT EXISTS `sluice`"}
	for _, m := range ms {
		stmts = append(stmts, m.Statements("sluice")...)
	}
	type insert struct {
		SQL  string           `json:"sql"`
		Rows []map[string]any `json:"rows"`
	}
	var inserts []insert
	for _, tbl := range []struct {
		name string
		cols []string
	}{{"events", eventColumns}, {"bucket_capacity", capacityColumns}} {
		rows := dumpTable(t, conn, db, tbl.name, tbl.cols)
		if len(rows) == 0 {
			continue // a log without limits (budgetCases) has no bucket_capacity
		}
		inserts = append(inserts, insert{SQL: "INSERT INTO `sluice`." + tbl.name + " (" + strings.Join(tbl.cols, ", ") + ") FORMAT JSONEachRow", Rows: rows})
	}
	var queries []map[string]string
	qs, _ := Queries()
	// Each query three times: over the views, and over the snapshot's
	// subqueries, ranged (RangedTables) and not (FinalTables), which must
	// give the same rows on both engines.
	rangedChDB, err := RangedTables("sluice", rng)
	if err != nil {
		t.Fatal(err)
	}
	finalChDB, err := FinalTables("sluice")
	if err != nil {
		t.Fatal(err)
	}
	for _, qq := range qs {
		queries = append(queries, map[string]string{"name": qq.Name, "sql": qq.Render("sluice", rng)},
			map[string]string{"name": qq.Name + "@ranged", "sql": qq.RenderIn("sluice", rng, rangedChDB)},
			map[string]string{"name": qq.Name + "@final", "sql": qq.RenderIn("sluice", rng, finalChDB)})
	}
	compareRanged18(t, conn, db, want, rng)
	job, _ := json.Marshal(map[string]any{"statements": stmts, "inserts": inserts, "queries": queries})
	cmd := exec.Command(py, script)
	cmd.Stdin = bytes.NewReader(job)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chdbrun.py: %v: %s", err, stderr.String())
	}
	var doc struct {
		Version string `json:"version"`
		Results map[string]struct {
			Columns []string `json:"columns"`
			Types   []string `json:"types"`
			Rows    [][]any  `json:"rows"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("chdbrun.py output: %v", err)
	}
	if !strings.HasPrefix(doc.Version, "26.") {
		t.Errorf("chDB runs ClickHouse %s, want 26.x", doc.Version)
	}
	t.Logf("chDB ClickHouse %s: %d queries", doc.Version, len(doc.Results))
	for _, qq := range qs {
		for _, name := range []string{qq.Name, qq.Name + "@ranged", qq.Name + "@final"} {
			cur, ok := doc.Results[name]
			if !ok {
				t.Errorf("%s: no chDB result", name)
				continue
			}
			compareChDBResult(t, name, want[qq.Name], cur.Columns, cur.Types, cur.Rows, requireRows && !noSynthRows[qq.Name])
		}
	}
}

// compareRanged18 runs every query on 18.16 over RangedTables and FinalTables and wants
// the rows of the views (want).
func compareRanged18(t *testing.T, conn driver.Conn, db string, want map[string]*Result, rng Range) {
	t.Helper()
	rt, err := RangedTables(db, rng)
	if err != nil {
		t.Fatal(err)
	}
	ft, err := FinalTables(db)
	if err != nil {
		t.Fatal(err)
	}
	qs, _ := Queries()
	for _, src := range []struct {
		name string
		t    Tables
	}{{"ranged snapshot", rt}, {"final snapshot", ft}} {
		for _, qq := range qs {
			got, err := qq.RunIn(context.Background(), conn, db, rng, src.t)
			if err != nil {
				t.Errorf("%s over the %s on 18.16: %v", qq.Name, src.name, err)
				continue
			}
			old := want[qq.Name]
			if len(got.Rows) != len(old.Rows) {
				t.Errorf("%s: %d rows over the %s on 18.16, %d over the views", qq.Name, len(got.Rows), src.name, len(old.Rows))
				continue
			}
			for i := range old.Rows {
				for j := range old.Rows[i] {
					if !sameValue(old.Rows[i][j], got.Rows[i][j]) {
						t.Errorf("%s row %d %s: views %v, %s %v (18.16)", qq.Name, i, old.Columns[j], old.Rows[i][j], src.name, got.Rows[i][j])
					}
				}
			}
		}
	}
}

// compareChDBResult compares one chDB result (name: the query, or the
// query over the ranged snapshot) with 18.16's (old).
func compareChDBResult(t *testing.T, name string, old *Result, columns, types []string, rows [][]any, requireRows bool) {
	t.Helper()
	// clickhouse-go scans a Nullable column into pointers: every
	// column must come back not Nullable on a current server too.
	for j, typ := range types {
		if strings.HasPrefix(typ, "Nullable(") && j < len(columns) {
			t.Errorf("%s: column %s is %s on 26.x", name, columns[j], typ)
		}
	}
	if strings.Join(columns, ",") != strings.Join(old.Columns, ",") {
		t.Errorf("%s: columns 26.x %v, 18.16 %v", name, columns, old.Columns)
		return
	}
	if len(rows) != len(old.Rows) {
		t.Errorf("%s: %d rows on 26.x, %d on 18.16", name, len(rows), len(old.Rows))
		return
	}
	if len(old.Rows) == 0 && requireRows {
		t.Errorf("%s: no rows on the fixture", name)
	}
	for i := range old.Rows {
		for j := range old.Rows[i] {
			if !sameValue(old.Rows[i][j], rows[i][j]) {
				t.Errorf("%s row %d %s: 18.16 %v, 26.x %v", name, i, old.Columns[j], old.Rows[i][j], rows[i][j])
			}
		}
	}
}

// noSynthRows are the queries the generated week has no events for (it
// has no cross-scope budgets); TestIntegrationOracleBudgets gives them rows.
var noSynthRows = map[string]bool{"budget_burn": true}

// sameValue compares an 18.16 value (string, int64, float64) with chDB's
// JSON (64-bit integers quoted): floats to 1e-9 relative.
func sameValue(a, b any) bool {
	var fb float64
	switch x := b.(type) {
	case string:
		if s, ok := a.(string); ok {
			return s == x
		}
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return false
		}
		fb = f
	case float64:
		fb = x
	default:
		return fmt.Sprint(a) == fmt.Sprint(b)
	}
	var fa float64
	switch x := a.(type) {
	case int64:
		fa = float64(x)
	case float64:
		fa = x
	default:
		return false
	}
	return math.Abs(fa-fb) <= 1e-9*math.Max(1, math.Abs(fa))
}

// dumpTable reads every row of db.table back as JSONEachRow objects.
func dumpTable(t *testing.T, conn driver.Conn, db, table string, cols []string) []map[string]any {
	t.Helper()
	sel := make([]string, len(cols))
	for i, c := range cols {
		name := strings.Trim(c, "`")
		if name == "produced_at" {
			sel[i] = "toUInt32(produced_at) AS produced_at"
		} else {
			sel[i] = c
		}
	}
	res, err := Query{Name: "dump " + table, SQL: "SELECT " + strings.Join(sel, ", ") + " FROM {db}." + table + " FINAL"}.Run(context.Background(), conn, db, Range{})
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, row := range res.Rows {
		m := map[string]any{}
		for i, c := range res.Columns {
			m[strings.Trim(c, "`")] = row[i]
		}
		out = append(out, m)
	}
	return out
}
