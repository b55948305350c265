package ledgerd

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStagesAttributeTheSlowestToCommitsAndSnapshots: of 200 round trips,
// the 2 slowest are in flight during an End and none during the snapshot's
// produce, which only a fast trip overlaps; each End and the first produce
// after it are timed, and so is the snapshot's produce (and its size) of
// the run, not one after it.
func TestStagesAttributeTheSlowestToCommitsAndSnapshots(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tr := newStageTrace()
	var trips []timedTrip
	for i := range 200 {
		id := fmt.Sprintf("r-%d", i)
		sent, took := at(10*i), 1
		if i == 50 || i == 51 { // the slowest: in flight across the End at 505–515 ms
			took = 30
		}
		trips = append(trips, timedTrip{id: id, sent: sent, got: sent.Add(time.Duration(took) * time.Millisecond)})
		tr.byID[id] = &stageTimes{appended: sent, polled: sent, acked: sent}
	}
	tr.committed(at(505), at(515))
	tr.snapshotProduce(at(1000), 91_000, func(*kgo.Record, error) {})(nil, nil) // acknowledged now, after every trip
	tr.snaps[0][1] = at(1000).Add(500 * time.Microsecond)                       // only trip 100 overlaps it
	tr.snaps = append(tr.snaps, [2]time.Time{at(5000), at(5010)})               // after the run: not counted
	tr.snapLen = append(tr.snapLen, 2_000_000)
	tr.firsts = append(tr.firsts, [2]time.Time{at(515), at(522)})
	st := tr.stages(trips)
	if st.SlowestAtCommit != 1 || st.SlowestAtSnapshot != 0 || st.Commits != 1 {
		t.Fatalf("at commit %v, at snapshot %v, commits %d: want 1, 0, 1", st.SlowestAtCommit, st.SlowestAtSnapshot, st.Commits)
	}
	if st.CommitMs != [2]float64{10, 10} || st.FirstProduceMs != [2]float64{7, 7} {
		t.Fatalf("commit %v, first produce %v: want 10 ms and 7 ms", st.CommitMs, st.FirstProduceMs)
	}
	if st.SnapshotMs != [2]float64{0.5, 0.5} || st.SnapshotBytes != [2]int{91_000, 91_000} {
		t.Fatalf("snapshot produce %v ms, %v bytes: want the one in the run, 0.5 ms and 91,000 bytes", st.SnapshotMs, st.SnapshotBytes)
	}
}
