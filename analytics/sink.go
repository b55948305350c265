package analytics

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
)

// Sink defaults.
const (
	DefaultSinkGroup     = "sluice-sink"
	DefaultBatchSize     = 100000
	DefaultFlushInterval = time.Second
	DefaultSinkInserts   = 1
)

// Insert retry and timing knobs. Variables so tests can shorten them.
var (
	insertRetryMin      = 100 * time.Millisecond
	insertRetryMax      = 10 * time.Second
	insertTimeout       = 30 * time.Second       // per attempt, plus insertTimeoutPerRow per row
	insertTimeoutPerRow = 300 * time.Microsecond // 100k rows: 30 s more
	settlePoll          = 100 * time.Millisecond // how often settle looks for a failed insert still running
	slotPoll            = 20 * time.Millisecond  // how often a due batch looks for a free insert slot
	revokeAttempts      = 3                      // inserts tried in OnPartitionsRevoked before giving the records up
	kafkaPingTimeout    = 5 * time.Second
)

// SinkConfig configures RunSink.
type SinkConfig struct {
	Brokers        []string // Kafka seed brokers (host:port)
	Topics         []string // topics to sink; required
	Group          string   // consumer group; default DefaultSinkGroup
	ClickHouseAddr string   // native protocol host:port
	Database       string   // default DefaultDatabase; created and migrated by RunSink
	// BatchSize is the most rows per insert; default DefaultBatchSize.
	// On 18.16 each insert costs ~0.2 CPU-s of server system time whatever
	// its size (a part per day partition for events and each of the three
	// materialized views), so large batches are what make the sink fast;
	// the sink holds up to Inserts+1 batches (one filling, the rest inserting).
	BatchSize     int
	FlushInterval time.Duration // longest a polled record waits for its insert; default DefaultFlushInterval
	// Inserts is how many batches insert at once, each on its own
	// connection (commits stay in poll order); default DefaultSinkInserts.
	// 18.16 runs an INSERT and its materialized views on one thread; a
	// second insert in flight is meant to put another core to work (on
	// the shared 2-core bench machine the gain did not stand out of the
	// noise: analytics/README.md, 2026-12-04).
	Inserts int

	// Registerer receives the sink's Prometheus counters; nil means
	// prometheus.DefaultRegisterer. Registering twice on one registry (two
	// sinks in one process) shares the counters.
	Registerer prometheus.Registerer
}

func (c SinkConfig) withDefaults() (SinkConfig, error) {
	if c.Group == "" {
		c.Group = DefaultSinkGroup
	}
	if c.Database == "" {
		c.Database = DefaultDatabase
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.Inserts <= 0 {
		c.Inserts = DefaultSinkInserts
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.DefaultRegisterer
	}
	var errs []string
	if len(c.Brokers) == 0 {
		errs = append(errs, "no Kafka brokers (set --brokers)")
	}
	if len(c.Topics) == 0 {
		errs = append(errs, "no topics to consume")
	}
	if c.ClickHouseAddr == "" {
		errs = append(errs, "no ClickHouse address (set --clickhouse)")
	}
	if c.Inserts > 3 {
		errs = append(errs, fmt.Sprintf("%d inserts at once: at most 3 (the connection pool holds 4, one kept for the retry checks)", c.Inserts))
	}
	if err := ValidDatabase(c.Database); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("sink config: %s", strings.Join(errs, "; "))
	}
	return c, nil
}

// SinkMetrics are the sink's Prometheus counters.
type SinkMetrics struct {
	RowsInserted   prometheus.Counter // rows ClickHouse accepted (duplicates included)
	Batches        prometheus.Counter // batches ClickHouse accepted
	InsertErrors   prometheus.Counter // failed insert attempts (each retry counts)
	InvalidRecords prometheus.Counter // records schemas.Decode rejected (stored as type 'invalid')
	CommitErrors   prometheus.Counter // offset commits that failed after a successful insert
	// RetryRowsWritten counts rows a retry did not insert again because
	// the failed attempt had in fact written them (a timeout after the
	// server received the block).
	RetryRowsWritten prometheus.Counter
}

// NewSinkMetrics creates the counters and registers them on reg (nil means
// the default registerer). Counters already registered there are reused.
func NewSinkMetrics(reg prometheus.Registerer) (*SinkMetrics, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	counter := func(name, help string) (prometheus.Counter, error) {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "sink", Name: name, Help: help})
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if existing, ok := are.ExistingCollector.(prometheus.Counter); ok {
					return existing, nil
				}
			}
			return nil, fmt.Errorf("register sluice_sink_%s: %w", name, err)
		}
		return c, nil
	}
	var m SinkMetrics
	var err error
	for _, c := range []struct {
		dst        *prometheus.Counter
		name, help string
	}{
		{&m.RowsInserted, "rows_inserted_total", "Rows inserted into ClickHouse events (redelivered duplicates included)."},
		{&m.Batches, "batches_inserted_total", "Batches ClickHouse accepted."},
		{&m.InsertErrors, "insert_errors_total", "Failed ClickHouse insert attempts; offsets stay uncommitted."},
		{&m.InvalidRecords, "invalid_records_total", "Kafka records that did not decode as events; stored with type 'invalid'."},
		{&m.RetryRowsWritten, "retry_rows_already_written_total", "Rows of a failed insert that ClickHouse had written all the same (a timeout after the block was sent); the retry skipped them."},
		{&m.CommitErrors, "commit_errors_total", "Offset commits that failed after ClickHouse accepted the batch (rows will be re-read and deduplicated)."},
	} {
		if *c.dst, err = counter(c.name, c.help); err != nil {
			return nil, err
		}
	}
	return &m, nil
}

