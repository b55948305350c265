package ledger

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

func degradedAdm() reqOpt {
	return func(ev *schemas.Event) {
		ev.ReserveRequested.EmergencyAdmitted, ev.ReserveRequested.Degraded = true, true
		ev.Attempt = 2
		ev.ProducedAtMs = 400
	}
}

// requestsLeft is what the tenant's requests bucket could grant at atMs.
func requestsLeft(t *testing.T, l *Ledger, atMs int64) int64 {
	t.Helper()
	lv, ok := l.Levels("s", "tenant", "t1", atMs)
	if !ok || len(lv) != 1 {
		t.Fatalf("levels %v %v", lv, ok)
	}
	return lv[0].Remaining
}

// TestDegradedAdmissionChargedAsDebt: a degraded admission that reaches the
// ledger after the outage is granted whatever the bucket holds, named for
// what it is, and its estimate is charged at once, into debt: the next
// normal request waits until refill has paid the debt back. Its Reconciled
// settles it like any grant (nothing more is owed), a redelivered copy
// changes nothing, and one left unsettled expires as degraded_admitted,
// also after a snapshot and restore.
func TestDegradedAdmissionChargedAsDebt(t *testing.T) {
	// 600 a minute, 1 s window: a burst of 10, refilling 1 per 100 ms.
	cfg := testConfig(rpm("tenant", "*", 600, 1000))
	var steps []step
	for i := range 10 {
		id := string(rune('a' + i))
		steps = append(steps, step{At: 1000, Ev: reserve(id), Want: []string{id + "/1 granted admitted"}})
	}
	steps = append(steps,
		step{At: 1000, Ev: reserve("d", degradedAdm()), Want: []string{"d/2 granted degraded_mode degraded_admitted"},
			Check: func(t *testing.T, l *Ledger, _ []Output) {
				if got := requestsLeft(t, l, 1000); got != -1 {
					t.Errorf("after the degraded admission the bucket holds %d, want -1 (debt)", got)
				}
			}},
		// Redelivered by the gateway's retry queue: applied once.
		step{At: 1001, Ev: reserve("d", degradedAdm())},
		step{At: 1010, Ev: reconcileAtt("d", 2, 90, 40)},
		// Debt of 1: a request needs 200 ms of refill, not 100.
		step{At: 1100, Ev: reserve("n", maxWait(5000)), Want: []string{"n/1 queued capacity queued"}},
		step{At: 1200, Ev: tick(), Want: []string{"n/1 granted queued_then_admitted"}},
		// Left unsettled: its hold ends as what it was.
		step{At: 1300, Ev: reserve("u", degradedAdm()), Want: []string{"u/2 granted degraded_mode degraded_admitted"}},
	)
	l := runSteps(t, cfg, steps)
	b, err := l.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(b)
	if err != nil {
		t.Fatal(err)
	}
	out := r.Apply(1300+r.st.Config.HoldTTLMs+1, l.Offset(), tick(), nil)
	var got []string
	for i := range out {
		got = append(got, render(&out[i]))
	}
	if want := "u/2 hold_expired hold_ttl_abandoned degraded_admitted"; !strings.Contains(strings.Join(got, "\n"), want) {
		t.Errorf("after restore, the unsettled degraded admission expired as %q, want %q", got, want)
	}
}

// TestExplainDegradedAdmission: explain shows a degraded admission as one,
// with when the gateway made it.
func TestExplainDegradedAdmission(t *testing.T) {
	x, _ := explainRun(t, testConfig(rpm("tenant", "*", 600, 1000)), "d", reserve("d", degradedAdm()), reconcileAtt("d", 2, 90, 40))
	if len(x.Steps) == 0 || !strings.HasPrefix(x.Steps[0].Note, "degraded admission: gateway gw1 admitted it itself") ||
		!strings.Contains(x.Steps[0].Note, "600 ms before this ledger read it") {
		t.Fatalf("steps %+v", x.Steps)
	}
	if d := x.Steps[0].Decisions; len(d) != 1 || d[0].GatewayDecision != schemas.GDDegradedAdmitted {
		t.Errorf("decisions %+v", d)
	}
}

// TestLiveNodes: the gateways a partition counts alive, for the degraded
// share; the asking gateway always counts itself.
func TestLiveNodes(t *testing.T) {
	l := runSteps(t, testConfig(rpm("tenant", "*", 600, 1000)), []step{
		{At: 1000, Ev: heartbeat("gw1")},
		{At: 3000, Ev: heartbeat("gw2")},
	})
	for _, tc := range []struct {
		at   int64
		self string
		want int
	}{{3000, "", 2}, {3000, "gw1", 2}, {3000, "gw9", 3}, {5999, "", 2}, {6000, "", 1}, {6000, "gw1", 2}, {8000, "", 0}, {8000, "gw2", 1}} {
		if got := l.LiveNodes(tc.at, tc.self); got != tc.want {
			t.Errorf("LiveNodes(%d, %q) = %d, want %d", tc.at, tc.self, got, tc.want)
		}
	}
}
