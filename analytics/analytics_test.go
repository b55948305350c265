package analytics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/schemas"
)

func TestRowFromRecordEveryType(t *testing.T) {
	logTime := time.UnixMilli(1_700_000_000_123)
	for _, typ := range schemas.Types {
		e := sampleEvent(typ, 1_700_000_000_456)
		b, err := schemas.Encode(e)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		r, ok := RowFromRecord(b, RecordPos{Topic: "sluice.requests", Partition: 2, Offset: 41, LogTime: logTime})
		if !ok || r.DecodeError != "" {
			t.Fatalf("%s: not decoded: %s", typ, r.DecodeError)
		}
		if r.EventID != e.ID || r.Type != string(typ) || r.V != 1 || r.Payload != string(b) {
			t.Errorf("%s: envelope %+v", typ, r)
		}
		if r.ProducedAt.Unix() != 1_700_000_000 || r.ProducedMs != 456 || r.LogTimeMs != 1_700_000_000_123 {
			t.Errorf("%s: times %v %d %d", typ, r.ProducedAt, r.ProducedMs, r.LogTimeMs)
		}
		if r.Topic != "sluice.requests" || r.Partition != 2 || r.Offset != 41 {
			t.Errorf("%s: position %s/%d/%d", typ, r.Topic, r.Partition, r.Offset)
		}
		if r.Tenant != "acme" || r.KeyID != "k1" || r.Scope != "openai:org1:gpt" || r.Attempt != 1 || r.Class != "interactive" {
			t.Errorf("%s: envelope columns %+v", typ, r)
		}
		if got := len(r.values()); got != len(eventColumns) {
			t.Fatalf("%d values for %d columns", got, len(eventColumns))
		}
	}
}

func TestRowFromRecordPayloadColumns(t *testing.T) {
	row := func(typ schemas.Type) Row {
		b, err := schemas.Encode(sampleEvent(typ, 1))
		if err != nil {
			t.Fatal(err)
		}
		r, _ := RowFromRecord(b, RecordPos{})
		return r
	}
	if r := row(schemas.TypeDecision); r.Status != "denied" || r.GatewayDecision != "rejected_locally" ||
		r.LimitDimension != "input_tokens" || r.LimitPath != "tenant:acme" || r.RetryAfterMs != 1500 || r.Borrowed != 1 || r.RetryClass != "retryable_capacity" {
		t.Errorf("decision: %+v", r)
	}
	if r := row(schemas.TypeReserveRequested); r.EstInputTokens != 1000 || r.EstOutputTokens != 256 ||
		r.EstCachedInputTokens != 100 || r.EstSpendMicros != 1234 || r.Streaming != 1 {
		t.Errorf("reserve: %+v", r)
	}
	if r := row(schemas.TypeReconciled); r.InputTokens != 900 || r.OutputTokens != 210 || r.CachedInputTokens != 50 ||
		r.EstInputTokens != 1000 || r.EstOutputTokens != 256 || r.HTTPStatus != 200 || r.FirstByteMs != 80 || r.TotalMs != 900 {
		t.Errorf("reconciled: %+v", r)
	}
	if r := row(schemas.TypeProviderRejected); r.HTTPStatus != 429 || r.Reason != "rate_limited" || r.LimitDimension != "requests" || r.RetryAfterMs != 2000 {
		t.Errorf("provider rejected: %+v", r)
	}
	if r := row(schemas.TypeDispatched); r.Provider != "openai" || r.Model != "gpt-4o" || r.QueueMs != 12 {
		t.Errorf("dispatched: %+v", r)
	}
	if r := row(schemas.TypeDecision); r.Needed != 1000 || r.Available != 10 || r.HoldTTLMs != 60000 {
		t.Errorf("decision bucket figures: %+v", r)
	}
	if r := row(schemas.TypeDecision); r.ShadowBuckets != 0 || r.ShadowLimited != 0 || r.ShadowLimitPath != "" {
		t.Errorf("decision without a shadow verdict: %+v", r)
	}
	sh := sampleEvent(schemas.TypeDecision, 1)
	sh.Decision.Status = schemas.StatusGranted
	sh.Decision.Shadow = &schemas.ShadowVerdict{Limited: true, Reason: schemas.ReasonCapacity, LimitPath: "tenant:acme/key:k1",
		LimitDimension: schemas.DimOutputTokens, Needed: 700, Available: 40, Buckets: 2}
	b, err := schemas.Encode(sh)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := RowFromRecord(b, RecordPos{}); r.ShadowBuckets != 2 || r.ShadowLimited != 1 || r.ShadowReason != "capacity" ||
		r.ShadowLimitPath != "tenant:acme/key:k1" || r.ShadowLimitDimension != "output_tokens" || r.ShadowNeeded != 700 || r.ShadowAvailable != 40 {
		t.Errorf("decision shadow verdict: %+v", r)
	}
	if r := row(schemas.TypeReserveRequested); r.ReqPath != "tenant:acme/key:k1" || r.PromptFamily != "pf-1" ||
		r.ContextBand != "lt_1k" || r.MaxWaitMs != 300 || r.DeadlineMs != 30000 {
		t.Errorf("reserve path/family/band: %+v", r)
	}
	if r := row(schemas.TypeConfigChanged); r.ConfigVersion != "v7" || r.ConfigSource != "test" || len(r.Capacities) != 2 ||
		r.Capacities[0] != (CapacityRow{Scope: "openai:org1:gpt", Bucket: "tenant:acme", Dimension: "input_tokens", Capacity: 90000,
			PeriodMs: 60000, ConfigVersion: "v7", Source: "test", EventID: r.EventID, ProducedAt: r.ProducedAt}) ||
		r.Capacities[1].Bucket != "key:k1" || r.Capacities[1].Refill != "continuous" {
		t.Errorf("config changed: %+v", r)
	}
	if r := row(schemas.TypeOutcome); r.Status != "success" || r.Attempts != 2 || r.GatewayDecision != "queued_then_admitted" || r.TotalMs != 1200 {
		t.Errorf("outcome: %+v", r)
	}
}

