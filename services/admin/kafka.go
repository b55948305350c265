package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configsig"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// Record keys of the admin topic. Only "state" records carry a state; the
// others are markers a reader uses to know it has read everything that was
// committed before them.
const (
	keyState = "state"
	keyLock  = "lock" // a writer's fence: committed before it reads
	keySync  = "sync" // a reader's catch-up marker
)

// Source is ConfigChanged.Source of every admin API change.
const Source = "admin-api"

// Bounds of one change (put a limit on everything).
const (
	updateTimeout = 15 * time.Second
	// txnTimeout bounds how long a writer that died mid-change can hold
	// its transaction open: the ledger reads sluice.requests
	// read_committed, so an open transaction there holds back every
	// partition's later records until it ends (the next writer's fence
	// ends it sooner).
	txnTimeout     = 5 * time.Second
	updateAttempts = 8 // a writer fenced by a concurrent one retries (and then sees 409)
)

// KafkaConfig configures a KafkaStore.
type KafkaConfig struct {
	Brokers []string
	Names   bus.Names
	// Seed is the state before the first admin change (Seed of the
	// gateway's file); the topic's newest state replaces it.
	Seed State
	// Check validates a state against this gateway's configuration.
	Check CheckFunc
	// OnApply is called, in commit order, with every state this node
	// applies (the gateway installs it).
	OnApply func(State)
	Log     *slog.Logger
	// ReadOnly follows the topic without ever writing to it (follow.go):
	// for readers such as `sluice view`, whose Kafka principal may only
	// read. Update then fails.
	ReadOnly bool
}

// KafkaStore is the Store every gateway of a cluster uses. It follows the
// admin topic (read_committed) and applies its newest state; it commits a
// change as one transaction over the admin topic and every partition of
// sluice.requests.
//
// Two gateways writing at once: writers share one transactional id, so a
// writer that starts fences every earlier one (Kafka aborts the earlier
// one's open transaction and refuses its later commits). A writer first
// commits a lock record — that is the fence — and then waits until its own
// consumer has read that record: the consumer has then seen every state
// committed before the fence. Any state committed after it comes from a
// writer that fenced this one, so this writer's commit fails and it retries
// against the newer state, where the version check gives 409. Hence every
// committed change was derived from the state directly before it.
type KafkaStore struct {
	cfg  KafkaConfig
	cons *kgo.Client
	log  *slog.Logger

	mu      sync.Mutex
	st      State
	changed chan int            // closed and replaced on every applied state
	markers map[string]chan int // nonce → closed when its marker is read
	pos     int64               // offset of the newest record read (-1: none)
	moved   chan int            // closed and replaced when pos moves

	wmu sync.Mutex // one writer per node; nodes are serialised by fencing

	cancel context.CancelFunc
	done   chan struct{}
}

// OpenKafka follows the admin topic and returns once it has applied every
// state committed before it was called.
func OpenKafka(ctx context.Context, cfg KafkaConfig) (*KafkaStore, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Names = cfg.Names.OrDefault()
	if cfg.Names.Admin == "" {
		return nil, errors.New("admin: no admin topic name")
	}
	opts := []kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Names.Admin: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.FetchMaxPartitionBytes(bus.AdminMaxBytes),
	}
	if cfg.ReadOnly {
		opts = append(opts, kgo.KeepControlRecords()) // every offset is seen (catchUp)
	}
	cons, err := bus.NewClient(ctx, cfg.Brokers, 10*time.Second, opts...)
	if err != nil {
		return nil, err
	}
	if err := waitTopic(ctx, kadm.NewClient(cons), cfg.Names.Admin); err != nil {
		cons.Close()
		return nil, fmt.Errorf("admin topic %s missing (run `sluice topics ensure`): %w", cfg.Names.Admin, err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	s := &KafkaStore{cfg: cfg, cons: cons, log: cfg.Log, st: cfg.Seed, changed: make(chan int),
		markers: map[string]chan int{}, pos: -1, moved: make(chan int), cancel: cancel, done: make(chan struct{})}
	go s.consume(rctx)
	catchUp := s.sync
	if cfg.ReadOnly {
		catchUp = s.catchUp
	}
	if err := catchUp(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("admin: catch up with %s: %w", cfg.Names.Admin, err)
	}
	return s, nil
}

// Close stops following the topic.
func (s *KafkaStore) Close() {
	s.cancel()
	<-s.done
	s.cons.Close()
}

// State implements Store.
func (s *KafkaStore) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *KafkaStore) consume(ctx context.Context) {
	defer close(s.done)
	for {
		fs := s.cons.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			s.log.Warn("admin topic fetch", "topic", t, "partition", p, "err", err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			s.record(r)
			s.advance(r.Offset)
		})
	}
}

