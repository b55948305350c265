package ledgerd

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/schemas"
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
		ev := schemas.New(schemas.TypeSnapshot, in)
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
