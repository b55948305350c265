//go:build integration

package analytics

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/analytics/synth"
	"github.com/sluice-dev/sluice/ledger/budget"
	"github.com/sluice-dev/sluice/schemas"
)

// budgetDay is the UTC day of caseT0 in ms: window A of the budget log.
var budgetDay = caseT0 - caseT0%86_400_000

// budgetMonth is the UTC calendar month of caseT0 in ms: the month
// budget's window.
func budgetMonth() int64 {
	d := time.UnixMilli(caseT0).UTC()
	return time.Date(d.Year(), d.Month(), 1, 0, 0, 0, 0, time.UTC).UnixMilli()
}

// budgetCases is a hand-made log of the lease protocol as ledger/budgets.go
// writes it (envelope scope = the holder): budget acme-daily (100
// requests a day) leased to an OpenAI and an Anthropic scope over two
// days, and budget acme-month (spend) leased to an Azure scope. It has
// what the counters are built to survive: a stale message (a lower Seq
// appended after a higher one), a window_rolled return of day A sent in
// day B, and limits changed by a later ConfigChanged (and one after the
// range's end, which must not count).
func budgetCases() []synth.Record {
	c := &caseLog{}
	cfg := func(ms, daily int64) {
		doc, _ := json.Marshal(map[string]any{"budget": map[string]any{"budgets": []any{
			map[string]any{"id": "acme-daily", "level": "tenant", "subject": "acme", "unit": "requests", "limit": daily, "window": "day"},
			map[string]any{"id": "acme-month", "level": "tenant", "subject": "acme", "unit": "spend_micros", "limit": 5_000_000, "window": "month"},
		}}})
		c.add(&schemas.Event{Type: schemas.TypeConfigChanged, Node: "admin",
			ConfigChanged: &schemas.ConfigChanged{ConfigVersion: fmt.Sprintf("b%d", daily), Source: "cases", Ledger: doc}}, ms)
	}
	req := func(ms int64, b, h string, win, seq, g, r, u int64) {
		c.add(&schemas.Event{Type: schemas.TypeLeaseRequested, Node: "ledger-1", Scope: h, LeaseRequested: &schemas.LeaseRequested{
			Budget: b, Holder: h, WindowStartMs: win, Seq: seq, Granted: g, Returned: r, Used: u, Demand: 10}}, ms)
	}
	grant := func(ms int64, b, h string, win, seq, g, amount int64) {
		c.add(&schemas.Event{Type: schemas.TypeLeaseGranted, Node: "ledger-2", Scope: h, LeaseGranted: &schemas.LeaseGranted{
			Budget: b, Holder: h, WindowStartMs: win, Seq: seq, AckSeq: seq, Granted: g, Amount: amount, Target: g,
			Available: 50, TermMs: 2000, WindowEndMs: win + 86_400_000}}, ms)
	}
	ret := func(ms int64, b, h string, win, seq, g, r, u int64, why string) {
		c.add(&schemas.Event{Type: schemas.TypeLeaseReturned, Node: "ledger-1", Scope: h, LeaseReturned: &schemas.LeaseReturned{
			Budget: b, Holder: h, WindowStartMs: win, Seq: seq, Granted: g, Returned: r, Used: u, Reason: why}}, ms)
	}
	const oa, an, az = "openai:acme", "anthropic:acme", "azure:acme"
	dayA, dayB := budgetDay, budgetDay+86_400_000
	t := caseT0
	cfg(t, 80)
	// Day A, OpenAI: asks, gets 50, spends 30, gets 10 more, returns 20
	// at the end of its term having spent 40; then its seq-2 report,
	// delayed, reaches the log after the return.
	req(t+1_000, "acme-daily", oa, dayA, 1, 0, 0, 0)
	grant(t+1_010, "acme-daily", oa, dayA, 1, 50, 50)
	req(t+5_000, "acme-daily", oa, dayA, 2, 50, 0, 30)
	grant(t+5_010, "acme-daily", oa, dayA, 2, 60, 10)
	ret(t+9_000, "acme-daily", oa, dayA, 3, 60, 20, 40, schemas.LeaseTermEnded)
	req(t+9_500, "acme-daily", oa, dayA, 2, 50, 0, 30) // stale: Seq 2 after 3
	// Day A, Anthropic: gets 40, spends 25.
	req(t+6_000, "acme-daily", an, dayA, 1, 0, 0, 0)
	grant(t+6_010, "acme-daily", an, dayA, 1, 40, 40)
	req(t+8_000, "acme-daily", an, dayA, 2, 40, 0, 25)
	// The daily limit rises to 100.
	cfg(t+20_000, 100)
	// Day B: Anthropic returns day A's unused 15 (window_rolled), then
	// asks in day B, gets 30 and spends 10.
	tb := dayB + 3_600_000
	ret(tb, "acme-daily", an, dayA, 3, 40, 15, 25, schemas.LeaseWindowRolled)
	req(tb+100, "acme-daily", an, dayB, 4, 0, 0, 0)
	grant(tb+110, "acme-daily", an, dayB, 1, 30, 30)
	req(tb+2_000, "acme-daily", an, dayB, 5, 30, 0, 10)
	// The month budget: Azure holds 2 000 000 µ$ and has spent 1 234 567.
	month := budgetMonth()
	req(t+30_000, "acme-month", az, month, 1, 0, 0, 0)
	grant(t+30_010, "acme-month", az, month, 1, 2_000_000, 2_000_000)
	req(t+40_000, "acme-month", az, month, 2, 2_000_000, 0, 1_234_567)
	// After the range's end: not the limit of the range.
	cfg(fixtureRange().To.UnixMilli()+60_000, 999)
	return c.recs
}

