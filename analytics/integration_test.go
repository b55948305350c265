//go:build integration

package analytics

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
)

func randSuffix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// openCH connects to the real ClickHouse; a missing server fails the test.
func openCH(t testing.TB) driver.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := Open(ctx, testenv.ClickHouseAddr(t), "")
	if err != nil {
		t.Fatalf("real ClickHouse required (make up): %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// testDatabase returns a unique database name dropped at the end of the test.
func testDatabase(t testing.TB, conn driver.Conn) string {
	t.Helper()
	db := "sluice_test_" + randSuffix(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(db)); err != nil {
			t.Errorf("drop test database %s: %v", db, err)
		}
	})
	return db
}

func kafkaAdmin(t testing.TB) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(testenv.KafkaBrokers(t), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		t.Fatalf("real Kafka required at %s (make up): %v", testenv.KafkaBrokers(t), err)
	}
	return cl, kadm.NewClient(cl)
}

func createTopic(t testing.TB, adm *kadm.Client, partitions int32) string {
	t.Helper()
	topic := "sluice.test.sink." + randSuffix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topic)
	})
	return topic
}

func TestIntegrationMigrateTwiceIsNoop(t *testing.T) {
	conn := openCH(t)
	db := testDatabase(t, conn)
	ctx := context.Background()

	applied, err := Migrate(ctx, conn, db)
	if err != nil {
		t.Fatalf("first migrate: %v", err)
	}
	ms, _ := Migrations()
	if len(applied) != len(ms) || applied[0] != 1 {
		t.Fatalf("first migrate applied %v, want all %d migrations", applied, len(ms))
	}
	applied, err = Migrate(ctx, conn, db)
	if err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	if len(applied) != 0 {
		t.Fatalf("second migrate applied %v, want nothing", applied)
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+quoteIdent(db)+".schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != uint64(len(ms)) {
		t.Fatalf("schema_migrations has %d rows, want %d", n, len(ms))
	}
	var engine string
	if err := conn.QueryRow(ctx, "SELECT engine FROM system.tables WHERE database = ? AND name = 'events'", db).Scan(&engine); err != nil {
		t.Fatal(err)
	}
	if engine != "ReplacingMergeTree" {
		t.Fatalf("events engine %q", engine)
	}
	// A database opened by name works for unqualified queries.
	c2, err := Open(ctx, testenv.ClickHouseAddr(t), db)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.QueryRow(ctx, "SELECT count() FROM events").Scan(&n); err != nil || n != 0 {
		t.Fatalf("count events in fresh db: %d, %v", n, err)
	}
}

// sampleEvents returns one valid event of every type, encoded.
func sampleEvents(t testing.TB, tenant string) ([]*schemas.Event, [][]byte) {
	t.Helper()
	var evs []*schemas.Event
	var raw [][]byte
	base := time.Now().UnixMilli()
	for i, typ := range schemas.Types {
		e := sampleEvent(typ, base+int64(i))
		e.Tenant = tenant
		b, err := schemas.Encode(e)
		if err != nil {
			t.Fatalf("encode %s: %v", typ, err)
		}
		evs = append(evs, e)
		raw = append(raw, b)
	}
	return evs, raw
}

// produce writes values (keyed, so they spread over partitions) and returns,
// per partition, the offset just past the last record written.
func produce(t testing.TB, topic string, values [][]byte) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(testenv.KafkaBrokers(t), ",")...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i, v := range values {
		recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("scope-%d", i%5)), Value: v})
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	next := map[int32]int64{}
	for _, r := range res {
		next[r.Record.Partition] = max(next[r.Record.Partition], r.Record.Offset+1)
	}
	return next
}

// mergeNext merges produce results: the later offset wins per partition.
func mergeNext(ms ...map[int32]int64) map[int32]int64 {
	out := map[int32]int64{}
	for _, m := range ms {
		for p, o := range m {
			out[p] = max(out[p], o)
		}
	}
	return out
}