// record applies one committed record of the admin topic.
func (s *KafkaStore) record(r *kgo.Record) {
	if r.Attrs.IsControl() {
		return // a transaction marker (kept only by a read-only store)
	}
	switch string(r.Key) {
	case keyLock, keySync:
		s.mu.Lock()
		if ch, ok := s.markers[string(r.Value)]; ok {
			close(ch)
			delete(s.markers, string(r.Value))
		}
		s.mu.Unlock()
		return
	case keyState:
	default:
		return
	}
	st, err := decodeState(r.Value)
	if err != nil {
		s.log.Error("admin topic: unreadable state record skipped", "offset", r.Offset, "err", err)
		return
	}
	s.mu.Lock()
	if st.Version <= s.st.Version {
		s.mu.Unlock()
		return // a replay of what this node already applied
	}
	s.st = st
	close(s.changed)
	s.changed = make(chan int)
	s.mu.Unlock()
	if s.cfg.OnApply != nil {
		s.cfg.OnApply(st)
	}
}

func decodeState(b []byte) (State, error) {
	var ev schemas.Event
	if err := schemas.Decode(b, &ev); err != nil {
		return State{}, err
	}
	if ev.ConfigChanged == nil || len(ev.ConfigChanged.Admission) == 0 {
		return State{}, errors.New("not an admin ConfigChanged")
	}
	// Where the deployment signs its config, a state not signed by the
	// admin writer (a gateway writing the admin topic directly) is not
	// applied: it would change tenants and keys on every gateway.
	if v := configsig.Process().Verifier; v != nil {
		if err := v.Verify(ev.ConfigChanged); err != nil {
			return State{}, fmt.Errorf("admin state refused: %w", err)
		}
	}
	var st State
	if err := json.Unmarshal(ev.ConfigChanged.Admission, &st); err != nil {
		return State{}, fmt.Errorf("admission document: %w", err)
	}
	return st, nil
}

func nonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// marker registers a nonce to wait for.
func (s *KafkaStore) marker() (string, chan int) {
	n, ch := nonce(), make(chan int)
	s.mu.Lock()
	s.markers[n] = ch
	s.mu.Unlock()
	return n, ch
}

func (s *KafkaStore) forget(n string) {
	s.mu.Lock()
	delete(s.markers, n)
	s.mu.Unlock()
}

