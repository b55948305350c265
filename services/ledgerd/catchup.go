package ledgerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// idleEnd is how long a partition read waits for more records before it
// decides that the rest of the range holds only aborted records (whose
// abort marker lies past the range). Transaction markers are read, so a
// range that ends in one ends at once, and this wait is paid only in that
// rare case; it is long because a read that gives up early silently misses
// records: on the shared 2-core machine, a loaded broker left gaps of
// up to 280 ms between fetches in the middle of a range (the old value,
// 250 ms, truncated such reads). Ranges that do end in aborted records,
// or in records compacted away, pay it once per read. firstFetch is the
// wait for the first records (the client connects and fetches metadata
// first).
const (
	idleEnd    = time.Second
	firstFetch = 10 * time.Second
)

// LatestSnapshot reads sluice.snapshots and returns the newest snapshot of
// requests partition p, or nil if there is none.
func LatestSnapshot(ctx context.Context, brokers []string, names bus.Names, p int32) (*schemas.Snapshot, error) {
	snap, _, err := latestSnapshot(ctx, brokers, names, p)
	return snap, err
}

// latestSnapshot is LatestSnapshot plus the wall time the snapshot was
// written, so a rebuilt partition keeps its snapshot clock instead of
// restarting it.
//
// It reads the snapshots topic backwards, in windows that grow fourfold
// from the end: the active segment of a compacted topic is never
// compacted, so it holds every snapshot of the last segment.ms (7 days by
// default) — at one snapshot per partition every few seconds, far more
// than a rebuild should read. Every partition writes snapshots at about the
// same pace, so the newest one of p is almost always in the first window.
func latestSnapshot(ctx context.Context, brokers []string, names bus.Names, p int32) (*schemas.Snapshot, time.Time, error) {
	start, end, err := offsetRange(ctx, brokers, names.Snapshots, 0)
	if err != nil || end <= start {
		return nil, time.Time{}, err
	}
	key := string(SnapshotKey(p))
	for hi, window := end, int64(snapshotWindow); hi > start; hi, window = max(start, hi-window), window*4 {
		lo := max(start, hi-window)
		var snap *schemas.Snapshot
		var at time.Time
		err := ReadPartition(ctx, brokers, names.Snapshots, 0, kgo.NewOffset().At(lo), hi, func(r *kgo.Record) error {
			if string(r.Key) != key {
				return nil
			}
			var ev schemas.Event
			if err := schemas.Decode(r.Value, &ev); err != nil || ev.Snapshot == nil {
				return nil // a snapshot we cannot read is no snapshot
			}
			snap, at = ev.Snapshot, r.Timestamp
			return nil
		})
		if err != nil || snap != nil {
			return snap, at, err
		}
	}
	return nil, time.Time{}, nil
}

// snapshotWindow is the first backward window of latestSnapshot, in
// records: a few rounds of snapshots of a cluster's partitions.
const snapshotWindow = 64

// offsetRange returns the log start offset and the last stable offset of
// topic/p.
func offsetRange(ctx context.Context, brokers []string, topic string, p int32) (int64, int64, error) {
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("list stable offsets of %s: %w", topic, err)
	}
	s, ok1 := starts.Lookup(topic, p)
	e, ok2 := ends.Lookup(topic, p)
	if !ok1 || !ok2 || s.Err != nil || e.Err != nil {
		return 0, 0, nil // no such partition: no snapshot
	}
	return s.Offset, e.Offset, nil
}

// CatchUp rebuilds partition p's ledger: the newest snapshot, then every
// committed input record from the snapshot's offset up to (not including)
// upto. Decisions re-derived here are discarded: they were already
// published by the member that first applied those records.
func CatchUp(ctx context.Context, brokers []string, names bus.Names, p int32, upto int64, log *slog.Logger) (*ledger.Ledger, error) {
	r, err := catchUp(ctx, brokers, names, p, upto, log)
	return r.l, err
}

// caughtUp is a rebuilt partition and what its snapshot clock needs: how
// many inputs were replayed past the snapshot, and when the snapshot was
// written (zero without one).
type caughtUp struct {
	l          *ledger.Ledger
	replayed   int
	snapshotAt time.Time
}