// RunSink consumes cfg.Topics as consumer group cfg.Group (read_committed)
// and writes every record to cfg.Database.events on ClickHouse, creating and
// migrating the database first. It returns nil when ctx ends, or an error
// if it cannot start (an unreachable ClickHouse or Kafka is reported in one
// line naming the address and the fix).
//
// Delivery: offsets are committed only after ClickHouse accepted the batch
// holding the records, so a crash or a failing insert means redelivery,
// never loss; redelivered rows collapse in ReplacingMergeTree (see
// README.md). A retried insert does not write a row twice: the retry first
// waits for the failed attempt to end on the server and skips the rows it
// wrote (chInserter.settle). A failing insert is retried with capped exponential backoff
// and jitter until it succeeds or ctx ends; when ctx ends, RunSink returns
// without inserting or committing what is pending. Rebalances are blocked
// between poll and the end of processing (kgo.BlockRebalanceOnPoll); on
// revocation the pending batch is flushed and committed first, or — if
// ClickHouse keeps failing — given up uncommitted for the next owner.
func RunSink(ctx context.Context, cfg SinkConfig, log *slog.Logger) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "sink", "group", cfg.Group)
	metrics, err := NewSinkMetrics(cfg.Registerer)
	if err != nil {
		return err
	}

	conn, chErr := Open(ctx, cfg.ClickHouseAddr, "")
	kErr := pingKafka(ctx, cfg.Brokers)
	if chErr != nil || kErr != nil {
		if conn != nil {
			_ = conn.Close()
		}
		switch {
		case chErr != nil && kErr != nil:
			return fmt.Errorf("sink: %w; %w", chErr, kErr)
		case chErr != nil:
			return fmt.Errorf("sink: %w", chErr)
		default:
			return fmt.Errorf("sink: %w", kErr)
		}
	}
	defer conn.Close()

	applied, err := Migrate(ctx, conn, cfg.Database)
	if err != nil {
		return fmt.Errorf("sink: migrate clickhouse database %s at %s: %w", cfg.Database, cfg.ClickHouseAddr, err)
	}
	if len(applied) > 0 {
		log.Info("applied clickhouse migrations", "database", cfg.Database, "versions", applied)
	}

	newInserter := func() *chInserter {
		return &chInserter{conn: conn, sql: insertEventsSQL(cfg.Database), capsSQL: insertCapacitySQL(cfg.Database),
			database: cfg.Database, m: metrics}
	}
	s := &sink{
		cfg:       cfg,
		log:       log,
		ins:       newInserter(),
		m:         metrics,
		ctx:       ctx,
		batchSize: cfg.BatchSize,
	}
	for i := 1; i < cfg.Inserts; i++ {
		s.extra = append(s.extra, newInserter())
	}
	cl, err := kgo.NewClient(bus.Opts(cfg.Brokers,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
	)...)
	if err != nil {
		return fmt.Errorf("sink: kafka client: %w", err)
	}
	s.commit = cl.CommitRecords
	defer cl.Close()
	warnMissingTopics(ctx, cl, cfg.Topics, log)

	log.Info("sink running", "topics", cfg.Topics, "database", cfg.Database,
		"batch_size", cfg.BatchSize, "flush_interval", cfg.FlushInterval.String())
	err = s.loop(ctx, cl)
	// From here on no callback may insert or commit: Close leaves the group,
	// which revokes our partitions, and pending records must stay
	// uncommitted for the next owner.
	s.closing.Store(true)
	return err
}

func pingKafka(ctx context.Context, brokers []string) error {
	addr := strings.Join(brokers, ",")
	cl, err := kgo.NewClient(bus.Opts(brokers, kgo.DialTimeout(3*time.Second))...)
	if err != nil {
		return fmt.Errorf("kafka at %s: %w (check --brokers)", addr, err)
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, kafkaPingTimeout)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		return fmt.Errorf("kafka at %s %w: %v (start it with `make up` or set --brokers)", addr, ErrUnreachable, err)
	}
	return nil
}

// warnMissingTopics logs topics that do not exist yet; the consumer picks
// them up once they are created (`sluice topics ensure`).
func warnMissingTopics(ctx context.Context, cl *kgo.Client, topics []string, log *slog.Logger) {
	tctx, cancel := context.WithTimeout(ctx, kafkaPingTimeout)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(tctx, topics...)
	if err != nil {
		log.Warn("cannot list kafka topics", "err", err)
		return
	}
	for _, t := range topics {
		if d, ok := td[t]; !ok || d.Err != nil {
			log.Warn("kafka topic does not exist yet; create it with `sluice topics ensure`", "topic", t)
		}
	}
}

// inserter writes rows to ClickHouse; an interface so the batching and
// commit logic can be tested without a server.
type inserter interface {
	insert(ctx context.Context, rows []pending) error
}

