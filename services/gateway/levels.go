package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// SnapshotLevels is the usage endpoint's LevelSource: it follows the
// ledger's compacted snapshot topic and keeps each partition's newest
// snapshot record, decoded and restored when the levels are first read
// after it arrived, so that a bucket's level can be read as the ledger last
// wrote it down. (A ledger snapshots far more often than callers ask for
// their usage; decoding and restoring every snapshot on arrival was 5 % of
// a busy gateway's CPU, plus the garbage it made.) This is an observation,
// not the ledger's live state: it is as old as the newest snapshot (see
// UsageStaleness), which is the price of keeping the gateway off the
// single writer's path.
type SnapshotLevels struct {
	cl  *kgo.Client
	log *slog.Logger

	mu    sync.Mutex
	parts map[string]*snapshotPart // by record key: one per ledger partition

	cancel context.CancelFunc
	done   chan struct{}
}

// snapshotPart is one ledger partition's newest snapshot.
type snapshotPart struct {
	raw   []byte // the newest record's value, until restored
	l     *ledger.Ledger
	lAtMs int64 // the log time of l's snapshot
}

// restore decodes and restores the pending record, if any. One that does
// not restore, or is older than the one restored (by log time), keeps the
// previous one.
func (p *snapshotPart) restore(log *slog.Logger) {
	if p.raw == nil {
		return
	}
	var ev schemas.Event
	err := schemas.Decode(p.raw, &ev)
	p.raw = nil
	if err != nil || ev.Snapshot == nil {
		return
	}
	if p.l != nil && ev.Snapshot.LogTimeMs < p.lAtMs {
		return
	}
	l, err := ledger.Restore(ev.Snapshot.State)
	if err != nil {
		log.Warn("usage: snapshot not restorable; keeping the previous one", "partition", ev.Snapshot.Partition, "err", err)
		return
	}
	p.l, p.lAtMs = l, ev.Snapshot.LogTimeMs
}

// FollowSnapshots starts following names.Snapshots.
func FollowSnapshots(ctx context.Context, brokers []string, names bus.Names, log *slog.Logger) (*SnapshotLevels, error) {
	if log == nil {
		log = slog.Default()
	}
	names = names.OrDefault()
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{names.Snapshots: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(int32(bus.SnapshotMaxBytes)),
		kgo.FetchMaxPartitionBytes(int32(bus.SnapshotMaxBytes)),
	)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	s := &SnapshotLevels{cl: cl, log: log, parts: map[string]*snapshotPart{}, cancel: cancel, done: make(chan struct{})}
	go s.run(rctx)
	return s, nil
}

// Close stops following.
func (s *SnapshotLevels) Close() {
	s.cancel()
	<-s.done
	s.cl.Close()
}

func (s *SnapshotLevels) run(ctx context.Context) {
	defer close(s.done)
	for {
		fs := s.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachRecord(func(r *kgo.Record) {
			s.mu.Lock()
			p := s.parts[string(r.Key)]
			if p == nil {
				p = &snapshotPart{}
				s.parts[string(r.Key)] = p
			}
			p.raw = r.Value
			s.mu.Unlock()
		})
	}
}

// newest restores every partition's snapshot not yet decoded and returns
// the newest that holds scope, with its time (nil when none does). A scope
// lives on one partition; if two snapshots know it (the scope moved after
// a repartition) the newer wins. The caller holds s.mu.
func (s *SnapshotLevels) newest(scope string) (*ledger.Ledger, int64) {
	var best *ledger.Ledger
	var bestAt int64
	for _, p := range s.parts {
		p.restore(s.log)
		if p.l != nil && p.l.HasScope(scope) && (best == nil || p.lAtMs > bestAt) {
			best, bestAt = p.l, p.lAtMs
		}
	}
	return best, bestAt
}

// Levels implements LevelSource. A scope lives on one partition; if two
// snapshots know it (the scope moved after a repartition) the newer wins.
func (s *SnapshotLevels) Levels(scope, level, id string, atMs int64) ([]ledger.BucketLevel, int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, bestAt := s.newest(scope)
	if best == nil {
		return nil, 0, false
	}
	lv, _ := best.Levels(scope, level, id, atMs)
	return lv, bestAt, true
}

// Learned implements LearnedSource: the capacities the newest snapshot
// holding scope learned from the provider (ledger/learn.go).
func (s *SnapshotLevels) Learned(scope string) ([]ledger.LearnedBucket, int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, bestAt := s.newest(scope)
	if best == nil {
		return nil, 0, false
	}
	var out []ledger.LearnedBucket
	for _, lb := range best.LearnedBuckets() {
		if lb.Scope == scope {
			out = append(out, lb)
		}
	}
	return out, bestAt, true
}
