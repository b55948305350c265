package live

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

func queued(tenant, key, req string) *schemas.Event {
	return decision(tenant, key, req, schemas.Decision{Status: schemas.StatusQueued, Reason: schemas.ReasonCapacity,
		GatewayDecision: schemas.GDQueued, RetryClass: schemas.RetryCapacity})
}

func line(t *testing.T, ls []RateLine, name string) RateLine {
	t.Helper()
	for _, l := range ls {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no line %q in %+v", name, ls)
	return RateLine{}
}

// TestTimeline steps through seconds and checks each line's points: rates
// per second, the queue depth carried across seconds without events, the
// estimation error over its trailing span and the provider's remaining
// level carried forward.
func TestTimeline(t *testing.T) {
	clk := newClock()
	p := NewProjection(0, clk.Now)
	t0 := clk.Now().Unix()
	p.Apply(reserve("acme", "ka", "a1"), queued("acme", "ka", "a1"),
		reserve("acme", "ka", "a2"), queued("acme", "ka", "a2"), observedEv("acme", 500))
	clk.Advance(3 * time.Second) // t0+3: a1 granted, a2 still waits
	p.Apply(granted("acme", "ka", "a1"), reconciled("acme", "ka", "a1", 120, 100, 0, 0), observedEv("acme", 420))
	g := reserve("globex", "kg", "g1")
	g.Class = "batch"
	p.Apply(g)
	clk.Advance(2 * time.Second) // t0+5: a2 expires in the queue
	p.Apply(decision("acme", "ka", "a2", schemas.Decision{Status: schemas.StatusExpired, Reason: schemas.ReasonMaxWaitExceeded,
		GatewayDecision: schemas.GDQueuedThenExpired}))
	clk.Advance(500 * time.Millisecond)

	s := p.Snapshot()
	tl := s.Timeline
	now := clk.Now().Unix()
	if tl.Points != 60 || tl.StartS != now-59 {
		t.Fatalf("points %d start %d, want 60 and %d", tl.Points, tl.StartS, now-59)
	}
	at := func(sec int64) int { return int(sec - tl.StartS) }
	acme := line(t, tl.Tenants, "acme")
	steps := []struct {
		sec                       int64
		received, granted, denied int64
		depth                     int64
	}{
		{t0 - 1, 0, 0, 0, 0},
		{t0, 2, 0, 0, 2},
		{t0 + 1, 0, 0, 0, 2}, // no event: the depth carries
		{t0 + 3, 0, 1, 0, 1},
		{t0 + 4, 0, 0, 0, 1},
		{t0 + 5, 0, 0, 1, 0},
	}
	for _, st := range steps {
		i := at(st.sec)
		if got := [4]int64{acme.Received[i], acme.Granted[i], acme.Denied[i], acme.QueueDepth[i]}; got != [4]int64{st.received, st.granted, st.denied, st.depth} {
			t.Errorf("t0%+d: received/granted/denied/depth = %v, want %v", st.sec-t0, got, [4]int64{st.received, st.granted, st.denied, st.depth})
		}
	}
	if s.Totals.QueueDepth != 0 || tenantRow(t, s, "acme").QueueDepth != 0 {
		t.Errorf("queue depth now: %d", s.Totals.QueueDepth)
	}
	if b := line(t, tl.Classes, "batch"); b.Received[at(t0+3)] != 1 || len(tl.Classes) != 2 {
		t.Errorf("classes %+v", tl.Classes)
	}
	// Estimation error: +20 % from t0+3 for estErrSpanS seconds.
	for _, c := range []struct {
		sec  int64
		want *float64
	}{{t0 + 2, nil}, {t0 + 3, ptr(0.2)}, {t0 + 3 + estErrSpanS - 1, ptr(0.2)}, {t0 + 3 + estErrSpanS, nil}} {
		i := at(c.sec)
		if i >= tl.Points {
			continue
		}
		got := tl.InputEstimationError[i]
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("t0%+d: estimation error %v, want %v", c.sec-t0, fmtPtr(got), fmtPtr(c.want))
		}
	}
	if len(tl.ProviderRemaining) != 1 {
		t.Fatalf("provider remaining %+v", tl.ProviderRemaining)
	}
	r := tl.ProviderRemaining[0]
	for sec, want := range map[int64]int64{t0: 500, t0 + 2: 500, t0 + 3: 420, now: 420} {
		if v := r.Remaining[at(sec)]; v == nil || *v != want {
			t.Errorf("t0%+d: remaining %v, want %d", sec-t0, fmtPtr(v), want)
		}
	}
	if r.Remaining[at(t0-1)] != nil || r.Limit != 600 {
		t.Errorf("before the first report %v, limit %d", fmtPtr(r.Remaining[at(t0-1)]), r.Limit)
	}

	// The tenant view draws only its tenant and never the provider line.
	ts := p.TenantSnapshot("globex")
	if len(ts.Timeline.Tenants) != 1 || ts.Timeline.Tenants[0].Name != "globex" || len(ts.Timeline.ProviderRemaining) != 0 {
		t.Errorf("tenant timeline %+v", ts.Timeline)
	}
	for _, c := range ts.Timeline.Classes {
		if c.Name != "batch" {
			t.Errorf("globex's view draws class %q", c.Name)
		}
	}
	// A minute later the first report has left the window but still
	// carries into it.
	clk.Advance(70 * time.Second)
	p.Apply(reserve("acme", "ka", "a3"))
	r = p.Snapshot().Timeline.ProviderRemaining[0]
	if v := r.Remaining[0]; v == nil || *v != 420 {
		t.Errorf("carried remaining %v, want 420", fmtPtr(v))
	}
}