type chInserter struct {
	conn     driver.Conn
	sql      string
	capsSQL  string
	database string       // for the retry check; "" = no check (InsertRows: one attempt)
	m        *SinkMetrics // optional: counts rows a retry found already written
	cols     eventCols    // reused between inserts; insert is never concurrent
	prepCols eventCols    // prepare's: it may run beside an insert
	mem      colMem       // the driver columns' memory of batches sent, reused by the next

	// unsettled holds the query ids of the last attempt, when it failed. A
	// failed insert is not a lost insert: an attempt that timed out after
	// sending its block is finished by the server all the same (18.16
	// writes a block, and its materialized views, as soon as it arrives;
	// only the next read notices the client is gone). So the next attempt
	// first waits for those queries to leave system.processes and then
	// inserts only the rows not already stored (settle).
	unsettled []string
	// written holds the query ids of the last attempt when it succeeded:
	// a batch given back after it was written (errBatchBefore) has them
	// settled by the next insert, which then skips its stored rows.
	written []string
	// stored is how many rows of the batch being retried events is known
	// to hold already: found there by a settle, or all of them once its
	// events insert succeeded. A later settle of the same batch (after a
	// failed bucket_capacity insert, or a failed insert of the rows the
	// first settle found missing) counts in RetryRowsWritten only the
	// rows beyond them, and when all are known it reads no positions: it
	// only waits for the failed capacity insert to end. Without it every
	// settle counted the whole batch again (TestIntegrationSinkTimedOutInsertWrittenOnce
	// at load 17: 340 rows "already written" of 170, none doubled).
	stored int
}

// takeUnsettled hands over the attempts a batch given back leaves behind:
// the failed attempt's query ids, or, when the batch was written
// (written: errBatchBefore), the successful one's.
func (c *chInserter) takeUnsettled(written bool) []string {
	ids := c.unsettled
	if written {
		ids = c.written
	}
	c.unsettled, c.written, c.stored = nil, nil, 0
	return ids
}

// addUnsettled takes over a given-back batch's attempts. The batch comes
// back merged with other rows, so what was known stored of it is not
// carried: the settle counts its stored rows again.
func (c *chInserter) addUnsettled(ids []string) {
	c.unsettled = append(c.unsettled, ids...)
	c.stored = 0
}

// insertTimeoutFor is how long one insert attempt of n rows may take: a
// base plus a share per row, so a large batch on a loaded server is not
// cut off at a fixed 30 s. A timeout is safe either way (settle), but each
// one costs a settle round trip.
func insertTimeoutFor(n int) time.Duration {
	return insertTimeout + time.Duration(n)*insertTimeoutPerRow
}

func (c *chInserter) insert(ctx context.Context, rows []pending) error {
	todo := rows
	switch {
	case len(c.unsettled) > 0 && c.database != "":
		check := rows
		if c.stored >= len(rows) {
			check = nil // every row is stored: only wait for the failed capacity insert
		}
		missing, err := c.settle(ctx, check)
		if err != nil {
			return fmt.Errorf("check what the failed insert wrote: %w", err)
		}
		c.unsettled = nil
		if check != nil {
			if held := len(rows) - len(missing); held > c.stored {
				if c.m != nil {
					c.m.RetryRowsWritten.Add(float64(held - c.stored))
				}
				c.stored = held
			}
		}
		todo = missing
	case len(c.unsettled) == 0:
		c.stored = 0 // a new batch (or a retry without a check: InsertRows)
	}
	c.written = nil
	if len(todo) > 0 {
		id := newQueryID()
		if err := c.insertEvents(ctx, id, todo); err != nil {
			c.unsettled = []string{id}
			return err
		}
		c.written = []string{id}
	}
	c.stored = len(rows)
	return c.insertBatchCapacities(ctx, rows)
}

// preparedInsert is a batch's events insert opened and filled ahead of
// time (chInserter.prepare), waiting to be sent.
type preparedInsert struct {
	rows   []pending // the batch it was filled from
	id     string    // its query id
	batch  driver.Batch
	cancel context.CancelFunc
	err    error // prepare failed: insert the usual way
}

func (p *preparedInsert) abort() {
	if p.batch != nil {
		_ = p.batch.Abort()
	}
	p.cancel()
}

// prepare opens the events insert of rows and hands the driver every
// column, so that this client-side work (about half the sink's CPU per
// event: the driver copies each string into its column) overlaps the
// server's work on the batch before. Called from the poll loop only, while
// at most one other insert runs; it uses its own columns and touches no
// retry state. The returned insert is sent by insertPrepared or aborted.
func (c *chInserter) prepare(ctx context.Context, rows []pending) *preparedInsert {
	pctx, cancel := context.WithCancel(ctx)
	p := &preparedInsert{rows: rows, id: newQueryID(), cancel: cancel}
	b, err := c.conn.PrepareBatch(clickhouse.Context(pctx, clickhouse.WithQueryID(p.id)), c.sql)
	if err != nil {
		p.err = fmt.Errorf("prepare insert: %w", err)
		return p
	}
	p.batch = b
	c.prepCols.reset(len(rows))
	for i := range rows {
		c.prepCols.add(&rows[i].row)
	}
	if err := c.prepCols.appendTo(b, c.mem.take()); err != nil {
		p.err = fmt.Errorf("append %d rows: %w", len(rows), err)
	}
	return p
}

