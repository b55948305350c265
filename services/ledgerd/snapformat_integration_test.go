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
// every loaded partition from those snapshots. Every request has exactly one
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
	go func() { r.load(lctx, 240, 16); close(done) }()

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
	// The partitions the load reaches (the scopes hash onto some of the
	// four; a member rebuilds a partition when it has inputs to decide):
	// those with a committed decision within 30 s.
	var loaded []int32
	for deadline := time.Now().Add(30 * time.Second); len(loaded) < 4 && time.Now().Before(deadline); time.Sleep(time.Second) {
		loaded = loaded[:0]
		seen := map[int32]bool{}
		r.mu.Lock()
		for _, d := range r.decisions {
			if !seen[d.partition] {
				seen[d.partition] = true
				loaded = append(loaded, d.partition)
			}
		}
		r.mu.Unlock()
	}
	if len(loaded) < 3 {
		t.Fatalf("the load reached partitions %v of 4 in 30 s: want at least 3", loaded)
	}
	// Every such partition has a plain snapshot of the old member's before
	// it dies.
	awaitFormat := func(prefix []byte, after map[int32]int64, within time.Duration) map[int32]int64 {
		t.Helper()
		at := map[int32]int64{}
		deadline := time.Now().Add(within)
		for _, p := range loaded {
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

	// ledger-new rebuilt every loaded partition, and never failed to:
	// catch-up restores the newest snapshot when there is one, here the
	// old member's plain one, and retries while it does not restore.
	r.mu.Lock()
	rebuilt, failed := 0, 0
	for _, p := range r.logs["ledger-new"] {
		raw, _ := os.ReadFile(p)
		for _, line := range strings.Split(string(raw), "\n") {
			switch {
			case strings.Contains(line, "partition rebuilt"):
				rebuilt++
				t.Logf("ledger-new: %s", line)
			case strings.Contains(line, "catch up failed"):
				failed++
				t.Logf("ledger-new: %s", line)
			}
		}
	}
	r.mu.Unlock()
	if rebuilt < len(loaded) || failed > 0 {
		t.Errorf("ledger-new rebuilt %d partitions and failed %d catch-ups: want the %d the load reached, and none failed", rebuilt, failed, len(loaded))
	}
	r.verifyReplay()
	if out, err := r.replay("--from-snapshot"); err != nil || !strings.Contains(out, "no divergence") {
		t.Errorf("replay --verify --from-snapshot over gzipped snapshots: %v\n%s", err, out)
	}
}