// burnRow is one expected budget_burn row.
type burnRow struct {
	unit                                         string
	limit, spent, granted, returned, outstanding int64
	messages                                     int64
	seq                                          int64
}

// budgetOracle works budget_burn out in Go from the events: per budget,
// window and holder, the newest holder counters by Seq, the highest grant;
// the limit from the newest ConfigChanged before the range's end, read
// with ledger/budget's own config type.
func budgetOracle(recs []synth.Record, rng Range) map[string]*burnRow {
	limits := map[string][2]any{}
	var cfgMs int64 = -1
	out := map[string]*burnRow{}
	get := func(b, h string, win int64) *burnRow {
		k := fmt.Sprintf("%s|%d|%s", b, win, h)
		if out[k] == nil {
			out[k] = &burnRow{seq: -1}
		}
		return out[k]
	}
	in := func(ms int64) bool { return ms >= rng.From.UnixMilli() && ms < rng.To.UnixMilli() }
	for _, r := range recs {
		e := r.Event
		switch {
		case e.ConfigChanged != nil && r.LogTimeMs < rng.To.UnixMilli() && r.LogTimeMs >= cfgMs:
			var doc struct {
				Budget *budget.Config `json:"budget"`
			}
			if json.Unmarshal(e.ConfigChanged.Ledger, &doc) == nil && doc.Budget != nil {
				cfgMs = r.LogTimeMs
				for _, b := range doc.Budget.Budgets {
					limits[b.ID] = [2]any{string(b.Unit), b.Limit}
				}
			}
		case e.LeaseRequested != nil && in(r.LogTimeMs):
			m := e.LeaseRequested
			w := get(m.Budget, m.Holder, m.WindowStartMs)
			w.messages++
			w.granted = max(w.granted, m.Granted)
			if m.Seq > w.seq {
				w.seq, w.spent, w.returned = m.Seq, m.Used, m.Returned
			}
		case e.LeaseReturned != nil && in(r.LogTimeMs):
			m := e.LeaseReturned
			w := get(m.Budget, m.Holder, m.WindowStartMs)
			w.messages++
			w.granted = max(w.granted, m.Granted)
			if m.Seq > w.seq {
				w.seq, w.spent, w.returned = m.Seq, m.Used, m.Returned
			}
		case e.LeaseGranted != nil && in(r.LogTimeMs):
			m := e.LeaseGranted
			w := get(m.Budget, m.Holder, m.WindowStartMs)
			w.messages++
			w.granted = max(w.granted, m.Granted)
		}
	}
	for k, w := range out {
		id, _, _ := strings.Cut(k, "|")
		if l, ok := limits[id]; ok {
			w.unit, w.limit = l[0].(string), l[1].(int64)
		}
		w.outstanding = max(w.granted-w.returned-w.spent, 0)
	}
	return out
}