func TestTimelineOtherTenants(t *testing.T) {
	p := NewProjection(0, newClock().Now)
	for i := 0; i < TimelineTenantsMax+3; i++ {
		for j := 0; j <= i; j++ {
			p.Apply(reserve("t"+itoa(int64(i)), "k", "r"+itoa(int64(j))))
		}
	}
	tl := p.Snapshot().Timeline
	if len(tl.Tenants) != TimelineTenantsMax {
		t.Fatalf("%d tenant lines, want %d", len(tl.Tenants), TimelineTenantsMax)
	}
	if first := tl.Tenants[0]; first.Name != "t"+itoa(TimelineTenantsMax+2) {
		t.Errorf("busiest first: %q", first.Name)
	}
	other := tl.Tenants[TimelineTenantsMax-1]
	// t0..t3 sent 1+2+3+4 = 10 requests.
	if other.Name != OtherTenants || total(other.Received) != 10 {
		t.Errorf("other tenants %q received %d, want 10", other.Name, total(other.Received))
	}
}

func TestDecisionWords(t *testing.T) {
	p := NewProjection(0, newClock().Now)
	p.Apply(decision("acme", "k", "r", schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonWaitExceedsMax,
		LimitDimension: schemas.DimInputTokens, GatewayDecision: schemas.GDRejectedLocally, RetryClass: schemas.RetryCapacity}))
	d := p.Snapshot().RecentDecisions[0]
	if d.Reason != "wait_exceeds_max" || d.ReasonWords != schemas.ReasonWaitExceedsMax.Words() ||
		d.RetryClassWords != schemas.RetryCapacity.Words() || d.GatewayDecisionWords != schemas.GDRejectedLocally.Words() ||
		d.LimitDimensionWords != "input tokens" || d.StatusWords != "denied" {
		t.Errorf("row %+v", d)
	}
	if strings.Contains(d.ReasonWords, "_") {
		t.Errorf("reason words look like a code: %q", d.ReasonWords)
	}
	b, _ := json.Marshal(d)
	if !strings.Contains(string(b), `"reason_words":`) {
		t.Errorf("json %s", b)
	}
}

func ptr(f float64) *float64 { return &f }

func fmtPtr[T any](p *T) any {
	if p == nil {
		return "null"
	}
	return *p
}
