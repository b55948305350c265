//go:build integration

package ledgerd_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// TestTakeoverFromPlainSnapshots is a rolling upgrade on the real broker:
// ledger-old writes its snapshots plain (--snapshot-plain, the format of
// every ledger before the gzipped one) under steady load and is killed
// with SIGKILL; ledger-new, at the default gzipped format, takes over
// every partition from those snapshots. Every request has exactly one
// terminal decision, the partitions' newest snapshots are then gzipped
// and restore, and replay reproduces every decision, from the log start
// and from the newest (gzipped) snapshots. Both members snapshot every
// second (--snapshot-interval 1s), not at the defaults: at this load the
// default 10,000 events or 30 s would leave the takeover no snapshot to
// read, which is what the test is about.
func TestTakeoverFromPlainSnapshots(t *testing.T) {
	r := newRig(t, 4)
	old := r.ledger("ledger-old", "--snapshot-plain", "--snapshot-interval", "1s")

	actx, stopAudit := context.WithCancel(context.Background())
	defer stopAudit()
	go r.audit(actx)
	lctx, stopLoad := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.load(lctx, 240, 8); close(done) }()

	plain := []byte("sluice-ledger-v1\n")
	gz := []byte{0x1f, 0x8b}
	newest := func(p int32) *schemas.Snapshot {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := ledgerd.LatestSnapshot(ctx, r.brokers, r.names, p)
		if err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
		return s
	}
	// Every partition has a plain snapshot of the old member's before it
	// dies.
	awaitFormat := func(prefix []byte, after map[int32]int64, within time.Duration) map[int32]int64 {
		t.Helper()
		at := map[int32]int64{}
		deadline := time.Now().Add(within)
		for p := int32(0); p < 4; p++ {
			for {
				s := newest(p)
				if s != nil && bytes.HasPrefix(s.State, prefix) && s.InputOffset > after[p] {
					if _, err := ledger.Restore(s.State); err != nil {
						t.Fatalf("partition %d: snapshot at input offset %d does not restore: %v", p, s.InputOffset, err)
					}
					at[p] = s.InputOffset
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("partition %d: no snapshot beginning %q past input offset %d within %v (newest: %+v)", p, prefix, after[p], within, s != nil)
				}
				time.Sleep(250 * time.Millisecond)
			}
		}
		return at
	}
	plainAt := awaitFormat(plain, nil, 30*time.Second)
	if err := old.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	r.ledger("ledger-new", "--snapshot-interval", "1s")
	// The group gives the dead member's partitions to the new one after
	// its session timeout (6 s); then it rebuilds them from the plain
	// snapshots and writes gzipped ones.
	awaitFormat(gz, plainAt, 45*time.Second)
	stopLoad()
	<-done
	r.settle(45 * time.Second)
	stopAudit()
	r.check()

	r.mu.Lock()
	rebuilt := 0
	for _, p := range r.logs["ledger-new"] {
		raw, _ := os.ReadFile(p)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.Contains(line, "partition caught up") {
				t.Logf("ledger-new: %s", line)
				if strings.Contains(line, "snapshot=true") {
					rebuilt++
				}
			}
		}
	}
	r.mu.Unlock()
	if rebuilt < 4 {
		t.Errorf("ledger-new caught up %d partitions from a snapshot, want all 4", rebuilt)
	}
	r.verifyReplay()
	if out, err := r.replay("--from-snapshot"); err != nil || !strings.Contains(out, "no divergence") {
		t.Errorf("replay --verify --from-snapshot over gzipped snapshots: %v\n%s", err, out)
	}
}
