package ledgerd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestLatestSnapshotReadsBackwards: the newest snapshot of a partition is
// found wherever it lies in the snapshots topic (here far behind the first
// backward window, with a newer one of another partition at the very end),
// an older snapshot of the same partition never wins, and a partition
// without one gets none.
func TestLatestSnapshotReadsBackwards(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rig := newKfakeRig(t, ctx, "snaptest.", 4, "", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	brokers, names, cl := rig.brokers, rig.names, rig.cl
	// Offsets 0–9: old snapshots of partition 3; offset 10: its newest;
	// then 1,000 snapshots of partitions 0–2 (input offsets = record index).
	snap := func(p int32, in int64) *kgo.Record {
		ev := eventid.New(schemas.TypeSnapshot, in)
		ev.Snapshot = &schemas.Snapshot{Partition: p, InputOffset: in}
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: names.Snapshots, Partition: 0, Key: SnapshotKey(p), Value: b}
	}
	var recs []*kgo.Record
	for i := range 11 {
		recs = append(recs, snap(3, int64(i)))
	}
	for i := range 1000 {
		recs = append(recs, snap(int32(i%3), int64(11+i)))
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		p    int32
		want int64 // input offset of the newest snapshot; -1: none
	}{{3, 10}, {0, 11 + 999}, {1, 11 + 997}, {2, 11 + 998}, {7, -1}} {
		got, err := LatestSnapshot(ctx, brokers, names, tt.p)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case tt.want < 0 && got != nil:
			t.Errorf("partition %d: snapshot at input offset %d, want none", tt.p, got.InputOffset)
		case tt.want >= 0 && (got == nil || got.InputOffset != tt.want):
			t.Errorf("partition %d: %+v, want input offset %d", tt.p, got, tt.want)
		}
	}
}

// TestSnapshotsOffTheLoop: snapshots encoded off the member's loop are
// committed, gzipped or (SnapshotPlain) plain, and a partition restored
// from the newest one and the log after it is, byte for byte, the
// partition replayed from the start of the log: a ledger takes over from
// the plain snapshots of one that predates the gzipped format, and from
// the gzipped ones of its own version.
func TestSnapshotsOffTheLoop(t *testing.T) {
	for _, tt := range []struct {
		name   string
		plain  bool
		prefix []byte // how the committed state must begin
	}{
		{"gzipped", false, []byte{0x1f, 0x8b}},
		{"plain", true, []byte("sluice-ledger-v1\n")},
	} {
		t.Run(tt.name, func(t *testing.T) { snapshotsOffTheLoop(t, tt.plain, tt.prefix) })
	}
}

