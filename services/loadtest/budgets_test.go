package loadtest

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// TestBudgetReportSumsARollingBudgetsSlots: a rolling budget (a split
// scope's provider limit, 120 a minute counted in 15 s slots) starts its
// holders' counters again in every slot, so its spent is the sum over the
// slots of each holder's newest report in the slot, and the limit is held
// to the most spent in any minute. Two holders spend 40 a slot for 2
// minutes: 320 spent, 160 in any minute (overspend 40). It reported the
// newest slot's 40, against 120.
func TestBudgetReportSumsARollingBudgetsSlots(t *testing.T) {
	start := time.UnixMilli(1_000_000)
	ba := newBudgetAudit(start)
	ba.add(&schemas.Event{ConfigChanged: &schemas.ConfigChanged{Ledger: []byte(`{"budget":{"budgets":[
		{"id":"split:hot:dep:requests","level":"deployment","subject":"dep","unit":"requests","limit":120,"window":"rolling","rolling_ms":60000,"slots":4}]}}`)}}, start)
	seq := int64(0)
	for slot := int64(0); slot < 8; slot++ {
		for _, h := range []string{"hot#0", "hot#1"} {
			for used := int64(10); used <= 20; used += 10 { // two reports a slot, the newest counts
				seq++
				ba.add(&schemas.Event{LeaseRequested: &schemas.LeaseRequested{Budget: "split:hot:dep:requests", Holder: h,
					WindowStartMs: 1_000_000 + slot*15000, Seq: seq, Granted: 30, Used: used}}, start.Add(time.Duration(slot*15000)*time.Millisecond))
			}
		}
	}
	rs := ba.reports()
	if len(rs) != 1 {
		t.Fatalf("reports %+v", rs)
	}
	r := rs[0]
	if r.Spent != 320 || r.PeakSpent != 160 || r.RollingMs != 60000 || r.Overspend != 40 {
		t.Errorf("spent %d, peak %d in %d ms, overspend %d; want 320, 160 in 60000, 40", r.Spent, r.PeakSpent, r.RollingMs, r.Overspend)
	}
	var b strings.Builder
	writeBudgets(&b, rs)
	if !strings.Contains(b.String(), "spent 320 requests, at most 160 of 120 in any 60000 ms") {
		t.Errorf("text report: %s", b.String())
	}
}
