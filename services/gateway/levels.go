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
// snapshot restored, so that a bucket's level can be read as the ledger
// last wrote it down. This is an observation, not the ledger's live state:
// it is as old as the newest snapshot (see UsageStaleness), which is the
// price of keeping the gateway off the single writer's path.
type SnapshotLevels struct {
	cl  *kgo.Client
	log *slog.Logger

	mu    sync.RWMutex
	parts map[int32]*ledger.Ledger
	atMs  map[int32]int64 // the snapshot's log time

	cancel context.CancelFunc
	done   chan struct{}
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
	s := &SnapshotLevels{cl: cl, log: log, parts: map[int32]*ledger.Ledger{}, atMs: map[int32]int64{}, cancel: cancel, done: make(chan struct{})}
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
			var ev schemas.Event
			if err := schemas.Decode(r.Value, &ev); err != nil || ev.Snapshot == nil {
				return
			}
			l, err := ledger.Restore(ev.Snapshot.State)
			if err != nil {
				s.log.Warn("usage: snapshot not restorable; keeping the previous one", "partition", ev.Snapshot.Partition, "err", err)
				return
			}
			s.mu.Lock()
			if ev.Snapshot.LogTimeMs >= s.atMs[ev.Snapshot.Partition] {
				s.parts[ev.Snapshot.Partition], s.atMs[ev.Snapshot.Partition] = l, ev.Snapshot.LogTimeMs
			}
			s.mu.Unlock()
		})
	}
}

// Levels implements LevelSource. A scope lives on one partition; if two
// snapshots know it (the scope moved after a repartition) the newer wins.
func (s *SnapshotLevels) Levels(scope, level, id string, atMs int64) ([]ledger.BucketLevel, int64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var best *ledger.Ledger
	var bestAt int64
	for p, l := range s.parts {
		if l.HasScope(scope) && (best == nil || s.atMs[p] > bestAt) {
			best, bestAt = l, s.atMs[p]
		}
	}
	if best == nil {
		return nil, 0, false
	}
	lv, _ := best.Levels(scope, level, id, atMs)
	return lv, bestAt, true
}