func TestRowFromRecordInvalid(t *testing.T) {
	logTime := time.UnixMilli(1_700_000_000_999)
	for _, value := range [][]byte{nil, []byte("garbage"), []byte(`{"v":1,"type":"Decision","id":"x","tenant":"acme"}`), {0xff, 0x00}} {
		r, ok := RowFromRecord(value, RecordPos{Topic: "t", Partition: 3, Offset: 9, LogTime: logTime})
		if ok || r.Type != TypeInvalid || r.DecodeError == "" || r.Payload != string(value) {
			t.Errorf("%q: %+v", value, r)
		}
		if r.EventID != "invalid:t:3:9" {
			t.Errorf("%q: id %q", value, r.EventID)
		}
		if r.ProducedAt.Unix() != 1_700_000_000 || r.ProducedMs != 999 {
			t.Errorf("%q: invalid rows are partitioned by log time, got %v", value, r.ProducedAt)
		}
	}
	r, _ := RowFromRecord([]byte(`{"v":1,"type":"Decision","id":"x","tenant":"acme"}`), RecordPos{})
	if r.Tenant != "acme" || r.V != 1 {
		t.Errorf("salvaged envelope: %+v", r)
	}
}

func TestContextBand(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{{0, "lt_1k"}, {1023, "lt_1k"}, {1024, "1k_4k"}, {4095, "1k_4k"}, {4096, "4k_16k"}, {16384, "16k_64k"}, {65535, "16k_64k"}, {65536, "64k_plus"}, {1 << 40, "64k_plus"}} {
		if got := ContextBand(c.in); got != c.want {
			t.Errorf("ContextBand(%d) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestSplitMsClamps(t *testing.T) {
	if ts, ms := splitMs(-5); ts.Unix() != 0 || ms != 0 {
		t.Errorf("negative: %v %d", ts, ms)
	}
	if ts, _ := splitMs(1 << 62); ts.Unix() != maxDateTimeSec {
		t.Errorf("far future: %v", ts)
	}
}

func TestMigrationsEmbedded(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 || ms[0].Name != "events" {
		t.Fatalf("migrations: %+v", ms)
	}
	for i := 1; i < len(ms); i++ {
		if ms[i].Version <= ms[i-1].Version {
			t.Fatalf("not ordered: %d after %d", ms[i].Version, ms[i-1].Version)
		}
	}
	stmts := ms[0].Statements("sluice_x")
	if len(stmts) != 1 || !strings.HasPrefix(stmts[0], "CREATE TABLE IF NOT EXISTS `sluice_x`.events") ||
		strings.Contains(stmts[0], "{db}") || strings.HasSuffix(stmts[0], ";") {
		t.Fatalf("statements: %q", stmts)
	}
	// Every inserted column exists in the table definition (001) or is
	// added by a later ALTER.
	var all strings.Builder
	for _, m := range ms {
		all.WriteString(strings.Join(m.Statements("sluice_x"), "\n"))
	}
	for _, c := range eventColumns {
		c = strings.Trim(c, "`")
		if !strings.Contains(stmts[0], "\n    "+c+" ") && !strings.Contains(all.String(), "events ADD COLUMN IF NOT EXISTS "+c+" ") {
			t.Errorf("column %s is neither in migration 001 nor added later", c)
		}
	}
	for _, c := range capacityColumns {
		if !strings.Contains(all.String(), "\n    "+c+" ") {
			t.Errorf("bucket_capacity column %s not created", c)
		}
	}
	// SQL that 18.16 cannot run must not creep in.
	for _, bad := range []string{"DateTime64", "LowCardinality", "Map(", "TTL", "CODEC", "JSONExtract", "Nullable"} {
		for _, m := range ms {
			for _, s := range m.Statements("db") {
				if strings.Contains(s, bad) {
					t.Errorf("migration %d uses %s, unsupported on ClickHouse 18.16", m.Version, bad)
				}
			}
		}
	}
}

func TestLoadMigrationsRejectsBadFiles(t *testing.T) {
	cases := map[string]fstest.MapFS{
		"bad name":  {"m/1.sql": {Data: []byte("x")}},
		"duplicate": {"m/001_a.sql": {Data: []byte("x")}, "m/0001_b.sql": {Data: []byte("y")}},
		"zero":      {"m/000_a.sql": {Data: []byte("x")}},
	}
	for name, fsys := range cases {
		if _, err := loadMigrations(fsys, "m"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	ms, err := loadMigrations(fstest.MapFS{
		"m/010_b.sql": {Data: []byte("-- c\nCREATE TABLE {db}.b (x UInt8) ENGINE = Memory;\nCREATE TABLE {db}.c (x UInt8)\nENGINE = Memory;\n")},
		"m/002_a.sql": {Data: []byte("SELECT 1")},
	}, "m")
	if err != nil || len(ms) != 2 || ms[0].Version != 2 || ms[1].Version != 10 {
		t.Fatalf("%v %+v", err, ms)
	}
	if st := ms[1].Statements("d"); len(st) != 2 || st[1] != "CREATE TABLE `d`.c (x UInt8)\nENGINE = Memory" {
		t.Fatalf("statements %q", st)
	}
}

func TestValidDatabase(t *testing.T) {
	for _, ok := range []string{"sluice", "sluice_test_ab12", "_x"} {
		if ValidDatabase(ok) != nil {
			t.Errorf("%q rejected", ok)
		}
	}
	for _, bad := range []string{"", "1x", "a-b", "a`b", "a.b", "x; DROP"} {
		if ValidDatabase(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSinkConfigDefaults(t *testing.T) {
	c, err := SinkConfig{Brokers: []string{"b"}, Topics: []string{"t"}, ClickHouseAddr: "c"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.Group != DefaultSinkGroup || c.Database != DefaultDatabase || c.BatchSize != DefaultBatchSize || c.FlushInterval != DefaultFlushInterval || c.Registerer == nil {
		t.Fatalf("%+v", c)
	}
	_, err = SinkConfig{Database: "bad-name"}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), "brokers") || !strings.Contains(err.Error(), "topics") ||
		!strings.Contains(err.Error(), "ClickHouse") || !strings.Contains(err.Error(), "bad-name") {
		t.Fatalf("%v", err)
	}
}

func TestNewSinkMetricsTwiceSharesCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := NewSinkMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewSinkMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a.RowsInserted.Add(3)
	if a.RowsInserted != b.RowsInserted {
		t.Fatal("second registration did not reuse the counter")
	}
}

func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestRunSinkUnreachableNamesBoth(t *testing.T) {
	ch, kafka := closedAddr(t), closedAddr(t)
	err := RunSink(context.Background(), SinkConfig{
		Brokers: []string{kafka}, Topics: []string{"t"}, ClickHouseAddr: ch, Registerer: prometheus.NewRegistry(),
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("want ErrUnreachable, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"clickhouse at " + ch, "kafka at " + kafka, "make up", "--clickhouse", "--brokers"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
}

// fakeInserter fails the first failures calls.
type fakeInserter struct {
	mu       sync.Mutex
	failures int
	calls    int
	rows     int
}

func (f *fakeInserter) insert(_ context.Context, rows []pending) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.failures {
		return errors.New("table gone")
	}
	f.rows += len(rows)
	return nil
}

type fakeCommits struct{ recs []*kgo.Record }

func (c *fakeCommits) commit(_ context.Context, rs ...*kgo.Record) error {
	c.recs = append(c.recs, rs...)
	return nil
}

func testSink(t *testing.T, ins inserter, ctx context.Context) (*sink, *fakeCommits) {
	t.Helper()
	oldMin, oldMax := insertRetryMin, insertRetryMax
	insertRetryMin, insertRetryMax = time.Millisecond, 4*time.Millisecond
	t.Cleanup(func() { insertRetryMin, insertRetryMax = oldMin, oldMax })
	m, err := NewSinkMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeCommits{}
	s := &sink{
		cfg: SinkConfig{FlushInterval: time.Second}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ins: ins, commit: fc.commit, m: m, ctx: ctx, batchSize: 10,
	}
	return s, fc
}

func addRecords(t *testing.T, s *sink, topic string, partition int32, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		b, err := schemas.Encode(sampleEvent(schemas.TypeTick, 1))
		if err != nil {
			t.Fatal(err)
		}
		s.addLocked(&kgo.Record{Topic: topic, Partition: partition, Offset: int64(i), Value: b})
	}
}

func TestFlushRetriesThenCommits(t *testing.T) {
	ins := &fakeInserter{failures: 3}
	s, fc := testSink(t, ins, context.Background())
	addRecords(t, s, "a", 0, 4)
	s.addLocked(&kgo.Record{Topic: "a", Partition: 1, Value: []byte("junk")})
	if err := s.flushLocked(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if ins.calls != 4 || ins.rows != 5 || len(fc.recs) != 5 || len(s.buf) != 0 {
		t.Fatalf("calls %d rows %d commits %d buf %d", ins.calls, ins.rows, len(fc.recs), len(s.buf))
	}
}

func TestFlushNeverCommitsFailedInsert(t *testing.T) {
	ins := &fakeInserter{failures: 1 << 30}
	ctx, cancel := context.WithCancel(context.Background())
	s, fc := testSink(t, ins, ctx)
	addRecords(t, s, "a", 0, 3)
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancel()
	}()
	if err := s.flushLocked(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if len(fc.recs) != 0 || ins.calls < 2 {
		t.Fatalf("commits %d after %d failed inserts", len(fc.recs), ins.calls)
	}
	if len(s.buf) != 3 {
		t.Fatalf("buffer %d, want the 3 uncommitted records kept", len(s.buf))
	}
}

func TestRevokeFlushesAndCommits(t *testing.T) {
	ins := &fakeInserter{}
	s, fc := testSink(t, ins, context.Background())
	addRecords(t, s, "a", 0, 2)
	addRecords(t, s, "a", 1, 2)
	s.onRevoked(context.Background(), nil, map[string][]int32{"a": {0}})
	if len(fc.recs) != 4 || len(s.buf) != 0 {
		t.Fatalf("commits %d buf %d", len(fc.recs), len(s.buf))
	}
}

func TestRevokeWithFailingInsertDropsOnlyRevoked(t *testing.T) {
	ins := &fakeInserter{failures: 1 << 30}
	s, fc := testSink(t, ins, context.Background())
	addRecords(t, s, "a", 0, 2)
	addRecords(t, s, "a", 1, 3)
	s.onRevoked(context.Background(), nil, map[string][]int32{"a": {0}})
	if len(fc.recs) != 0 {
		t.Fatalf("committed %d records although inserts failed", len(fc.recs))
	}
	if ins.calls != revokeAttempts {
		t.Fatalf("%d insert attempts, want %d", ins.calls, revokeAttempts)
	}
	if len(s.buf) != 3 {
		t.Fatalf("buffer %d, want partition 1's 3 records", len(s.buf))
	}
	for _, p := range s.buf {
		if p.rec.Partition != 1 {
			t.Fatalf("kept a revoked record: %+v", p.rec)
		}
	}
}

func TestRevokeWhileClosingDoesNothing(t *testing.T) {
	ins := &fakeInserter{}
	s, fc := testSink(t, ins, context.Background())
	addRecords(t, s, "a", 0, 2)
	s.closing.Store(true)
	s.onRevoked(context.Background(), nil, map[string][]int32{"a": {0}})
	if ins.calls != 0 || len(fc.recs) != 0 {
		t.Fatalf("inserted %d / committed %d while closing", ins.calls, len(fc.recs))
	}
}

func TestLostDropsWithoutCommit(t *testing.T) {
	ins := &fakeInserter{}
	s, fc := testSink(t, ins, context.Background())
	addRecords(t, s, "a", 0, 2)
	addRecords(t, s, "b", 0, 1)
	s.onLost(context.Background(), nil, map[string][]int32{"a": {0}})
	if ins.calls != 0 || len(fc.recs) != 0 || len(s.buf) != 1 || s.buf[0].rec.Topic != "b" {
		t.Fatalf("calls %d commits %d buf %d", ins.calls, len(fc.recs), len(s.buf))
	}
}

func TestQueriesEmbedded(t *testing.T) {
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 14 {
		t.Fatalf("%d queries", len(qs))
	}
	r := Range{From: time.Unix(100, 0), To: time.Unix(200, 0)}
	for _, q := range qs {
		s := q.Render("db1", r)
		if q.Doc == "" || strings.Contains(s, "{") || strings.Contains(s, "--") || !strings.Contains(s, "`db1`.") {
			t.Errorf("%s: doc %q, rendered %q", q.Name, q.Doc, s)
		}
		// 18.16 lacks these; 26.x needs an alias on joined subqueries.
		for _, bad := range []string{"JSONExtract", "WITH ", " OVER ", "ASOF", "base64Decode", "toStartOfInterval", "FILL"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s uses %s, unsupported on ClickHouse 18.16", q.Name, bad)
			}
		}
		if strings.Contains(strings.ReplaceAll(s, "ARRAY JOIN", ""), "JOIN") && !strings.Contains(s, ") AS c USING") {
			t.Errorf("%s: joined subqueries need an alias on 26.x", q.Name)
		}
	}
}

// TestEventColsMatchValues keeps the columnar insert (eventCols) in step
// with Row.values and eventColumns: every column holds the value
// Row.values puts at its position.
func TestEventColsMatchValues(t *testing.T) {
	var r Row
	rv := reflect.ValueOf(&r).Elem()
	for i := 0; i < rv.NumField(); i++ {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprintf("s%d", i))
		case reflect.Int32, reflect.Int64:
			f.SetInt(int64(1000 + i))
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(100 + i))
		}
	}
	r.ProducedAt = time.Unix(1700000000, 0).UTC()
	var c eventCols
	c.add(&r)
	c.add(&r)
	vals, cols := r.values(), c.slices()
	if len(vals) != len(eventColumns) || len(cols) != len(eventColumns) {
		t.Fatalf("values %d, columns %d, eventColumns %d", len(vals), len(cols), len(eventColumns))
	}
	for i := range cols {
		col := reflect.ValueOf(cols[i])
		if col.Len() != 2 || !reflect.DeepEqual(col.Index(1).Interface(), vals[i]) {
			t.Errorf("column %s: %v, want %v", eventColumns[i], col.Index(1).Interface(), vals[i])
		}
	}
	c.reset(10)
	for i, s := range c.slices() {
		if v := reflect.ValueOf(s); v.Len() != 0 || v.Cap() < 10 {
			t.Fatalf("column %s after reset(10): %d rows, room for %d; want 0 rows, room for 10", eventColumns[i], v.Len(), v.Cap())
		}
	}
}

// TestHandOffKeepsPollOrder: batches handed to the background insert are
// inserted and committed one at a time in poll order, a flush waits for the
// batch in flight first, and a batch that fails (the insert retries)
// is still committed before the next one.
func TestHandOffKeepsPollOrder(t *testing.T) {
	ins := &fakeInserter{failures: 2}
	s, fc := testSink(t, ins, context.Background())
	s.mu.Lock()
	defer s.mu.Unlock()
	for b := 0; b < 3; b++ {
		for i := 0; i < 4; i++ {
			enc, err := schemas.Encode(sampleEvent(schemas.TypeTick, 1))
			if err != nil {
				t.Fatal(err)
			}
			s.addLocked(&kgo.Record{Topic: "a", Offset: int64(4*b + i), Value: enc})
		}
		if err := s.handOffLocked(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(s.buf) != 0 {
			t.Fatalf("batch %d: buffer %d after hand-off", b, len(s.buf))
		}
	}
	if err := s.flushLocked(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if len(s.inflight) != 0 || ins.rows != 12 || len(fc.recs) != 12 {
		t.Fatalf("inflight %v rows %d commits %d", len(s.inflight) != 0, ins.rows, len(fc.recs))
	}
	for i, r := range fc.recs {
		if r.Offset != int64(i) {
			t.Fatalf("commit %d has offset %d: commits out of poll order", i, r.Offset)
		}
	}
}

func TestParallelDecodeKeepsOrder(t *testing.T) {
	s, _ := testSink(t, &fakeInserter{}, context.Background())
	var recs []*kgo.Record
	for i := 0; i < parallelDecodeMin+17; i++ {
		e := sampleEvent(schemas.TypeTick, 1)
		e.ID = fmt.Sprintf("ev-%05d", i)
		enc, err := schemas.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if i == 100 {
			enc = []byte("junk")
		}
		recs = append(recs, &kgo.Record{Topic: "a", Offset: int64(i), Value: enc})
	}
	fetches := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "a", Partitions: []kgo.FetchPartition{{Records: recs}}}}}}
	s.mu.Lock()
	s.addFetchesLocked(fetches)
	s.mu.Unlock()
	if len(s.buf) != len(recs) {
		t.Fatalf("buffer %d, want %d", len(s.buf), len(recs))
	}
	for i, p := range s.buf {
		want := fmt.Sprintf("ev-%05d", i)
		if i == 100 {
			want = "invalid:a:0:100"
		}
		if p.rec != recs[i] || p.row.EventID != want {
			t.Fatalf("row %d: %s (record %d), want %s", i, p.row.EventID, p.rec.Offset, want)
		}
	}
}

// TestRevokeGivesUpARetryingBatch: a revocation does not wait for a
// background batch that keeps failing; the batch goes back to the buffer,
// uncommitted, and the revoked partition's records are dropped.
func TestRevokeGivesUpARetryingBatch(t *testing.T) {
	ins := &fakeInserter{failures: 1 << 30}
	s, fc := testSink(t, ins, context.Background())
	s.mu.Lock()
	addRecords(t, s, "a", 0, 3)
	if err := s.handOffLocked(context.Background()); err != nil {
		t.Fatal(err)
	}
	addRecords(t, s, "a", 1, 2)
	s.mu.Unlock()
	s.onRevoked(context.Background(), nil, map[string][]int32{"a": {0}})
	if len(fc.recs) != 0 || len(s.inflight) != 0 || len(s.buf) != 2 || s.buf[0].rec.Partition != 1 {
		t.Fatalf("commits %d inflight %v buf %d", len(fc.recs), len(s.inflight) != 0, len(s.buf))
	}
}

// TestNormalizeDereferencesNullable: clickhouse-go scans a Nullable column
// (current servers type some scalar subqueries so) into pointers; a result
// holds the value, or nil for NULL, never an address.
func TestNormalizeDereferencesNullable(t *testing.T) {
	f, u, s := 0.25, uint64(7), "x"
	var nilF *float64
	pf := &f
	for _, tc := range []struct {
		in   any
		want any
	}{{&f, 0.25}, {&u, int64(7)}, {&s, "x"}, {nilF, nil}, {&pf, 0.25}, {int32(3), int64(3)}} {
		if got := normalize(tc.in); got != tc.want {
			t.Errorf("normalize(%T) = %v (%T), want %v", tc.in, got, got, tc.want)
		}
	}
}
