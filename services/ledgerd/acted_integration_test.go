//go:build integration

package ledgerd_test

import (
	"bytes"
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// acted is what a gateway acted on: every decision read as soon as it was
// produced (read_uncommitted), copies dropped as admission/reserve does.
type acted struct {
	mu    sync.Mutex
	raw   map[string][]byte    // by decision id
	at    map[string]time.Time // when it was acted on
	grant map[string]int       // grants acted on, by request id
}

// actOn reads every decisions partition read_uncommitted like a gateway,
// drops copies with reserve.Dedup and reconciles each grant it acts on.
func (r *rig) actOn(ctx context.Context, a *acted) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.ConsumeTopics(r.names.Decisions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		r.t.Error(err)
		return
	}
	defer cl.Close()
	dedup := map[int32]*reserve.Dedup{} // one per decisions partition, as each gateway reads its own
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(rec.Value, &ev) != nil || ev.Decision == nil {
				return
			}
			dd := dedup[rec.Partition]
			if dd == nil {
				dd = reserve.NewDedup()
				dedup[rec.Partition] = dd
			}
			if !dd.First(&ev) {
				return
			}
			a.mu.Lock()
			if _, dup := a.raw[ev.ID]; dup {
				r.t.Errorf("acted twice on decision %s", ev.ID)
			}
			a.raw[ev.ID] = bytes.Clone(rec.Value)
			a.at[ev.ID] = time.Now()
			if ev.Decision.Status == schemas.StatusGranted {
				a.grant[ev.RequestID]++
			}
			a.mu.Unlock()
			if ev.Decision.Status == schemas.StatusGranted {
				rc := ev
				rc.Type, rc.ID, rc.Decision = schemas.TypeReconciled, eventid.NewID(), nil
				rc.Reconciled = &schemas.Reconciled{InputTokens: 10, OutputTokens: 10, HTTPStatus: 200}
				go func() { _ = r.produce(context.Background(), &rc) }()
			}
		})
	}
}

// TestKillBetweenProduceAndCommit: under load, the ledger that commits
// every 3 s is killed -9 while decisions it produced, and a gateway acted
// on, are not committed yet. The other member takes over and re-derives
// them. An auditor over both logs finds that every decision acted on is
// the one the next owner committed, byte for byte, that each committed
// decision is committed once, and that no request was granted twice.
func TestKillBetweenProduceAndCommit(t *testing.T) {
	r := newRig(t, 4)
	r.gatewayActs = true
	a := r.ledger("ledger-a", "--commit-interval", "3s")
	r.ledger("ledger-b")

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	act := &acted{raw: map[string][]byte{}, at: map[string]time.Time{}, grant: map[string]int{}}
	go r.actOn(ctx, act)
	go r.audit(ctx)

	lctx, stopLoad := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.load(lctx, 240, 8); close(done) }()
	time.Sleep(4 * time.Second)

	// Kill once acted-on decisions are not committed (50 of them, or
	// whatever there is after 20 s): the kill lands between producing a
	// round's decisions and committing them.
	var exposed []string
	for deadline := time.Now().Add(20 * time.Second); len(exposed) < 50 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		exposed = r.uncommitted(act)
	}
	if len(exposed) == 0 {
		t.Fatal("no acted-on decision was ever uncommitted: the kill could not land between produce and commit")
	}
	if err := a.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Second)
	stopLoad()
	<-done
	r.settle(45 * time.Second)
	time.Sleep(time.Second) // the last acted-on decisions' commits
	stop()
	r.check()

	r.mu.Lock()
	committed := map[string][][]byte{}
	grants := map[string]int{}
	for _, d := range r.decisions {
		b, err := schemas.Encode(&d.ev)
		if err != nil {
			t.Fatal(err)
		}
		committed[d.ev.ID] = append(committed[d.ev.ID], b)
		if d.ev.Decision.Status == schemas.StatusGranted {
			grants[d.ev.RequestID]++
		}
	}
	r.mu.Unlock()
	act.mu.Lock()
	defer act.mu.Unlock()
	differ := 0
	for id, raw := range act.raw {
		var ev schemas.Event
		if err := schemas.Decode(raw, &ev); err != nil {
			t.Fatal(err)
		}
		b, _ := schemas.Encode(&ev)
		switch c := committed[id]; {
		case len(c) == 0:
			differ++
			if differ <= 5 {
				t.Errorf("acted on %s, which the next owner never committed", id)
			}
		case !bytes.Equal(c[0], b):
			differ++
			if differ <= 5 {
				t.Errorf("acted on %s:\n %s\nthe committed one:\n %s", id, b, c[0])
			}
		}
	}
	for id, c := range committed {
		if len(c) > 1 {
			t.Errorf("decision %s committed %d times", id, len(c))
		}
	}
	for req, n := range grants {
		if n > 1 {
			t.Errorf("request %s granted %d times in the committed log", req, n)
		}
	}
	for req, n := range act.grant {
		if n > 1 {
			t.Errorf("gateway acted on %d grants of request %s", n, req)
		}
	}
	t.Logf("acted on %d decisions (%d uncommitted at the kill), committed %d; differing %d", len(act.raw), len(exposed), len(committed), differ)
}

// uncommitted lists decisions acted on more than a second ago that the
// committed auditor has not seen yet: ledger-b commits every 100 ms, so
// they are ledger-a's, in its open transaction.
func (r *rig) uncommitted(a *acted) []string {
	r.mu.Lock()
	seen := make(map[string]bool, len(r.decisions))
	for _, d := range r.decisions {
		seen[d.ev.ID] = true
	}
	r.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for id := range a.raw {
		if !seen[id] && time.Since(a.at[id]) > time.Second {
			out = append(out, id)
		}
	}
	return out
}