// sync appends a marker (outside any transaction) and waits until the
// consumer reads it: every state committed before it is then applied.
func (s *KafkaStore) sync(ctx context.Context) error {
	n, ch := s.marker()
	defer s.forget(n)
	pc, err := bus.NewClient(ctx, s.cfg.Brokers, 10*time.Second, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer pc.Close()
	if err := pc.ProduceSync(ctx, &kgo.Record{Topic: s.cfg.Names.Admin, Partition: 0, Key: []byte(keySync), Value: []byte(n)}).FirstErr(); err != nil {
		return err
	}
	return wait(ctx, ch)
}

func wait(ctx context.Context, ch chan int) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jitter is the wait before attempt+2: random in [0, 25 ms × 2^attempt).
func jitter(attempt int) time.Duration {
	var b [8]byte
	_, _ = rand.Read(b[:])
	n := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
	span := uint64(25*time.Millisecond) << min(attempt, 5)
	return time.Duration(n % span)
}

// errFenced says that a transaction of this change did not commit —
// typically another writer fenced this one — and the change may be tried
// again against the newer state.
var errFenced = errors.New("admin: not committed (fenced by a concurrent writer, or the broker refused the transaction)")

// Update implements Store.
func (s *KafkaStore) Update(ctx context.Context, base int64, a Actor, reason string, op Op) (State, error) {
	if err := writerCheck(); err != nil {
		return s.State(), err
	}
	if s.cfg.ReadOnly {
		return s.State(), errReadOnly
	}
	ctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var err error
	for attempt := 0; attempt < updateAttempts; attempt++ {
		// Versions only grow: a base below what this node has applied is a
		// conflict whatever the other writers do, so say so without
		// fencing anyone.
		if cur := s.State(); base < cur.Version {
			_, e := Prepare(cur, base, a, op, s.cfg.Check)
			return cur, e
		}
		var st State
		st, err = s.update(ctx, base, a, reason, op)
		if !errors.Is(err, errFenced) {
			return st, err
		}
		// Two writers that fence each other in lockstep would both run out
		// of attempts: back off for a random, growing time.
		s.log.Info("admin change fenced by a concurrent writer; reading the newer state", "attempt", attempt+1)
		select {
		case <-time.After(jitter(attempt)):
		case <-ctx.Done():
			return s.State(), ctx.Err()
		}
	}
	return s.State(), err
}

func (s *KafkaStore) update(ctx context.Context, base int64, a Actor, reason string, op Op) (State, error) {
	names := s.cfg.Names
	tx, err := bus.NewClient(ctx, s.cfg.Brokers, 10*time.Second,
		kgo.TransactionalID(names.Admin+".writer"),
		kgo.TransactionTimeout(txnTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(bus.AdminMaxBytes),
	)
	if err != nil {
		return State{}, err
	}
	defer tx.Close()
	// 1. The fence: the first transactional produce bumps the shared
	// producer epoch, aborting any writer still in flight.
	n, seen := s.marker()
	defer s.forget(n)
	if err := s.txn(ctx, tx, &kgo.Record{Topic: names.Admin, Partition: 0, Key: []byte(keyLock), Value: []byte(n)}); err != nil {
		return State{}, fmt.Errorf("%w (the fence: %v)", errFenced, err) // nothing of the change is written yet
	}
	// 2. Everything committed before the fence is now read.
	if err := wait(ctx, seen); err != nil {
		return State{}, fmt.Errorf("admin: wait for the fence record: %w", err)
	}
	next, e := Prepare(s.State(), base, a, op, s.cfg.Check)
	if e != nil {
		return State{}, e
	}
	// 3. The change, on both topics at once.
	recs, err := s.records(ctx, tx, next, a, reason, op)
	if err != nil {
		return State{}, err
	}
	if err := s.txn(ctx, tx, recs...); err != nil {
		// Fenced, or an answer that leaves it open whether the commit
		// happened (brokers report a fenced transaction in more than one
		// way): read to the end and look.
		if serr := s.sync(ctx); serr != nil {
			return State{}, errors.Join(err, serr)
		}
		if cur := s.State(); cur.Version == next.Version && bytes.Equal(marshalState(cur), marshalState(next)) {
			return next, nil // it did commit
		}
		return State{}, fmt.Errorf("%w (%v)", errFenced, err)
	}
	// 4. Read our own write before answering, so the caller's next request
	// to this gateway sees it.
	for {
		s.mu.Lock()
		cur, ch := s.st, s.changed
		s.mu.Unlock()
		if cur.Version >= next.Version {
			return next, nil
		}
		if err := wait(ctx, ch); err != nil {
			return next, fmt.Errorf("admin: version %d committed but not yet applied here: %w", next.Version, err)
		}
	}
}

// txn produces recs in one transaction and commits it.
func (s *KafkaStore) txn(ctx context.Context, tx *kgo.Client, recs ...*kgo.Record) error {
	if err := tx.BeginTransaction(); err != nil {
		return fmt.Errorf("admin: begin transaction: %w", err)
	}
	perr := tx.ProduceSync(ctx, recs...).FirstErr()
	commit := kgo.TransactionEndTry(perr == nil)
	eerr := tx.EndTransaction(ctx, commit)
	if err := errors.Join(perr, eerr); err != nil {
		return fmt.Errorf("admin: transaction: %w", err)
	}
	return nil
}

// records builds the change's records: the state for the admin topic and a
// ConfigChanged (without the admission document) for every partition of
// sluice.requests.
func (s *KafkaStore) records(ctx context.Context, tx *kgo.Client, next State, a Actor, reason string, op Op) ([]*kgo.Record, error) {
	names := s.cfg.Names
	td, err := kadm.NewClient(tx).ListTopics(ctx, names.Requests)
	if err != nil {
		return nil, fmt.Errorf("admin: list %s: %w", names.Requests, err)
	}
	t, ok := td[names.Requests]
	if !ok || t.Err != nil {
		return nil, fmt.Errorf("admin: topic %s missing (run `sluice topics ensure`)", names.Requests)
	}
	now := time.Now().UnixMilli()
	src := Source
	if op.Source != "" {
		src = op.Source
	}
	cc := schemas.ConfigChanged{ConfigVersion: fmt.Sprintf("admin-%d", next.Version), Source: src,
		Actor: a.String(), Reason: reason, Change: op.Change(), Ledger: next.Ledger}
	ev := eventid.New(schemas.TypeConfigChanged, now)
	full := cc
	full.Admission = marshalState(next)
	// Both documents are signed (signing.go): the ledgers refuse the
	// requests-topic one without a valid signature; the admin topic's
	// carries one so that a reader can check it the same way.
	if err := configsig.SignForWrite(&full); err != nil {
		return nil, err
	}
	if err := configsig.SignForWrite(&cc); err != nil {
		return nil, err
	}
	ev.ConfigChanged = &full
	b, err := schemas.Encode(ev)
	if err != nil {
		return nil, err
	}
	recs := []*kgo.Record{{Topic: names.Admin, Partition: 0, Key: []byte(keyState), Value: b}}
	for _, p := range t.Partitions.Numbers() {
		ev := eventid.New(schemas.TypeConfigChanged, now)
		c := cc
		ev.ConfigChanged = &c
		b, err := schemas.Encode(ev)
		if err != nil {
			return nil, err
		}
		recs = append(recs, &kgo.Record{Topic: names.Requests, Partition: p, Value: b})
	}
	return recs, nil
}

// topicWait bounds how long a just-created topic may take to appear in the
// metadata that a broker serves: `sluice topics ensure` followed at once
// by a gateway start is normal, and the broker's answer lags the create.
const topicWait = 5 * time.Second

// waitTopic returns once topic is in the broker's metadata, or its last
// error after topicWait.
func waitTopic(ctx context.Context, adm *kadm.Client, topic string) error {
	deadline := time.Now().Add(topicWait)
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if d, ok := td[topic]; !ok {
				err = errors.New("not in the metadata")
			} else {
				err = d.Err
			}
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