// insertPrepared is insert for a batch prepare filled: it sends it, under
// the same timeout, counted from the send (the wait for the batch before
// is not the server's time on this one). After a failed attempt (settle
// is due) or a failed prepare it falls back to insert.
func (c *chInserter) insertPrepared(ctx context.Context, rows []pending, p *preparedInsert) error {
	if len(c.unsettled) > 0 || p.err != nil || len(p.rows) != len(rows) || (len(rows) > 0 && &p.rows[0] != &rows[0]) {
		p.abort()
		return c.insert(ctx, rows)
	}
	defer p.cancel()
	stop := context.AfterFunc(ctx, p.cancel) // the flight's cancel reaches the send
	defer stop()
	t := time.AfterFunc(insertTimeoutFor(len(rows)), p.cancel)
	defer t.Stop()
	c.stored = 0
	err := p.batch.Send()
	c.mem.give(p.batch)
	if err != nil {
		c.unsettled = []string{p.id}
		return fmt.Errorf("send %d rows: %w", len(rows), err)
	}
	c.written = []string{p.id}
	c.stored = len(rows)
	return c.insertBatchCapacities(ctx, rows)
}

func (c *chInserter) insertBatchCapacities(ctx context.Context, rows []pending) error {
	// The capacities of the whole batch: an attempt whose events insert
	// timed out never sent them. bucket_capacity is read with FINAL, so
	// a retried capacity insert that had in fact been written is harmless.
	id := newQueryID()
	cctx, cancel := context.WithTimeout(clickhouse.Context(ctx, clickhouse.WithQueryID(id)), insertTimeout)
	defer cancel()
	if err := c.insertCapacities(cctx, rows); err != nil {
		c.unsettled = append(c.written, id)
		c.written = nil
		return err
	}
	c.written = append(c.written, id)
	return nil
}

func (c *chInserter) insertEvents(ctx context.Context, queryID string, rows []pending) error {
	ctx, cancel := context.WithTimeout(ctx, insertTimeoutFor(len(rows)))
	defer cancel()
	b, err := c.conn.PrepareBatch(clickhouse.Context(ctx, clickhouse.WithQueryID(queryID)), c.sql)
	if err != nil {
		return fmt.Errorf("prepare insert: %w", err)
	}
	c.cols.reset(len(rows))
	for i := range rows {
		c.cols.add(&rows[i].row)
	}
	if err := c.cols.appendTo(b, c.mem.take()); err != nil {
		_ = b.Abort()
		return fmt.Errorf("append %d rows: %w", len(rows), err)
	}
	err = b.Send()
	c.mem.give(b)
	if err != nil {
		return fmt.Errorf("send %d rows: %w", len(rows), err)
	}
	return nil
}

// newQueryID names one insert attempt so that settle can find it in
// system.processes.
func newQueryID() string {
	var b [12]byte
	_, _ = crand.Read(b[:])
	return "sluice-sink-" + hex.EncodeToString(b[:])
}

