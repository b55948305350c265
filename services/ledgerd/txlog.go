package ledgerd

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
)

// TxLog is all the member's poll loop needs of Kafka: one group member's
// transactional session over sluice.requests, as franz-go's
// GroupTransactSession gives it. The loop (rounds, transactions,
// snapshots, rebuilds, commits) is written against it so that the same
// code runs on the real broker (kgoTxLog) and, seeded and with injected
// faults, in the pipeline simulation (services/loadtest/pipesim), as
// TigerBeetle's VOPR runs its real replica over simulated storage and
// network.
//
// Its semantics are franz-go's: Poll returns the records of the owned,
// unpaused partitions from the consumer's position on (read_committed);
// Begin opens a transaction, Produce adds a record to it (the promise is
// called once the broker answered), Flush waits for every promise; End
// commits (commit true) or aborts it, committing offsets with it, and
// aborts without an error when a partition was revoked or lost since the
// last End. Every abort rewinds the consumer to the committed offsets.
type TxLog interface {
	// Poll waits at most wait for records.
	Poll(ctx context.Context, wait time.Duration) kgo.Fetches
	Begin() error
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
	// End ends the open transaction; with commit, offsets (input partition
	// → next offset to apply) are committed in it, and partitions of
	// sluice.requests not in offsets are not committed at all.
	End(ctx context.Context, commit bool, offsets map[int32]int64) (committed bool, err error)
	// Pause and Resume stop and restart fetching partition p of
	// sluice.requests; Rewind sets its consumer position to from.
	Pause(p int32)
	Resume(p int32)
	Rewind(p int32, from int64)
	// Append produces r outside any transaction (Ticks: see ticks).
	Append(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	// CatchUp rebuilds partition p from its newest committed snapshot and
	// the committed inputs up to (not including) upto; replayed counts the
	// inputs applied past the snapshot, snapshotAt is when it was written
	// (zero without one). It runs off the loop.
	CatchUp(ctx context.Context, p int32, upto int64) (l *ledger.Ledger, replayed int, snapshotAt time.Time, err error)
	// Ping checks that the brokers answer a request of this session.
	Ping(ctx context.Context) error
	Close()
}

// Clock is the member's time: the wall clock in production, virtual time
// in the simulation. After is its timer (backoffs). Go runs work off the
// loop (snapshot encoding, partition rebuilds): a goroutine in production;
// the simulation runs it at a later virtual instant, so that the loop
// goes on deciding meanwhile in both.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
	Go(fn func())
}

// Medium is what a Service runs over: Dial opens a new session (one per
// recreate; drop is to be called with the partitions of sluice.requests
// that a rebalance revoked or lost, possibly with none), Clock is its time,
// and the partition counts of sluice.decisions and sluice.requests are
// read once at start.
type Medium struct {
	Dial                                  func(drop func(partitions []int32)) (TxLog, error)
	Clock                                 Clock
	DecisionPartitions, RequestPartitions int32
}

// wallClock is the production Clock.
type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (wallClock) Go(fn func())                           { go fn() }

// kgoTxLog is the production TxLog: a franz-go GroupTransactSession, and
// the member's plain idempotent producer for Ticks.
type kgoTxLog struct {
	sess     *kgo.GroupTransactSession
	tickProd *kgo.Client
	brokers  []string
	names    bus.Names
	log      *slog.Logger
}

func (k *kgoTxLog) Poll(ctx context.Context, wait time.Duration) kgo.Fetches {
	pollCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return k.sess.PollFetches(pollCtx)
}

func (k *kgoTxLog) Begin() error { return k.sess.Begin() }

func (k *kgoTxLog) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	k.sess.Produce(ctx, r, promise)
}

func (k *kgoTxLog) Flush(ctx context.Context) error { return k.sess.Client().Flush(ctx) }

func (k *kgoTxLog) End(ctx context.Context, commit bool, offsets map[int32]int64) (bool, error) {
	if !commit {
		return k.sess.End(ctx, kgo.TryAbort)
	}
	return k.sess.End(kgo.PreTxnCommitFnContext(ctx, commitOffsets(k.names.Requests, offsets)), kgo.TryCommit)
}

func (k *kgoTxLog) Pause(p int32) {
	k.sess.Client().PauseFetchPartitions(map[string][]int32{k.names.Requests: {p}})
}

func (k *kgoTxLog) Resume(p int32) {
	k.sess.Client().ResumeFetchPartitions(map[string][]int32{k.names.Requests: {p}})
}

func (k *kgoTxLog) Rewind(p int32, from int64) {
	k.sess.Client().SetOffsets(map[string]map[int32]kgo.EpochOffset{k.names.Requests: {p: {Epoch: -1, Offset: from}}})
}

func (k *kgoTxLog) Append(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	k.tickProd.Produce(ctx, r, promise)
}

func (k *kgoTxLog) CatchUp(ctx context.Context, p int32, upto int64) (*ledger.Ledger, int, time.Time, error) {
	r, err := catchUp(ctx, k.brokers, k.names, p, upto, k.log)
	return r.l, r.replayed, r.snapshotAt, err
}

func (k *kgoTxLog) Ping(ctx context.Context) error { return k.sess.Client().Ping(ctx) }

func (k *kgoTxLog) Close() { k.sess.Close() }

// NewOver makes a member that runs over m instead of connecting to Kafka
// itself (New): the pipeline simulation runs the real loop this way, one
// Round at a time. Config.Brokers may be empty.
func NewOver(cfg Config, m Medium) (*Service, error) {
	if len(cfg.Brokers) == 0 {
		cfg.Brokers = []string{"medium"}
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s := newService(cfg, m)
	if err := s.openSession(); err != nil {
		return nil, fmt.Errorf("ledger session: %w", err)
	}
	return s, nil
}

// BatchMaxBytes is the session's record batch bound per topic
// (batchMaxBytes), for the pipeline simulation to batch its records as
// the production client does: the broker refuses a batch over the topic's
// max.message.bytes whole.
func BatchMaxBytes(n bus.Names) func(topic string) int32 { return batchMaxBytes(n) }
