package ledger

import (
	"bytes"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// explainRun applies evs (one per ms from t=1000) through an Explainer of id.
func explainRun(t *testing.T, cfg Config, id string, evs ...*schemas.Event) (*Explanation, []Output) {
	t.Helper()
	l := New(0, cfg)
	x := NewExplainer(l, id)
	var all, out []Output
	for i, ev := range evs {
		out = x.Apply(1000+int64(i), int64(i), ev, out[:0])
		all = append(all, out...)
		if err := l.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	return x.Explanation(), all
}

// TestExplainNamesTheLimitingBucket: the explanation of a denial marks the
// bucket the decision recorded, with its level before and after and what
// the request needed.
func TestExplainNamesTheLimitingBucket(t *testing.T) {
	cfg := testConfig(rpm("tenant", "*", 600, 1000), rpm("key", "*", 120, 1000))
	x, all := explainRun(t, cfg, "c",
		reserve("a"), reserve("b"), reserve("c", maxWait(0)))
	d := all[len(all)-1].Decision
	if d.Status != schemas.StatusDenied || d.LimitPath != "tenant:t1/key:k1" {
		t.Fatalf("recorded decision %+v", d)
	}
	if len(x.Steps) != 1 || x.Outcome != "denied (wait_exceeds_max)" || x.LimitPath != d.LimitPath || x.LimitDimension != d.LimitDimension {
		t.Fatalf("explanation %+v", x)
	}
	var limiting []BucketView
	for _, v := range x.Steps[0].Buckets {
		if v.Limiting {
			limiting = append(limiting, v)
		}
	}
	if len(limiting) != 1 || limiting[0].Node != "key:k1" || limiting[0].Dimension != d.LimitDimension ||
		limiting[0].Before != d.Available || limiting[0].Needed != d.Needed || limiting[0].Before != limiting[0].After {
		t.Fatalf("limiting buckets %+v, decision %+v", limiting, d)
	}
	if n := len(x.Steps[0].Buckets); n != 2 {
		t.Fatalf("%d buckets on the path, want 2 (tenant, key)", n)
	}
}

// TestExplainQueueAndGrantFromTheQueue: a queued request's explanation
// shows who was ahead, the feedback that moved its buckets, and the grant
// that another request's reconcile set off.
func TestExplainQueueAndGrantFromTheQueue(t *testing.T) {
	cfg := testConfig(BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1})
	x, _ := explainRun(t, cfg, "c",
		reserve("a", tenant("acme")),
		reserve("b", tenant("globex"), class("agent")),
		reserve("c", tenant("acme"), class("agent")),
		reconcile("a", 100, 50),
	)
	if len(x.Steps) != 2 {
		t.Fatalf("steps %+v", x.Steps)
	}
	q := x.Steps[0].Queue
	if q == nil || q.AheadTotal != 1 || q.Ahead[0].RequestID != "b" || q.Ahead[0].Tenant != "globex" {
		t.Fatalf("queue view %+v", q)
	}
	g := x.Steps[1]
	if g.Own || g.Input != schemas.TypeReconciled || len(g.Decisions) != 0 || g.Queue == nil || g.Queue.Position != 0 {
		// b is granted by a's reconcile, c moves to the front.
		t.Fatalf("step after a's reconcile %+v", g)
	}
}

// TestSimExplainerChangesNothing: applying a seeded log through an
// Explainer gives byte-identical decisions.
func TestSimExplainerChangesNothing(t *testing.T) {
	for _, seed := range seeds(t, 2) {
		log := genLog(t, seed, 3000)
		want := runLog(t, New(3, withShadow(simConfig(0))), log, 0, nil)
		l := New(3, withShadow(simConfig(0)))
		x := NewExplainer(l, "r40")
		var got [][]byte
		var out []Output
		for i := range log {
			out = x.Apply(log[i].at, int64(i), log[i].ev, out[:0])
			for j := range out {
				b, _ := schemas.Encode(out[j].Event())
				got = append(got, b)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("seed %d: %d decisions, want %d", seed, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("seed %d: decision %d differs", seed, i)
			}
		}
	}
}

// TestExplainerNilRecord: a nil record (Apply's "nothing but time") that
// grants the explained request from the queue is written down too.
func TestExplainerNilRecord(t *testing.T) {
	cfg := testConfig(rpm("key", "*", 60, 1000))
	l := New(0, cfg)
	x := NewExplainer(l, "b")
	x.Apply(1000, 0, reserve("a"), nil)
	x.Apply(1000, 1, reserve("b", class("agent")), nil)
	out := x.Apply(2100, 2, nil, nil)
	if len(out) != 1 || out[0].RequestID != "b" || out[0].Decision.Status != schemas.StatusGranted {
		t.Fatalf("decisions %+v", out)
	}
	steps := x.Explanation().Steps
	if last := steps[len(steps)-1]; last.Input != "" || len(last.Decisions) != 1 || last.Decisions[0].Status != schemas.StatusGranted {
		t.Fatalf("last step %+v", last)
	}
}