// TestIntegrationOracleBudgets: the lease log through the real Kafka and
// sink into ClickHouse 18.16 and on chDB; budget_burn equals the Go
// oracle, and the oracle the figures worked out by hand.
func TestIntegrationOracleBudgets(t *testing.T) {
	recs := budgetCases()
	rng := fixtureRange()
	want := budgetOracle(recs, rng)
	dayA, dayB := budgetDay, budgetDay+86_400_000
	// By hand (see budgetCases): the stale seq-2 report does not undo
	// OpenAI's return; day A's Anthropic lease ends returned.
	hand := map[string]burnRow{
		fmt.Sprintf("acme-daily|%d|openai:acme", dayA):         {unit: "requests", limit: 100, spent: 40, granted: 60, returned: 20, outstanding: 0, messages: 6},
		fmt.Sprintf("acme-daily|%d|anthropic:acme", dayA):      {unit: "requests", limit: 100, spent: 25, granted: 40, returned: 15, outstanding: 0, messages: 4},
		fmt.Sprintf("acme-daily|%d|anthropic:acme", dayB):      {unit: "requests", limit: 100, spent: 10, granted: 30, returned: 0, outstanding: 20, messages: 3},
		fmt.Sprintf("acme-month|%d|azure:acme", budgetMonth()): {unit: "spend_micros", limit: 5_000_000, spent: 1_234_567, granted: 2_000_000, outstanding: 765_433, messages: 3},
	}
	if len(want) != len(hand) {
		t.Fatalf("oracle has %d rows, by hand %d: %v", len(want), len(hand), want)
	}
	for k, h := range hand {
		w := want[k]
		if w == nil {
			t.Fatalf("oracle has no row %s", k)
		}
		h.seq = w.seq
		if *w != h {
			t.Fatalf("oracle %s = %+v, by hand %+v", k, *w, h)
		}
	}

	conn, db := sinkFixture(t, recs)
	got := runAll(t, conn, db, rng)
	res := got["budget_burn"]
	rows := rowsBy(t, res, "budget", "window_start_ms", "holder")
	if len(rows) != len(want) {
		t.Errorf("budget_burn has %d rows, want %d: %v", len(rows), len(want), res.Rows)
	}
	for k, w := range want {
		row := rows[k]
		if row == nil {
			t.Errorf("budget_burn: no row %s", k)
			continue
		}
		holder := strings.Split(k, "|")[2]
		if p := row[res.Col("provider")]; p != strings.SplitN(holder, ":", 2)[0] {
			t.Errorf("%s provider = %v", k, p)
		}
		if u := row[res.Col("unit")]; u != w.unit {
			t.Errorf("%s unit = %v, want %s", k, u, w.unit)
		}
		for _, c := range []struct {
			col  string
			want float64
		}{
			{"budget_limit", float64(w.limit)}, {"spent", float64(w.spent)}, {"granted", float64(w.granted)},
			{"returned", float64(w.returned)}, {"outstanding", float64(w.outstanding)},
			{"lease_messages", float64(w.messages)}, {"pct_of_limit", 100 * float64(w.spent) / float64(w.limit)},
		} {
			if g := num(t, res, row, c.col); fmt.Sprintf("%.9g", g) != fmt.Sprintf("%.9g", c.want) {
				t.Errorf("%s %s = %v, want %v", k, c.col, g, c.want)
			}
		}
	}
	t.Run("chdb_26", func(t *testing.T) { compareWithChDBRange(t, conn, db, got, rng, false) })
}
