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
// snapshot, restored when the levels are first read after it arrived (a
// ledger snapshots far more often than callers ask for their usage, and
// restoring every snapshot on arrival was 5 % of a busy gateway's CPU), so
// that a bucket's level can be read as the ledger last wrote it down. This is an observation, not the ledger's live state:
// it is as old as the newest snapshot (see UsageStaleness), which is the
// price of keeping the gateway off the single writer's path.
type SnapshotLevels struct {
	cl  *kgo.Client
	log *slog.Logger

	mu    sync.Mutex
	parts map[int32]*snapshotPart

	cancel context.CancelFunc
	done   chan struct{}
}

// snapshotPart is one partition's newest snapshot.
type snapshotPart struct {
	atMs  int64  // the newest snapshot's log time
	state []byte // the newest snapshot's state, until restored
	l     *ledger.Ledger
	lAtMs int64 // the log time of l's snapshot
}

// restore restores the pending state, if any; a state that does not
// restore keeps the previous one.
func (p *snapshotPart) restore(partition int32, log *slog.Logger) {
	if p.state == nil {
		return
	}
	l, err := ledger.Restore(p.state)
	p.state = nil
	if err != nil {
		log.Warn("usage: snapshot not restorable; keeping the previous one", "partition", partition, "err", err)
		return
	}
	p.l, p.lAtMs = l, p.atMs
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
	s := &SnapshotLevels{cl: cl, log: log, parts: map[int32]*snapshotPart{}, cancel: cancel, done: make(chan struct{})}
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
			s.mu.Lock()
			p := s.parts[ev.Snapshot.Partition]
			if p == nil {
				p = &snapshotPart{}
				s.parts[ev.Snapshot.Partition] = p
			}
			if ev.Snapshot.LogTimeMs >= p.atMs {
				p.atMs, p.state = ev.Snapshot.LogTimeMs, ev.Snapshot.State
			}
			s.mu.Unlock()
		})
	}
}

// Levels implements LevelSource. A scope lives on one partition; if two
// snapshots know it (the scope moved after a repartition) the newer wins.
func (s *SnapshotLevels) Levels(scope, level, id string, atMs int64) ([]ledger.BucketLevel, int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *ledger.Ledger
	var bestAt int64
	for i, p := range s.parts {
		p.restore(i, s.log)
		if p.l != nil && p.l.HasScope(scope) && (best == nil || p.lAtMs > bestAt) {
			best, bestAt = p.l, p.lAtMs
		}
	}
	if best == nil {
		return nil, 0, false
	}
	lv, _ := best.Levels(scope, level, id, atMs)
	return lv, bestAt, true
}
