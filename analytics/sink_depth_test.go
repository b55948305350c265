package analytics

import (
	"context"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/schemas"
)

// gatedInserter blocks a batch whose first offset has a gate until the
// gate closes, and says on inserted when a batch is in.
type gatedInserter struct {
	mu       sync.Mutex
	gates    map[int64]chan struct{}
	inserted chan int64
	rows     int
}

func (g *gatedInserter) insert(ctx context.Context, rows []pending) error {
	off := rows[0].rec.Offset
	g.mu.Lock()
	gate := g.gates[off]
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	g.mu.Lock()
	g.rows += len(rows)
	g.mu.Unlock()
	g.inserted <- off
	return nil
}

func addOffsets(t *testing.T, s *sink, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		b, err := schemas.Encode(sampleEvent(schemas.TypeTick, 1))
		if err != nil {
			t.Fatal(err)
		}
		s.addLocked(&kgo.Record{Topic: "a", Offset: int64(i), Value: b})
	}
}

// TestTwoInsertsCommitInPollOrder: with two batches inserting at once,
// the second one in ClickHouse first still commits after the first.
func TestTwoInsertsCommitInPollOrder(t *testing.T) {
	gate := make(chan struct{})
	g0 := &gatedInserter{gates: map[int64]chan struct{}{0: gate}, inserted: make(chan int64, 4)}
	g1 := &gatedInserter{inserted: make(chan int64, 4)}
	s, fc := testSink(t, g0, context.Background())
	s.extra = []inserter{g1}
	s.mu.Lock()
	defer s.mu.Unlock()
	addOffsets(t, s, 0, 4)
	if err := s.handOffLocked(context.Background()); err != nil {
		t.Fatal(err)
	}
	addOffsets(t, s, 4, 4)
	if err := s.handOffLocked(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(s.inflight) != 2 || s.inflight[0].slot == s.inflight[1].slot {
		t.Fatalf("%d batches in flight, want 2 on two inserters", len(s.inflight))
	}
	if off := <-g1.inserted; off != 4 {
		t.Fatalf("second inserter got offset %d", off)
	}
	close(gate) // the first batch is inserted after the second
	if err := s.flushLocked(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if len(fc.recs) != 8 {
		t.Fatalf("%d commits, want 8", len(fc.recs))
	}
	for i, r := range fc.recs {
		if r.Offset != int64(i) {
			t.Fatalf("commit %d has offset %d: commits out of poll order", i, r.Offset)
		}
	}
}

// TestFailedBatchTakesLaterOneBack: when the older of two batches in
// flight is given up, the newer one, inserted, is not committed either;
// both go back to the buffer in poll order.
func TestFailedBatchTakesLaterOneBack(t *testing.T) {
	bad := &fakeInserter{failures: 1 << 30}
	good := &gatedInserter{inserted: make(chan int64, 4)}
	s, fc := testSink(t, bad, context.Background())
	s.extra = []inserter{good}
	s.mu.Lock()
	addOffsets(t, s, 0, 3)
	if err := s.handOffLocked(context.Background()); err != nil {
		t.Fatal(err)
	}
	addOffsets(t, s, 3, 2)
	if err := s.handOffLocked(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-good.inserted
	s.mu.Unlock()
	s.onLost(context.Background(), nil, map[string][]int32{"b": {0}})
	if len(fc.recs) != 0 || len(s.inflight) != 0 || len(s.buf) != 5 {
		t.Fatalf("commits %d inflight %d buf %d", len(fc.recs), len(s.inflight), len(s.buf))
	}
	for i, p := range s.buf {
		if p.rec.Offset != int64(i) {
			t.Fatalf("buffer %d holds offset %d: out of poll order", i, p.rec.Offset)
		}
	}
}