// settle runs before retrying a failed insert: it waits until the failed
// attempt's queries have ended on the server (bounded by
// insertTimeoutFor(len(rows)); past it the check fails and is retried with
// the insert's backoff), then returns the rows of the batch that events
// does not hold yet. A row is held when a stored row has the same Kafka
// position (topic, partition, offset) and the same event id, so a topic
// recreated with reused offsets is not mistaken for a written batch.
func (c *chInserter) settle(ctx context.Context, rows []pending) ([]pending, error) {
	ctx, cancel := context.WithTimeout(ctx, insertTimeoutFor(len(rows)))
	defer cancel()
	ids := make([]string, len(c.unsettled))
	for i, id := range c.unsettled {
		ids[i] = "'" + id + "'" // our own hex ids: no quoting needed
	}
	running := "SELECT count() FROM system.processes WHERE query_id IN (" + strings.Join(ids, ", ") + ")"
	for {
		var n uint64
		if err := c.conn.QueryRow(ctx, running).Scan(&n); err != nil {
			return nil, fmt.Errorf("look up the failed insert in system.processes: %w", err)
		}
		if n == 0 {
			break
		}
		t := time.NewTimer(settlePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("the failed insert is still running on the server: %w", ctx.Err())
		case <-t.C:
		}
	}
	if len(rows) == 0 {
		return nil, nil
	}

	type pos struct {
		topic     string
		partition uint32
		offset    uint64
	}
	type span struct{ lo, hi uint64 }
	want := make(map[pos]string, len(rows))
	spans := map[pos]span{} // offset is 0 in the key: one span per topic and partition
	lo, hi := rows[0].row.ProducedAt.Unix(), rows[0].row.ProducedAt.Unix()
	for i := range rows {
		r := &rows[i].row
		want[pos{r.Topic, r.Partition, r.Offset}] = r.EventID
		k := pos{topic: r.Topic, partition: r.Partition}
		if sp, ok := spans[k]; ok {
			spans[k] = span{min(sp.lo, r.Offset), max(sp.hi, r.Offset)}
		} else {
			spans[k] = span{r.Offset, r.Offset}
		}
		lo, hi = min(lo, r.ProducedAt.Unix()), max(hi, r.ProducedAt.Unix())
	}
	var conds []string
	var args []any
	for k, sp := range spans {
		conds = append(conds, "(topic = ? AND `partition` = ? AND `offset` BETWEEN ? AND ?)")
		args = append(args, k.topic, k.partition, sp.lo, sp.hi)
	}
	// produced_at prunes the day partitions; the sorting key (type,
	// event_id) does not help here, but this runs only after a failure.
	q := "SELECT topic, `partition`, `offset`, event_id FROM " + quoteIdent(c.database) + ".events" +
		" WHERE produced_at BETWEEN toDateTime(?) AND toDateTime(?) AND (" + strings.Join(conds, " OR ") + ")"
	res, err := c.conn.Query(ctx, q, append([]any{lo, hi}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("read the batch's stored positions: %w", err)
	}
	defer res.Close()
	held := make(map[pos]bool)
	for res.Next() {
		var p pos
		var id string
		if err := res.Scan(&p.topic, &p.partition, &p.offset, &id); err != nil {
			return nil, fmt.Errorf("scan a stored position: %w", err)
		}
		if want[p] == id {
			held[p] = true
		}
	}
	if err := res.Err(); err != nil {
		return nil, fmt.Errorf("read the batch's stored positions: %w", err)
	}
	missing := make([]pending, 0, len(rows)-len(held))
	for i := range rows {
		r := &rows[i].row
		if !held[pos{r.Topic, r.Partition, r.Offset}] {
			missing = append(missing, rows[i])
		}
	}
	return missing, nil
}

// insertCapacities writes the bucket rows of the batch's ConfigChanged
// events. It runs after the events insert and before the commit; after a
// failure the retry inserts the events the failed attempt did not write
// (settle) and all the batch's capacities again (bucket_capacity is read
// with FINAL).
func (c *chInserter) insertCapacities(ctx context.Context, rows []pending) error {
	n := 0
	for i := range rows {
		n += len(rows[i].row.Capacities)
	}
	if n == 0 || c.capsSQL == "" {
		return nil
	}
	b, err := c.conn.PrepareBatch(ctx, c.capsSQL)
	if err != nil {
		return fmt.Errorf("prepare bucket_capacity insert: %w", err)
	}
	for i := range rows {
		for j := range rows[i].row.Capacities {
			if err := b.Append(rows[i].row.Capacities[j].values()...); err != nil {
				_ = b.Abort()
				return fmt.Errorf("append bucket_capacity row of %s: %w", rows[i].row.EventID, err)
			}
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("send %d bucket_capacity rows: %w", n, err)
	}
	return nil
}

type pending struct {
	row Row
	rec *kgo.Record
}

// sink holds the batch between polls. The main loop touches it only between
// PollRecords and AllowRebalance, the rebalance callbacks only while no poll
// is outstanding (BlockRebalanceOnPoll), so they never interleave; mu makes
// that explicit.
type sink struct {
	cfg       SinkConfig
	log       *slog.Logger
	ins       inserter
	commit    func(context.Context, ...*kgo.Record) error
	m         *SinkMetrics
	ctx       context.Context
	batchSize int
	closing   atomic.Bool

	// extra are further inserters, each on its own connection: with
	// them, up to 1+len(extra) batches insert at once (insertDepth), and
	// their commits still go in poll order.
	extra []inserter

	mu       sync.Mutex
	buf      []pending
	spare    []pending // the buffer of the last finished background insert, for reuse
	first    time.Time // when the oldest pending record was polled
	inflight []*flight // the background inserts of handOffLocked, oldest first
	// carry holds the query ids a failed background insert left
	// unsettled, for the inserter of the next batch (which starts with
	// the failed batch's rows): it settles them before inserting.
	carry []string
}

// slotFreeLocked says whether a batch handed off now would start
// inserting at once: fewer than insertDepth batches in flight, or the
// oldest done. A batch due by FlushInterval waits for that rather than
// block the loop in a hand-off: it keeps filling meanwhile, so a slow
// server gets fewer, fuller inserts (each costs ~0.2 CPU-s of server
// time whatever its size).
func (s *sink) slotFreeLocked() bool {
	return len(s.inflight) < s.insertDepth() || len(s.inflight[0].done) > 0
}

// insertDepth is how many batches the sink inserts at once.
func (s *sink) insertDepth() int { return 1 + len(s.extra) }

// slot returns the inserter of slot i (0 = ins).
func (s *sink) slot(i int) inserter {
	if i == 0 {
		return s.ins
	}
	return s.extra[i-1]
}

// freeSlotLocked returns a slot no batch in flight uses.
func (s *sink) freeSlotLocked() int {
	for i := 0; i < s.insertDepth(); i++ {
		used := false
		for _, f := range s.inflight {
			used = used || f.slot == i
		}
		if !used {
			return i
		}
	}
	return 0 // unreachable: callers wait until len(inflight) < depth
}

// handCarryLocked gives the unsettled query ids of a failed batch to the
// inserter that will insert its rows next.
func (s *sink) handCarryLocked(ins inserter) {
	if len(s.carry) == 0 {
		return
	}
	if u, ok := ins.(unsettler); ok {
		u.addUnsettled(s.carry)
	}
	s.carry = nil
}

// unsettler is an inserter that remembers failed attempts to settle
// (chInserter): a batch given back to the buffer takes them along to
// whichever inserter inserts it next.
type unsettler interface {
	takeUnsettled(written bool) []string
	addUnsettled(ids []string)
}

func (s *sink) loop(ctx context.Context, cl *kgo.Client) error {
	for {
		s.mu.Lock()
		room := max(s.batchSize-len(s.buf), 1) // a batch given back by a revocation may overfill it
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if len(s.buf) > 0 {
			dl := s.first.Add(s.cfg.FlushInterval)
			if !time.Now().Before(dl) && !s.slotFreeLocked() {
				// Due, but every insert slot is busy: keep filling the
				// batch and look again shortly.
				dl = time.Now().Add(slotPoll)
			}
			pctx, cancel = context.WithDeadline(ctx, dl)
		}
		s.mu.Unlock()

		fetches := cl.PollRecords(pctx, room)
		cancel()
		if fetches.IsClientClosed() {
			s.settle()
			return nil
		}
		if ctx.Err() != nil {
			// Shutting down: whatever is pending stays uncommitted and is
			// redelivered to the next owner.
			s.settle()
			cl.AllowRebalance()
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			s.log.Warn("kafka fetch error", "topic", t, "partition", p, "err", err)
		})

		s.mu.Lock()
		s.addFetchesLocked(fetches)
		var err error
		if len(s.buf) > 0 && (len(s.buf) >= s.batchSize || (!time.Now().Before(s.first.Add(s.cfg.FlushInterval)) && s.slotFreeLocked())) {
			err = s.handOffLocked(ctx)
		}
		s.mu.Unlock()
		cl.AllowRebalance()
		if err != nil {
			s.settle()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// settle waits for the background insert before the sink returns, so
// nothing uses the ClickHouse connection after RunSink closes it.
func (s *sink) settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.waitInflightLocked(false)
}

// parallelDecodeMin is the smallest poll decoded on several goroutines;
// below it the goroutines cost more than they save.
const parallelDecodeMin = 2048

// addFetchesLocked decodes the polled records into the buffer, in poll
// order. Decoding (JSON) is the sink's largest CPU cost, so a large poll is
// split over GOMAXPROCS goroutines.
func (s *sink) addFetchesLocked(fetches kgo.Fetches) {
	n := fetches.NumRecords()
	workers := runtime.GOMAXPROCS(0)
	if n < parallelDecodeMin || workers < 2 {
		fetches.EachRecord(s.addLocked)
		return
	}
	recs := make([]*kgo.Record, 0, n)
	fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	if len(s.buf) == 0 {
		s.first = time.Now()
	}
	base := len(s.buf)
	s.growBufLocked(len(recs))
	s.buf = s.buf[:base+len(recs)]
	ok := make([]bool, len(recs))
	var wg sync.WaitGroup
	chunk := (len(recs) + workers - 1) / workers
	for lo := 0; lo < len(recs); lo += chunk {
		hi := min(lo+chunk, len(recs))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				s.buf[base+i] = pending{row: decodeRecord(recs[i], &ok[i]), rec: recs[i]}
			}
		}()
	}
	wg.Wait()
	for i := range recs {
		if !ok[i] {
			s.invalidLocked(recs[i], &s.buf[base+i].row)
		}
	}
}

// decodeRecord maps r to its row. The payload column shares r.Value's
// bytes instead of copying them (1M events: ~0.6 GB less to allocate
// and collect): franz-go (without kgo.WithPools, which the sink does not
// set) never writes to a record's value after handing it out, and the
// row lives no longer than the pending entry holding r.
func decodeRecord(r *kgo.Record, ok *bool) Row {
	payload := unsafe.String(unsafe.SliceData(r.Value), len(r.Value))
	row, valid := rowFromRecord(r.Value, payload, RecordPos{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, LogTime: r.Timestamp})
	*ok = valid
	return row
}

func (s *sink) invalidLocked(r *kgo.Record, row *Row) {
	s.m.InvalidRecords.Inc()
	s.log.Warn("undecodable kafka record stored as type 'invalid'",
		"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", row.DecodeError)
}

func (s *sink) addLocked(r *kgo.Record) {
	var ok bool
	row := decodeRecord(r, &ok)
	if !ok {
		s.invalidLocked(r, &row)
	}
	if len(s.buf) == 0 {
		s.first = time.Now()
	}
	s.buf = append(s.buf, pending{row: row, rec: r})
}

// growBufLocked makes room for n more pending rows of a large poll
// (addFetchesLocked). The buffer is then sized to the whole batch at once
// (a poll asks for at most the room left), so it does not regrow by steps
// while filling (0.27 s of 8.5 per million events before); the buffers
// go round between the batch filling and the ones in flight (spare). Small
// polls (a quiet topic) append as before: a whole batch's buffer is 77 MB
// at 100,000 rows (768 bytes per pending row).
func (s *sink) growBufLocked(n int) {
	if cap(s.buf)-len(s.buf) >= n {
		return
	}
	s.buf = slices.Grow(s.buf, max(n, s.batchSize-len(s.buf)))
}

// flushLocked inserts the whole buffer, retrying with capped exponential
// backoff (maxAttempts 0 = until ctx ends), then commits the offsets of the
// inserted records. Nothing is committed unless the insert succeeded. A
// failed commit after a successful insert is logged and counted, and the
// buffer is cleared anyway: the rows are in ClickHouse, and the redelivery
// the missing commit causes is deduplicated there. It first waits for the
// batch in flight (handOffLocked), so commits stay in poll order.
func (s *sink) flushLocked(ctx context.Context, maxAttempts int) error {
	if err := s.waitInflightLocked(maxAttempts > 0); err != nil && ctx.Err() != nil {
		return err
	}
	if len(s.buf) == 0 {
		return nil
	}
	if err := s.insertAndCommit(ctx, s.buf, maxAttempts, nil, nil); err != nil {
		return err
	}
	clear(s.buf)
	s.buf = s.buf[:0]
	s.first = time.Time{}
	return nil
}

// handOffLocked starts inserting the buffer in the background and gives
// the loop an empty buffer to fill meanwhile: decoding the next batch
// overlaps ClickHouse's work on this one, which is most of the sink's
// throughput on a small machine. At most insertDepth batches are in
// flight, each on its own inserter; one more hand-off waits for the
// oldest, so a slow ClickHouse slows the poll loop down (backpressure)
// instead of piling batches up in memory. Commits keep poll order: a batch
// commits only after the one before it has (flight.committed).
func (s *sink) handOffLocked(ctx context.Context) error {
	// With one inserter, fill the next insert while the one in flight is
	// still on the server; the buffer cannot change before it is sent
	// (s.mu is held). With more, the next batch's own goroutine fills its
	// columns beside the other inserts.
	var prep *preparedInsert
	if p, ok := s.ins.(preparer); ok && s.insertDepth() == 1 && len(s.inflight) > 0 && len(s.buf) > 0 && len(s.carry) == 0 {
		prep = p.prepare(ctx, s.buf)
	}
	if len(s.inflight) >= s.insertDepth() {
		if err := s.waitOldestLocked(); err != nil {
			if prep != nil {
				prep.abort() // the failed batch goes back in front of the buffer
			}
			return err
		}
	}
	if len(s.buf) == 0 {
		if prep != nil {
			prep.abort()
		}
		return nil
	}
	rows := s.buf
	s.buf, s.spare = s.spare[:0], nil
	s.first = time.Time{}
	fctx, cancel := context.WithCancel(ctx)
	f := &flight{done: make(chan flushResult, 1), cancel: cancel, committed: make(chan struct{}), slot: s.freeSlotLocked()}
	if n := len(s.inflight); n > 0 {
		f.prev = s.inflight[n-1]
	}
	ins := s.slot(f.slot)
	s.handCarryLocked(ins)
	s.inflight = append(s.inflight, f)
	go func() {
		defer cancel()
		err := s.insertAndCommitIn(fctx, ins, rows, 0, &f.failing, prep, f.prev)
		f.ok = err == nil
		close(f.committed)
		f.done <- flushResult{rows: rows, err: err}
	}()
	return nil
}

// preparer is an inserter that can fill a batch's insert ahead of time
// (chInserter; the tests' fakes are not).
type preparer interface {
	prepare(ctx context.Context, rows []pending) *preparedInsert
	insertPrepared(ctx context.Context, rows []pending, p *preparedInsert) error
}

// flight is a batch handOffLocked is inserting.
type flight struct {
	done    chan flushResult
	cancel  context.CancelFunc
	failing atomic.Bool // an insert attempt failed; it is backing off and retrying
	slot    int         // the inserter it uses (sink.slot)
	prev    *flight     // the batch before it, still in flight when it started; nil when none
	// committed is closed when the batch has committed (ok) or given up:
	// the batch after it commits only after, and only if ok.
	committed chan struct{}
	ok        bool
}

// errBatchBefore is a batch's result when the batch before it was not
// inserted: committing its offsets would skip the earlier records, so it
// goes back to the buffer with them (its rows may be in ClickHouse
// already: the redelivery is deduplicated there).
var errBatchBefore = errors.New("the batch before was not inserted")

// flushResult is what a background insert hands back: its rows (the
// buffer, for reuse) and its error (ctx's: it retries until then).
type flushResult struct {
	rows []pending
	err  error
}

// waitOldestLocked waits for the oldest batch in flight. One that failed
// takes every later batch back with it (waitInflightLocked), in order.
func (s *sink) waitOldestLocked() error {
	f := s.inflight[0]
	r := <-f.done
	if r.err != nil {
		// Put it back to be waited for with the rest (done is buffered
		// and read once: hand the result over).
		f.done <- r
		return s.waitInflightLocked(false)
	}
	s.inflight = s.inflight[1:]
	clear(r.rows)
	s.spare = r.rows[:0]
	return nil
}

// waitInflightLocked waits for the batches handOffLocked started, oldest
// first. A batch inserted and committed leaves the sink; those whose
// insert did not succeed (ctx ended, or giveUp cancelled their retries,
// or the batch before them failed) go back to the front of the buffer, in
// poll order, uncommitted, and the first error is returned. With giveUp,
// a batch that is retrying a failed insert is cancelled rather than
// awaited: a revocation must not wait for ClickHouse to come back.
func (s *sink) waitInflightLocked(giveUp bool) error {
	var back []pending
	var first error
	for _, f := range s.inflight {
		var r flushResult
		if giveUp {
			// Wait for the attempt under way; cancel once one has failed.
			tick := time.NewTicker(20 * time.Millisecond)
		wait:
			for {
				if f.failing.Load() {
					f.cancel()
				}
				select {
				case r = <-f.done:
					break wait
				case <-tick.C:
				}
			}
			tick.Stop()
		} else {
			r = <-f.done
		}
		if r.err != nil {
			if u, ok := s.slot(f.slot).(unsettler); ok {
				s.carry = append(s.carry, u.takeUnsettled(errors.Is(r.err, errBatchBefore))...)
			}
			back = append(back, r.rows...)
			if first == nil {
				first = r.err
			}
			continue
		}
		clear(r.rows)
		s.spare = r.rows[:0]
	}
	s.inflight = nil
	if len(back) > 0 {
		s.buf = append(back, s.buf...)
		if s.first.IsZero() {
			s.first = time.Now()
		}
	}
	return first
}

// insertAndCommit inserts rows, retrying with capped exponential backoff
// (maxAttempts 0 = until ctx ends), then commits their offsets.
// failing (optional) is set once an attempt failed. prep (optional) is the
// batch's insert filled ahead of time: the first attempt sends it.
func (s *sink) insertAndCommit(ctx context.Context, rows []pending, maxAttempts int, failing *atomic.Bool, prep *preparedInsert) error {
	s.handCarryLocked(s.ins)
	return s.insertAndCommitIn(ctx, s.ins, rows, maxAttempts, failing, prep, nil)
}

// insertAndCommitIn is insertAndCommit on inserter ins; with prev, the
// commit waits for prev's and is skipped (errBatchBefore) unless prev
// committed.
func (s *sink) insertAndCommitIn(ctx context.Context, ins inserter, rows []pending, maxAttempts int, failing *atomic.Bool, prep *preparedInsert, prev *flight) error {
	backoff := insertRetryMin
	for attempt := 1; ; attempt++ {
		var err error
		if prep != nil {
			err = ins.(preparer).insertPrepared(ctx, rows, prep)
			prep = nil
		} else {
			err = ins.insert(ctx, rows)
		}
		if err == nil {
			break
		}
		s.m.InsertErrors.Inc()
		if failing != nil {
			failing.Store(true)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if maxAttempts > 0 && attempt >= maxAttempts {
			return err
		}
		// Capped exponential backoff with jitter in [backoff/2, backoff).
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		s.log.Warn("clickhouse insert failed; offsets not committed, retrying",
			"rows", len(rows), "attempt", attempt, "retry_in", wait.String(), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(backoff*2, insertRetryMax)
	}
	s.m.RowsInserted.Add(float64(len(rows)))
	s.m.Batches.Inc()
	if prev != nil {
		<-prev.committed
		if !prev.ok {
			return errBatchBefore
		}
	}

	recs := make([]*kgo.Record, len(rows))
	for i := range rows {
		recs[i] = rows[i].rec
	}
	if err := s.commit(ctx, recs...); err != nil {
		s.m.CommitErrors.Inc()
		s.log.Warn("offset commit failed after insert; the rows will be re-read and deduplicated", "rows", len(recs), "err", err)
	} else {
		s.log.Debug("batch inserted and committed", "rows", len(recs))
	}
	return nil
}

// onRevoked runs before partitions go to another member: flush and commit
// what is pending so the next owner does not redo it. If ClickHouse keeps
// failing, the revoked partitions' records are given up uncommitted (the next
// owner re-reads them); records of partitions we keep stay pending.
func (s *sink) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	if s.closing.Load() || s.ctx.Err() != nil {
		return // exiting: never commit pending records
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.flushLocked(s.ctx, revokeAttempts); err != nil {
		n := s.dropLocked(revoked)
		s.log.Warn("partitions revoked while clickhouse insert fails; their records are left uncommitted for the next owner",
			"dropped", n, "revoked", revoked, "err", err)
	}
}

// onLost drops pending records of partitions we no longer own; committing
// them is impossible and they will be redelivered.
func (s *sink) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A batch in flight inserts and tries its commit (which fails for the
	// lost partitions: their rows are redelivered and deduplicated); one
	// that keeps failing is given back to the buffer and dropped below.
	_ = s.waitInflightLocked(true)
	if n := s.dropLocked(lost); n > 0 {
		s.log.Warn("partitions lost; pending records left uncommitted", "dropped", n, "lost", lost)
	}
}

func (s *sink) dropLocked(parts map[string][]int32) int {
	gone := func(t string, p int32) bool {
		for _, q := range parts[t] {
			if q == p {
				return true
			}
		}
		return false
	}
	kept := s.buf[:0]
	dropped := 0
	for _, pr := range s.buf {
		if gone(pr.rec.Topic, pr.rec.Partition) {
			dropped++
			continue
		}
		kept = append(kept, pr)
	}
	clear(s.buf[len(kept):])
	s.buf = kept
	if len(s.buf) == 0 {
		s.first = time.Time{}
	}
	return dropped
}
