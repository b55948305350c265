package ledger

import (
	"bytes"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// livenessConfig: two concurrency units in the scope and a 1 s liveness
// bound (ticks due every 250 ms while nodes are tracked; a
// silence of the whole partition over 500 ms is a log stall).
func livenessConfig() Config {
	cfg := testConfig(BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 2})
	cfg.NodeLivenessMs = 1000
	return cfg
}

func onNode(node string) reqOpt { return func(ev *schemas.Event) { ev.Node = node } }

func wakeAt(want int64) func(*testing.T, *Ledger, []Output) {
	return func(t *testing.T, l *Ledger, _ []Output) {
		t.Helper()
		if got, ok := l.NextWakeMs(); !ok || got != want {
			t.Fatalf("NextWakeMs = %d, %v; want %d", got, ok, want)
		}
	}
}

func TestNodeLostReturnsItsHolds(t *testing.T) {
	runSteps(t, livenessConfig(), []step{
		{At: 0, Ev: heartbeat("gw1"), Check: wakeAt(250)},
		{At: 0, Ev: reserve("a", onNode("gw1")), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("b", onNode("gw1"), streaming()), Want: []string{"b/1 granted admitted"}},
		{At: 0, Ev: reserve("c", onNode("gw2"), class("batch")), Want: []string{"c/1 queued capacity queued"}},
		{At: 0, Ev: heartbeat("gw2")},
		{At: 250, Ev: tick(), Check: wakeAt(500)},
		{At: 500, Ev: heartbeat("gw2")},
		{At: 750, Ev: tick(), Check: wakeAt(1000)}, // gw1's deadline
		{At: 999, Ev: tick()},
		// gw1 was silent for the bound: both its grants come back and the
		// waiter of gw2 (still heartbeating) gets one.
		{At: 1000, Ev: tick(), Want: []string{
			"a/1 hold_expired node_lost admitted",
			"b/1 hold_expired node_lost admitted",
			"c/1 granted queued_then_admitted",
		}, Check: func(t *testing.T, l *Ledger, _ []Output) {
			if s := l.Stats(); s.NodeLost != 2 || s.NodesLost != 1 {
				t.Fatalf("stats %+v, want 2 reservations of 1 node lost", s)
			}
			if len(l.st.Live) != 1 || l.st.Live[0].Node != "gw2" {
				t.Fatalf("live nodes %+v, want only gw2", l.st.Live)
			}
		}},
		// gw1's late reports change nothing; its capacity is free.
		{At: 1001, Ev: reconcile("a", 10, 10)},
		{At: 1001, Ev: reserve("d", onNode("gw3")), Want: []string{"d/1 granted admitted"}},
	})
}

func TestNodeLostDropsItsQueuedReservations(t *testing.T) {
	runSteps(t, livenessConfig(), []step{
		{At: 0, Ev: heartbeat("gw1")},
		{At: 0, Ev: heartbeat("gw2")},
		{At: 0, Ev: reserve("a", onNode("gw2")), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("b", onNode("gw2")), Want: []string{"b/1 granted admitted"}},
		{At: 0, Ev: reserve("c", onNode("gw1"), class("batch")), Want: []string{"c/1 queued capacity queued"}},
		{At: 400, Ev: heartbeat("gw2")},
		{At: 800, Ev: heartbeat("gw2")},
		// The dead gateway's waiter would otherwise be granted later and
		// held until the hold TTL by nobody.
		{At: 1000, Ev: tick(), Want: []string{"c/1 expired node_lost queued_then_expired"}},
		{At: 1100, Ev: reconcile("a", 1, 1)},
		{At: 1100, Ev: reserve("d", onNode("gw2")), Want: []string{"d/1 granted admitted"}},
	})
}

func TestHeartbeatInTimeKeepsHolds(t *testing.T) {
	steps := []step{
		{At: 0, Ev: heartbeat("gw1")},
		{At: 0, Ev: reserve("a", onNode("gw1")), Want: []string{"a/1 granted admitted"}},
		{At: 0, Ev: reserve("b", onNode("gw1")), Want: []string{"b/1 granted admitted"}},
	}
	for at := int64(400); at <= 4000; at += 400 {
		steps = append(steps, step{At: at, Ev: heartbeat("gw1")}, step{At: at + 200, Ev: tick()})
	}
	steps = append(steps,
		// The holds are kept: nothing is free for another node.
		step{At: 4300, Ev: reserve("c", onNode("gw2"), maxWait(10)), Want: []string{"c/1 queued capacity queued"}},
		// Heartbeats stop: lost one bound after the last one.
		step{At: 4450, Ev: tick(), Want: []string{"c/1 expired max_wait_exceeded queued_then_expired"}},
		step{At: 4700, Ev: tick()},
		step{At: 4999, Ev: tick()},
		step{At: 5000, Ev: tick(), Want: []string{"a/1 hold_expired node_lost admitted", "b/1 hold_expired node_lost admitted"}},
	)
	runSteps(t, livenessConfig(), steps)
}