// produceAborted writes values inside a Kafka transaction that is aborted:
// a read_committed sink must never see them.
func produceAborted(t testing.TB, topic string, values [][]byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(testenv.KafkaBrokers(t), ",")...),
		kgo.DefaultProduceTopic(topic), kgo.TransactionalID("sluice-test-"+randSuffix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr(); err != nil {
			t.Fatalf("transactional produce: %v", err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatalf("abort: %v", err)
	}
}

type runningSink struct {
	cancel context.CancelFunc
	done   chan error
	reg    *prometheus.Registry
}

func startSink(t testing.TB, cfg SinkConfig) *runningSink {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rs := &runningSink{cancel: cancel, done: make(chan error, 1), reg: prometheus.NewRegistry()}
	cfg.Registerer = rs.reg
	go func() { rs.done <- RunSink(ctx, cfg, testLogger(t)) }()
	t.Cleanup(func() { rs.stop(t) })
	return rs
}

func (rs *runningSink) stop(t testing.TB) {
	t.Helper()
	if rs.cancel == nil {
		return
	}
	rs.cancel()
	rs.cancel = nil
	select {
	case err := <-rs.done:
		if err != nil {
			t.Errorf("RunSink: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("RunSink did not return after cancel")
	}
}

func (rs *runningSink) counter(t testing.TB, name string) float64 {
	t.Helper()
	mfs, err := rs.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, timeout time.Duration, rs *runningSink, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if rs != nil {
			select {
			case err := <-rs.done:
				rs.cancel = nil
				t.Fatalf("sink exited while waiting for %s: %v", what, err)
			default:
			}
		}
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s (last: %s)", what, last)
}

func countRows(t testing.TB, conn driver.Conn, db, topic string, final bool) uint64 {
	t.Helper()
	q := "SELECT count() FROM " + quoteIdent(db) + ".events"
	if final {
		q += " FINAL"
	}
	q += " WHERE topic = ?"
	var n uint64
	if err := conn.QueryRow(context.Background(), q, topic).Scan(&n); err != nil {
		// The table may not exist yet while the sink migrates.
		return 0
	}
	return n
}

// committed returns the group's committed offsets for topic (partition → offset).
func committed(t testing.TB, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	os, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch offsets of group %s: %v", group, err)
	}
	out := map[int32]int64{}
	for p, o := range os[topic] {
		if o.Err != nil {
			t.Fatalf("offset of %s/%d: %v", topic, p, o.Err)
		}
		if o.At >= 0 {
			out[p] = o.At
		}
	}
	return out
}

func sameOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, o := range a {
		if b[p] != o {
			return false
		}
	}
	return true
}

type storedRow struct {
	EventID, Type, RequestID, Tenant, Status, GatewayDecision, LimitDimension, Reason, Payload, DecodeError string
	RetryAfterMs, InputTokens, OutputTokens, EstInputTokens, EstOutputTokens                                int64
	HTTPStatus, Attempt                                                                                     int32
	V, ProducedMs                                                                                           uint16
	ProducedAt                                                                                              time.Time
	LogTimeMs, Offset                                                                                       uint64
	Partition                                                                                               uint32
}

func readRows(t testing.TB, conn driver.Conn, db, topic string) map[string]storedRow {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
SELECT event_id, type, request_id, tenant, status, gateway_decision, limit_dimension, reason, payload, decode_error,
       retry_after_ms, input_tokens, output_tokens, est_input_tokens, est_output_tokens,
       http_status, attempt, v, produced_ms, produced_at, log_time_ms, `+"`offset`, `partition`"+`
FROM `+quoteIdent(db)+`.events FINAL
WHERE topic = ?`, topic)
	if err != nil {
		t.Fatalf("query events: %v", err)
	}
	defer rows.Close()
	out := map[string]storedRow{}
	for rows.Next() {
		var r storedRow
		if err := rows.Scan(&r.EventID, &r.Type, &r.RequestID, &r.Tenant, &r.Status, &r.GatewayDecision, &r.LimitDimension,
			&r.Reason, &r.Payload, &r.DecodeError, &r.RetryAfterMs, &r.InputTokens, &r.OutputTokens, &r.EstInputTokens,
			&r.EstOutputTokens, &r.HTTPStatus, &r.Attempt, &r.V, &r.ProducedMs, &r.ProducedAt, &r.LogTimeMs, &r.Offset, &r.Partition); err != nil {
			t.Fatalf("scan: %v", err)
		}
		out[r.EventID] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestIntegrationSinkRoundTripAndDedup(t *testing.T) {
	conn := openCH(t)
	db := testDatabase(t, conn)
	_, adm := kafkaAdmin(t)
	topic := createTopic(t, adm, 3)
	group := "sluice-test-sink-" + randSuffix(t)
	tenant := "tenant-" + randSuffix(t)

	evs, raw := sampleEvents(t, tenant)
	garbage := []byte("{not an event")
	next := produce(t, topic, append(append([][]byte{}, raw...), garbage))
	aborted, abortedRaw := sampleEvents(t, tenant+"-aborted")
	produceAborted(t, topic, abortedRaw)
	want := uint64(len(evs) + 1)

	cfg := SinkConfig{
		Brokers: strings.Split(testenv.KafkaBrokers(t), ","), Topics: []string{topic}, Group: group,
		ClickHouseAddr: testenv.ClickHouseAddr(t), Database: db, BatchSize: 5, FlushInterval: 200 * time.Millisecond,
	}
	rs := startSink(t, cfg)
	waitFor(t, "all events in ClickHouse", 60*time.Second, rs, func() (bool, string) {
		n := countRows(t, conn, db, topic, true)
		return n == want, fmt.Sprintf("%d of %d rows", n, want)
	})
	// Offsets are committed after the insert, up to just past the last
	// record the sink received. (A trailing aborted transaction is skipped by
	// read_committed and yields no record, so the commit stays before it
	// until a later record arrives — like kgo's own uncommitted tracking.)
	waitFor(t, "offsets committed past the last record", 30*time.Second, rs, func() (bool, string) {
		c := committed(t, adm, group, topic)
		return sameOffsets(c, next), fmt.Sprintf("committed %v, want %v", c, next)
	})

	got := readRows(t, conn, db, topic)
	if uint64(len(got)) != want {
		t.Fatalf("got %d distinct rows, want %d", len(got), want)
	}
	for i, e := range evs {
		r, ok := got[e.ID]
		if !ok {
			t.Errorf("%s event %s missing", e.Type, e.ID)
			continue
		}
		if r.Type != string(e.Type) || r.Tenant != tenant || r.RequestID != e.RequestID || r.Attempt != e.Attempt || r.V != 1 {
			t.Errorf("%s envelope: %+v", e.Type, r)
		}
		if r.Payload != string(raw[i]) || r.DecodeError != "" {
			t.Errorf("%s payload %q, decode_error %q", e.Type, r.Payload, r.DecodeError)
		}
		if ms := r.ProducedAt.UnixMilli() + int64(r.ProducedMs); ms != e.ProducedAtMs {
			t.Errorf("%s produced at %d ms, want %d", e.Type, ms, e.ProducedAtMs)
		}
		if r.LogTimeMs == 0 {
			t.Errorf("%s without log time", e.Type)
		}
		switch e.Type {
		case schemas.TypeDecision:
			if r.Status != "denied" || r.GatewayDecision != "rejected_locally" || r.LimitDimension != "input_tokens" || r.RetryAfterMs != 1500 {
				t.Errorf("decision columns: %+v", r)
			}
		case schemas.TypeReconciled:
			if r.InputTokens != 900 || r.OutputTokens != 210 || r.EstInputTokens != 1000 || r.EstOutputTokens != 256 || r.HTTPStatus != 200 {
				t.Errorf("reconciled columns: %+v", r)
			}
		case schemas.TypeProviderRejected:
			if r.HTTPStatus != 429 || r.Reason != "rate_limited" || r.RetryAfterMs != 2000 || r.LimitDimension != "requests" {
				t.Errorf("provider rejected columns: %+v", r)
			}
		case schemas.TypeOutcome:
			if r.Status != "success" || r.GatewayDecision != "queued_then_admitted" {
				t.Errorf("outcome columns: %+v", r)
			}
		case schemas.TypeReserveRequested:
			if r.EstInputTokens != 1000 || r.EstOutputTokens != 256 {
				t.Errorf("reserve columns: %+v", r)
			}
		}
	}
	var invalid []storedRow
	for _, r := range got {
		if r.Type == TypeInvalid {
			invalid = append(invalid, r)
		}
	}
	if len(invalid) != 1 || invalid[0].Payload != string(garbage) || invalid[0].DecodeError == "" ||
		!strings.HasPrefix(invalid[0].EventID, "invalid:"+topic+":") {
		t.Fatalf("invalid rows: %+v", invalid)
	}
	if v := rs.counter(t, "sluice_sink_invalid_records_total"); v != 1 {
		t.Errorf("invalid_records_total = %v, want 1", v)
	}
	for _, e := range aborted {
		if _, ok := got[e.ID]; ok {
			t.Errorf("event %s of an aborted transaction was sunk (read_committed broken)", e.ID)
		}
	}

	// Redelivery: the same events again (a producer retry or a replay) must
	// not change the deduplicated view.
	next = mergeNext(next, produce(t, topic, raw))
	waitFor(t, "duplicates inserted", 60*time.Second, rs, func() (bool, string) {
		n := rs.counter(t, "sluice_sink_rows_inserted_total")
		return n >= float64(want)+float64(len(raw)), fmt.Sprintf("%v rows inserted", n)
	})
	if n := countRows(t, conn, db, topic, true); n != want {
		t.Fatalf("FINAL count after redelivery = %d, want %d", n, want)
	}
	var uniq uint64
	if err := conn.QueryRow(context.Background(), "SELECT uniqExact(event_id) FROM "+quoteIdent(db)+".events WHERE topic = ?", topic).Scan(&uniq); err != nil {
		t.Fatal(err)
	}
	if uniq != want {
		t.Fatalf("uniqExact(event_id) = %d, want %d", uniq, want)
	}

	// A second sink in a new group re-reads the whole topic: a full
	// redelivery, still collapsed by FINAL.
	rs.stop(t)
	cfg.Group = group + "-again"
	rs2 := startSink(t, cfg)
	waitFor(t, "second group caught up", 60*time.Second, rs2, func() (bool, string) {
		c := committed(t, adm, cfg.Group, topic)
		return sameOffsets(c, next), fmt.Sprintf("committed %v, want %v", c, next)
	})
	if n := countRows(t, conn, db, topic, true); n != want {
		t.Fatalf("FINAL count after a second group = %d, want %d", n, want)
	}
	if err := conn.Exec(context.Background(), "OPTIMIZE TABLE "+quoteIdent(db)+".events FINAL"); err != nil {
		t.Fatalf("optimize: %v", err)
	}
	if n := countRows(t, conn, db, topic, false); n != want {
		t.Fatalf("count after OPTIMIZE FINAL = %d, want %d", n, want)
	}
}

func TestIntegrationSinkCommitsOnlyAfterInsert(t *testing.T) {
	oldMin, oldMax := insertRetryMin, insertRetryMax
	insertRetryMin, insertRetryMax = 50*time.Millisecond, 500*time.Millisecond
	t.Cleanup(func() { insertRetryMin, insertRetryMax = oldMin, oldMax })

	conn := openCH(t)
	db := testDatabase(t, conn)
	_, adm := kafkaAdmin(t)
	topic := createTopic(t, adm, 2)
	group := "sluice-test-sink-" + randSuffix(t)
	ctx := context.Background()

	// Migrate, then break the table the sink inserts into. RunSink's own
	// migration is a no-op (version 1 is recorded), so every insert fails.
	if _, err := Migrate(ctx, conn, db); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "DROP TABLE "+quoteIdent(db)+".events"); err != nil {
		t.Fatal(err)
	}
	_, raw := sampleEvents(t, "t-"+randSuffix(t))
	end := produce(t, topic, raw)

	rs := startSink(t, SinkConfig{
		Brokers: strings.Split(testenv.KafkaBrokers(t), ","), Topics: []string{topic}, Group: group,
		ClickHouseAddr: testenv.ClickHouseAddr(t), Database: db, BatchSize: 4, FlushInterval: 100 * time.Millisecond,
	})
	waitFor(t, "failed inserts", 60*time.Second, rs, func() (bool, string) {
		n := rs.counter(t, "sluice_sink_insert_errors_total")
		return n >= 3, fmt.Sprintf("%v insert errors", n)
	})
	if c := committed(t, adm, group, topic); len(c) != 0 {
		t.Fatalf("offsets %v committed although every insert failed", c)
	}
	if n := rs.counter(t, "sluice_sink_rows_inserted_total"); n != 0 {
		t.Fatalf("rows_inserted_total = %v with a missing table", n)
	}

	// Repair: drop the database and migrate again. The sink's retry then
	// succeeds and only now commits.
	if err := conn.Exec(ctx, "DROP DATABASE "+quoteIdent(db)); err != nil {
		t.Fatal(err)
	}
	if _, err := Migrate(ctx, conn, db); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "commit after the repaired insert", 60*time.Second, rs, func() (bool, string) {
		c := committed(t, adm, group, topic)
		return sameOffsets(c, end), fmt.Sprintf("committed %v, end %v", c, end)
	})
	if n := countRows(t, conn, db, topic, true); n != uint64(len(raw)) {
		t.Fatalf("rows after repair = %d, want %d", n, len(raw))
	}

	// Break it again, produce more, stop the sink while inserts fail: the
	// stop must not commit the pending records.
	if err := conn.Exec(ctx, "DROP TABLE "+quoteIdent(db)+".events"); err != nil {
		t.Fatal(err)
	}
	before := rs.counter(t, "sluice_sink_insert_errors_total")
	_, raw2 := sampleEvents(t, "t2-"+randSuffix(t))
	produce(t, topic, raw2)
	waitFor(t, "failed inserts again", 60*time.Second, rs, func() (bool, string) {
		n := rs.counter(t, "sluice_sink_insert_errors_total")
		return n >= before+2, fmt.Sprintf("%v insert errors", n)
	})
	rs.stop(t)
	if c := committed(t, adm, group, topic); !sameOffsets(c, end) {
		t.Fatalf("committed %v after a stop with failing inserts, want unchanged %v", c, end)
	}
}

func closedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestIntegrationSinkUnreachableOne(t *testing.T) {
	bad := closedPort(t)
	ctx := context.Background()
	err := RunSink(ctx, SinkConfig{
		Brokers: strings.Split(testenv.KafkaBrokers(t), ","), Topics: []string{"x"},
		ClickHouseAddr: bad, Registerer: prometheus.NewRegistry(),
	}, testLogger(t))
	if err == nil || !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "clickhouse at "+bad) || strings.Contains(err.Error(), "kafka") {
		t.Fatalf("unreachable clickhouse: %v", err)
	}
	err = RunSink(ctx, SinkConfig{
		Brokers: []string{bad}, Topics: []string{"x"},
		ClickHouseAddr: testenv.ClickHouseAddr(t), Registerer: prometheus.NewRegistry(),
	}, testLogger(t))
	if err == nil || !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "kafka at "+bad) || strings.Contains(err.Error(), "clickhouse") {
		t.Fatalf("unreachable kafka: %v", err)
	}
}