func snapshotsOffTheLoop(t *testing.T, plain bool, prefix []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rig := newKfakeRig(t, ctx, "snapasync.", 1, benchLedgerConfig, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := New(ctx, Config{Brokers: rig.brokers, Topics: rig.names, Group: "snapasync", Node: "n1", Log: quiet,
		Registerer: prometheus.NewRegistry(), SnapshotEvery: 50, SnapshotInterval: time.Hour, SnapshotPlain: plain})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = svc.Loop(lctx) }()
	defer func() { stop(); wg.Wait(); svc.Close() }()
	for round := range 6 { // several rounds, so that several snapshots are due
		var recs []*kgo.Record
		for i := range 100 {
			b, err := schemas.Encode(benchReserve(fmt.Sprintf("r-%d-%d", round, i)))
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Topic: rig.names.Requests, Partition: 0, Value: b})
		}
		if err := rig.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, end, err := offsetRange(ctx, rig.brokers, rig.names.Requests, 0)
	if err != nil {
		t.Fatal(err)
	}
	var snap *schemas.Snapshot
	for ctx.Err() == nil {
		if snap, err = LatestSnapshot(ctx, rig.brokers, rig.names, 0); err != nil {
			t.Fatal(err)
		}
		if snap != nil && snap.InputOffset >= end-100 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if snap == nil || snap.InputOffset < end-100 {
		t.Fatalf("no snapshot within 100 inputs of the log's end %d: %+v", end, snap)
	}
	if !bytes.HasPrefix(snap.State, prefix) {
		t.Fatalf("snapshot state begins %q, want %q", snap.State[:min(len(snap.State), 20)], prefix)
	}
	// The snapshot carries its state's log time (D7: it was always 0, so
	// /v1/sluice/usage never had an observed_at_ms).
	at, err := ledger.Restore(snap.State)
	if err != nil {
		t.Fatal(err)
	}
	if snap.LogTimeMs <= 0 || at.NowMs() != snap.LogTimeMs {
		t.Fatalf("snapshot log_time_ms %d, its state's clock %d: want them equal and positive", snap.LogTimeMs, at.NowMs())
	}
	restored, err := catchUp(ctx, rig.brokers, rig.names, 0, end, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if restored.replayed >= int(end) {
		t.Fatalf("the restore replayed %d of %d inputs: it used no snapshot", restored.replayed, end)
	}
	full := ledger.New(0, ledger.Config{})
	var ev schemas.Event
	err = ReadPartition(ctx, rig.brokers, rig.names.Requests, 0, kgo.NewOffset().AtStart(), end, func(r *kgo.Record) error {
		_ = decodeInput(r.Value, &ev)
		full.Apply(r.Timestamp.UnixMilli(), r.Offset, &ev, nil)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := restored.l.MarshalSnapshot()
	b, _ := full.MarshalSnapshot()
	if !bytes.Equal(a, b) {
		t.Fatalf("restored from the snapshot at input offset %d (+%d replayed) differs from the full replay of %d inputs", snap.InputOffset, restored.replayed, end)
	}
}

// TestGzipSnapshotRoundTrip: gzipSnapshot's output is what ledger.Restore
// reads (it inflates with the standard library what klauspost's encoder
// wrote) and restores to the frozen state, and on a busy partition it is a
// small part of the plain state.
func TestGzipSnapshotRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 2000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			plain, err := heldPartition(t, n).Freeze().Marshal()
			if err != nil {
				t.Fatal(err)
			}
			gz, err := gzipSnapshot(plain)
			if err != nil {
				t.Fatal(err)
			}
			if n >= 2000 && len(gz)*10 > len(plain) {
				t.Errorf("%d reservations: gzipped %d of %d bytes, want at least 10 times smaller", n, len(gz), len(plain))
			}
			r, err := ledger.Restore(gz)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := r.MarshalSnapshot(); !bytes.Equal(got, plain) {
				t.Fatalf("%d reservations: the gzipped snapshot restores to another state", n)
			}
		})
	}
}

// heldPartition is a partition's ledger holding n granted reservations,
// unreconciled, as a busy partition snapshots it.
func heldPartition(tb testing.TB, n int) *ledger.Ledger {
	tb.Helper()
	cfg, err := ledger.ParseConfig([]byte(benchLedgerConfig))
	if err != nil {
		tb.Fatal(err)
	}
	l := ledger.New(0, cfg)
	for i := range n {
		ev := benchReserve(fmt.Sprintf("r-%d", i))
		if out := l.Apply(1_000_000+int64(i/10), int64(i), ev, nil); len(out) != 1 || out[0].Decision.Status != schemas.StatusGranted {
			tb.Fatalf("reserve %d not granted: %+v", i, out)
		}
	}
	return l
}

// BenchmarkGzipSnapshot is what gzipping a busy partition's snapshot
// (6,000 reservations held) costs the encoding goroutine, and how small it
// gets (bytes/snapshot, against plain_bytes).
func BenchmarkGzipSnapshot(b *testing.B) {
	plain, err := heldPartition(b, 6000).Freeze().Marshal()
	if err != nil {
		b.Fatal(err)
	}
	var gz []byte
	b.ReportAllocs()
	for b.Loop() {
		if gz, err = gzipSnapshot(plain); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(plain)), "plain_bytes")
	b.ReportMetric(float64(len(gz)), "bytes/snapshot")
}