// TestNodeWithoutHeartbeatKeepsTheHoldTTL: liveness applies only to nodes
// that have heartbeated; an older gateway keeps the hold TTL.
func TestNodeWithoutHeartbeatKeepsTheHoldTTL(t *testing.T) {
	cfg := livenessConfig()
	cfg.HoldTTLMs = 5000
	steps := []step{
		{At: 0, Ev: heartbeat("gw2")},
		{At: 0, Ev: reserve("a", onNode("gw-old")), Want: []string{"a/1 granted admitted"}},
	}
	for at := int64(250); at < 5000; at += 250 {
		steps = append(steps, step{At: at, Ev: tick()})
	}
	steps = append(steps, step{At: 5000, Ev: tick(), Want: []string{"a/1 hold_expired hold_ttl_abandoned admitted"}})
	runSteps(t, cfg, steps)
}

// TestLogStallIsNotNodeLoss: when the whole partition is silent (broker
// down), nobody could heartbeat; the silence does not count against the
// nodes, which keep their grants for a bound after the log resumes.
func TestLogStallIsNotNodeLoss(t *testing.T) {
	runSteps(t, livenessConfig(), []step{
		{At: 0, Ev: heartbeat("gw1")},
		{At: 0, Ev: reserve("a", onNode("gw1")), Want: []string{"a/1 granted admitted"}},
		{At: 200, Ev: tick()},
		// 30 s without a record, then the log resumes.
		{At: 30_200, Ev: tick(), Check: wakeAt(30_450)},
		{At: 30_450, Ev: heartbeat("gw1")},
		{At: 30_700, Ev: tick()},
		{At: 30_950, Ev: tick()},
		{At: 31_200, Ev: tick()},
		{At: 31_449, Ev: tick()},
		{At: 31_450, Ev: tick(), Want: []string{"a/1 hold_expired node_lost admitted"}},
	})
}

// TestLivenessReplayAndRestore: the same log gives byte-identical decisions,
// and a snapshot taken while nodes are tracked restores to a ledger that
// continues identically (the liveness clock is in the snapshot).
func TestLivenessReplayAndRestore(t *testing.T) {
	log := []simRecord{
		{0, heartbeat("gw1")},
		{0, heartbeat("gw2")},
		{0, reserve("a", onNode("gw1"))},
		{0, reserve("b", onNode("gw2"))},
		{0, reserve("c", onNode("gw2"), class("batch"))},
		{300, heartbeat("gw2")},
		{600, heartbeat("gw2")},
		{900, heartbeat("gw2")},
		{1000, tick()},
		{1200, heartbeat("gw2")},
		{1500, tick()},
		{1800, tick()},
		{2100, tick()},
		{2200, tick()},
	}
	cfg := livenessConfig()
	first := runLog(t, New(0, cfg), log, 0, nil)
	if len(first) != 7 { // 3 answers, a node_lost, c granted, b and c node_lost
		t.Fatalf("%d decisions, want 7", len(first))
	}
	again := runLog(t, New(0, cfg), log, 0, nil)
	for i := range first {
		if !bytes.Equal(first[i], again[i]) {
			t.Fatalf("replay decision %d differs:\n%s\n%s", i, first[i], again[i])
		}
	}
	for cut := 1; cut < len(log); cut++ {
		l1 := New(0, cfg)
		head := runLog(t, l1, log[:cut], 0, nil)
		snap, err := l1.MarshalSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		l2, err := Restore(snap)
		if err != nil {
			t.Fatalf("cut %d: restore: %v", cut, err)
		}
		w1, ok1 := l1.NextWakeMs()
		if w2, ok2 := l2.NextWakeMs(); w1 != w2 || ok1 != ok2 {
			t.Fatalf("cut %d: restored NextWakeMs %d %v, want %d %v", cut, w2, ok2, w1, ok1)
		}
		got := append(head, runLog(t, l2, log, cut, nil)...)
		if len(got) != len(first) {
			t.Fatalf("cut %d: %d decisions, want %d", cut, len(got), len(first))
		}
		for i := range first {
			if !bytes.Equal(first[i], got[i]) {
				t.Fatalf("cut %d: decision %d differs:\n%s\n%s", cut, i, got[i], first[i])
			}
		}
	}
}

func TestNodeLivenessValidated(t *testing.T) {
	cfg := livenessConfig()
	cfg.NodeLivenessMs = 500
	if err := cfg.Validate(); err == nil {
		t.Fatal("node_liveness_ms 500 accepted")
	}
	c := Config{Scopes: []ScopeConfig{{Name: "s"}}}
	c.fillDefaults()
	if c.NodeLivenessMs != 5_000 {
		t.Fatalf("default node_liveness_ms %d, want 5000", c.NodeLivenessMs)
	}
}