func catchUp(ctx context.Context, brokers []string, names bus.Names, p int32, upto int64, log *slog.Logger) (caughtUp, error) {
	snap, at, err := latestSnapshot(ctx, brokers, names, p)
	if err != nil {
		return caughtUp{}, err
	}
	res := caughtUp{l: ledger.New(p, ledger.Config{}), snapshotAt: at}
	from := kgo.NewOffset().AtStart()
	if snap != nil {
		if res.l, err = ledger.Restore(snap.State); err != nil {
			return caughtUp{}, fmt.Errorf("restore snapshot at offset %d: %w", snap.InputOffset, err)
		}
		from = kgo.NewOffset().At(snap.InputOffset)
		if snap.InputOffset >= upto {
			return res, nil
		}
	}
	var outs []ledger.Output
	var ev schemas.Event
	l := res.l
	err = ReadPartition(ctx, brokers, names.Requests, p, from, upto, func(r *kgo.Record) error {
		if r.Offset < l.Offset() {
			return nil
		}
		_ = decodeInput(r.Value, &ev) // a bad record is the same no-op here as live
		outs = l.Apply(r.Timestamp.UnixMilli(), r.Offset, &ev, outs[:0])
		res.replayed++
		return nil
	})
	if err != nil {
		return caughtUp{}, err
	}
	log.Info("partition caught up", "partition", p, "snapshot", snap != nil, "replayed", res.replayed, "upto", upto)
	return res, nil
}

// decodeInput decodes an input record of sluice.requests. A record that does
// not decode is applied as a no-op Tick, so that the live loop, catch-up and
// replay all apply exactly the same sequence (and advance the offset past it).
// So is a ConfigChanged whose signature this process does not accept
// (authInput, configauth.go; the error wraps ErrConfigRefused).
func decodeInput(b []byte, ev *schemas.Event) error {
	err := schemas.Decode(b, ev)
	if err == nil {
		err = authInput(ev) // configauth.go
	}
	if err != nil {
		*ev = schemas.Event{V: schemas.Version, Type: schemas.TypeTick, ID: "invalid", Tick: &schemas.Tick{Reason: "invalid"}}
	}
	return err
}

// ReadPartition calls fn for every committed record of topic/p from `from`
// up to (not including) offset upto, or up to the current last stable
// offset when upto < 0. It returns when the range is exhausted.
func ReadPartition(ctx context.Context, brokers []string, topic string, p int32, from kgo.Offset, upto int64, fn func(*kgo.Record) error) error {
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: from}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(50*time.Millisecond),
		// Fetch sizes stay franz-go's (1 MiB of a partition per fetch):
		// the client parses a fetch whole before it hands out a record, so
		// a 16 MiB fetch (≈ 290k compressed events) made `sluice whatif`
		// wait for it instead of decoding the previous one (measured with
		// `sluice bench whatif`: 1 MiB ≈ 2 MiB ≈ 4 MiB, all better than 16).
		// Transaction markers come through (and are skipped below), so
		// that a range ending in one is seen to end, instead of idling
		// idleEnd for records that will never come.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	end, err := readEnd(ctx, cl, topic, p, upto)
	if err != nil {
		return err
	}
	if end <= 0 {
		return nil
	}
	if at := from.EpochOffset().Offset; at >= end {
		return nil // nothing to read (and nothing to wait for)
	}
	return readRange(ctx, cl, topic, p, end, fn)
}

// readEnd is the offset ReadPartition reads up to: the partition's last
// stable offset, or upto if that comes first; -1 when neither is known.
func readEnd(ctx context.Context, cl *kgo.Client, topic string, p int32, upto int64) (int64, error) {
	lso, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("list stable offsets of %s: %w", topic, err)
	}
	end := int64(-1)
	if o, ok := lso.Lookup(topic, p); ok && o.Err == nil {
		end = o.Offset
	}
	if upto >= 0 && (end < 0 || upto < end) {
		end = upto
	}
	return end, nil
}

// readRange polls cl's partition until a record at or past end, or a poll
// that brings nothing (the rest of the range is aborted records only). The
// first poll may wait firstFetch, later ones idleEnd.
func readRange(ctx context.Context, cl *kgo.Client, topic string, p int32, end int64, fn func(*kgo.Record) error) error {
	next := int64(0)
	for next < end {
		wait := idleEnd
		if next == 0 {
			wait = firstFetch
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				ferr = err
			}
		})
		if ferr != nil {
			return fmt.Errorf("read %s/%d: %w", topic, p, ferr)
		}
		got, stop, err := deliverRecords(fs, end, &next, fn)
		if err != nil {
			return err
		}
		if stop || got == 0 {
			// Either we passed the end, or the rest of the range is
			// aborted records only.
			return nil
		}
	}
	return nil
}

// deliverRecords hands fn each data record of fs before end, skipping
// transaction markers, and advances next past every record it saw. got
// counts the records (markers too) before end; stop says end was reached
// or fn failed.
func deliverRecords(fs kgo.Fetches, end int64, next *int64, fn func(*kgo.Record) error) (got int, stop bool, err error) {
	fs.EachRecord(func(r *kgo.Record) {
		if stop || r.Offset >= end {
			stop = true
			return
		}
		got++
		*next = r.Offset + 1
		if r.Attrs.IsControl() {
			return
		}
		if ferr := fn(r); ferr != nil {
			err = ferr
			stop = true
		}
	})
	return got, stop, err
}
