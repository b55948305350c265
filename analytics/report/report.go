// Package report builds Sluice's weekly calibration report from the
// metric queries of package analytics: every metric with its week-over-week
// change, recommendations with their evidence and bounded corrections, and
// a config patch that `sluice config apply` can install. It renders the
// report as markdown (for review in a pull request), JSON and HTML with
// inline SVG charts (no network needed).
package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluice-dev/sluice/analytics"
)

// Source runs one metric query over a range. ClickHouse is the production
// source; tests replay recorded results.
type Source interface {
	Run(ctx context.Context, q analytics.Query, r analytics.Range) (*analytics.Result, error)
}

// ClickHouse is a Source over a Sluice database on a ClickHouse server.
// The first query of a range snapshots that range's attempts and requests
// (analytics.Snapshot), so the facts are merged once per range, not once
// per query; Close drops the snapshots. The zero Snapshots map disables
// that (every query reads the views).
type ClickHouse struct {
	Conn      driver.Conn
	Database  string
	Snapshots map[[2]int64]analytics.Tables
	drops     []func()
	span      analytics.Range
	mu        sync.Mutex // guards Snapshots and drops (two weeks run at once)
}

// NewClickHouse returns a snapshotting ClickHouse source.
func NewClickHouse(conn driver.Conn, database string) *ClickHouse {
	return &ClickHouse{Conn: conn, Database: database, Snapshots: map[[2]int64]analytics.Tables{}}
}

// Cover tells the source that the queries to come fall inside span, so one
// snapshot of span serves them all (the queries filter by range themselves).
func (c *ClickHouse) Cover(span analytics.Range) { c.span = span }

// Run implements Source.
func (c *ClickHouse) Run(ctx context.Context, q analytics.Query, r analytics.Range) (*analytics.Result, error) {
	res, err := c.run(ctx, q, r)
	if err == nil {
		roundFloats(res)
	}
	return res, err
}

// roundFloats keeps 12 significant digits of every float cell. ClickHouse
// sums floats in whatever order its threads finish, so the last bits of a
// sum or quantile differ from run to run; a report (and its golden test)
// must not.
func roundFloats(res *analytics.Result) {
	for _, row := range res.Rows {
		for i, v := range row {
			if f, ok := v.(float64); ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
				row[i], _ = strconv.ParseFloat(strconv.FormatFloat(f, 'g', 12, 64), 64)
			}
		}
	}
}

// Concurrent implements concurrentSource: the driver's connections are a
// pool, and the snapshots are guarded.
func (c *ClickHouse) Concurrent() bool { return true }

func (c *ClickHouse) run(ctx context.Context, q analytics.Query, r analytics.Range) (*analytics.Result, error) {
	if c.Snapshots == nil {
		return q.Run(ctx, c.Conn, c.Database, r)
	}
	t, err := c.snapshot(ctx, r)
	if err != nil {
		return nil, err
	}
	return q.RunIn(ctx, c.Conn, c.Database, r, t)
}

// snapshot returns the tables covering r, taking them the first time; a
// second caller waits for the first's snapshot rather than taking its own.
func (c *ClickHouse) snapshot(ctx context.Context, r analytics.Range) (analytics.Tables, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sr := r
	if !c.span.From.After(r.From) && !c.span.To.Before(r.To) {
		sr = c.span
	}
	key := [2]int64{sr.From.Unix(), sr.To.Unix()}
	if t, ok := c.Snapshots[key]; ok {
		return t, nil
	}
	t, drop, err := analytics.Snapshot(ctx, c.Conn, c.Database, sr)
	if err != nil {
		return analytics.Tables{}, err
	}
	c.drops = append(c.drops, drop)
	c.Snapshots[key] = t
	return t, nil
}

// Close drops the snapshots.
func (c *ClickHouse) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.drops {
		d()
	}
	c.drops = nil
}

// ErrNoData is returned when the range holds no request.
var ErrNoData = errors.New("no data")

// Report is the weekly calibration report.
type Report struct {
	From     time.Time `json:"from"`
	To       time.Time `json:"to"`
	PrevFrom time.Time `json:"previous_from"`
	PrevTo   time.Time `json:"previous_to"`

	Headline        []Headline       `json:"headline"`
	Sections        []Section        `json:"sections"`
	Recommendations []Recommendation `json:"recommendations"`
	Patch           Patch            `json:"patch"`
}

// Headline is one scalar metric with its week-over-week change.
type Headline struct {
	Name  string   `json:"name"`
	Unit  string   `json:"unit"`
	Value float64  `json:"value"`
	Prev  *float64 `json:"previous"` // nil: no data the week before
	// Delta is Value − Prev; nil without Prev.
	Delta *float64 `json:"delta"`
	// Better says which direction is an improvement: "up", "down" or "".
	Better string `json:"better"`
}

// Section is one metric query's result for the range, with the previous
// range's value of its main column per row.
type Section struct {
	Name    string   `json:"name"`
	Title   string   `json:"title"`
	Doc     string   `json:"doc"`
	Keys    []string `json:"keys"`
	Value   string   `json:"value"` // the column compared week over week
	Columns []string `json:"columns"`
	Rows    [][]any  `json:"rows"`
	// Prev holds, per row, the previous range's Value for the same keys
	// (nil: the row is new).
	Prev []*float64 `json:"previous"`
	// Summary says in one sentence what the rows mean for the reader
	// (shadow_limits: what enforcing the shadow limits would have
	// changed); empty for the other sections.
	Summary string `json:"summary,omitempty"`
}

// spec says how each metric is keyed and which column is compared.
type spec struct {
	name, title string
	keys        []string
	value       string
}

var specs = []spec{
	{"estimation_error", "Estimation error ((estimate − actual) ÷ actual)", []string{"by", "key"}, "out_bias"},
	{"route_calibration", "Route calibration evidence", []string{"route"}, "out_p95"},
	{"stranded_quota", "Stranded quota (reserved above actual use)", []string{"scope", "bucket", "dimension"}, "stranded_token_s"},
	{"stranded_by_owner", "Stranded quota by tenant, route and class (late grants and expired holds broken out)", []string{"scope", "tenant", "route", "class"}, "stranded_token_s"},
	{"retry_amplification", "Retry amplification (upstream attempts ÷ logical requests; gateway retries, SDK retries and client duplicates)", []string{"provider", "tenant", "class"}, "attempts_per_logical"},
	{"acceptance", "Acceptance rate (dispatched ÷ received)", []string{"tenant", "class"}, "acceptance_rate"},
	{"ratio_429", "Provider 429 ratio (429s ÷ upstream attempts)", []string{"by", "key"}, "ratio"},
	{"gateway_decision_mix", "gateway_decision mix", []string{"gateway_decision"}, "requests"},
	{"queue_wait", "Queue wait (ms, log time)", []string{"class"}, "p95_ms"},
	{"outcome_mix", "Outcome mix", []string{"status"}, "share"},
	{"deadline_misses", "Deadline misses", []string{"class"}, "miss_ratio"},
	{"cache_headroom", "Prompt-cache headroom", []string{"route"}, "cached_share"},
	{"borrowed", "Borrowed capacity", []string{"class"}, "borrowed_share"},
	{"saturation", "Saturation (attempts queued or denied)", []string{"tenant", "route"}, "refused_share"},
	{"daily_headroom", "Daily-quota headroom", []string{"scope", "bucket"}, "headroom"},
	{"scope_429", "Provider 429s by scope", []string{"scope"}, "ratio"},
	{"shadow_limits", "Shadow limits (evaluated, never enforced)", []string{"scope", "tenant", "class", "limit_path", "dimension"}, "refuse_share"},
	{"budget_burn", "Budget burn by provider (cross-scope budgets and their leases)", []string{"budget", "window_start_ms", "holder"}, "pct_of_limit"},
}

// LastFullWeek returns the last full ISO week (Monday 00:00 UTC to the
// next Monday) before now.
func LastFullWeek(now time.Time) analytics.Range {
	d := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	wd := (int(d.Weekday()) + 6) % 7 // Monday = 0
	thisMonday := d.AddDate(0, 0, -wd)
	return analytics.Range{From: thisMonday.AddDate(0, 0, -7), To: thisMonday}
}

// Options tune Build.
type Options struct {
	// Progress receives one line per query run ("report: 3/32 …"); nil = none.
	Progress io.Writer
	// Bounds of the corrections; zero values take the defaults.
	Bounds Bounds
}

// Bounds limit what one report may recommend.
type Bounds struct {
	// InputCorrectionMax is the largest change of a route's input
	// correction factor per report (default 0.10 = ±10 %).
	InputCorrectionMax float64
	// CapacityChangeMax is the largest bucket capacity change per report
	// (default 0.10).
	CapacityChangeMax float64
	// OutputChangeMax bounds a route's output estimate per report to
	// [1/(1+max), 1+max] × its current mean reservation (default 0.25:
	// [0.8, 1.25]).
	OutputChangeMax float64
	// Provider429Min is the 429 ratio above which a scope's request
	// buckets are lowered (default 0.005).
	Provider429Min float64
	// DeadlineMissMin is the miss ratio above which a class's max wait is
	// raised (default 0.02); DeadlineRaiseMax bounds the raise (default 0.5).
	DeadlineMissMin, DeadlineRaiseMax float64
	// PersistDaysMin and PeakHourShareMax: a scope's request buckets are
	// lowered only for 429s on at least PersistDaysMin days of the range
	// (default 3) with no hour holding more than PeakHourShareMax of them
	// (default 0.5); fewer, or bunched, is a storm and gets advice only.
	PersistDaysMin   int64
	PeakHourShareMax float64
	// MinSamples is the reconciled attempts a route needs before its
	// estimates are recommended (default 30).
	MinSamples int64
}

func (b Bounds) withDefaults() Bounds {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&b.InputCorrectionMax, 0.10)
	def(&b.CapacityChangeMax, 0.10)
	def(&b.OutputChangeMax, 0.25)
	def(&b.PeakHourShareMax, 0.5)
	if b.PersistDaysMin <= 0 {
		b.PersistDaysMin = 3
	}
	def(&b.Provider429Min, 0.005)
	def(&b.DeadlineMissMin, 0.02)
	def(&b.DeadlineRaiseMax, 0.5)
	if b.MinSamples <= 0 {
		b.MinSamples = 30
	}
	return b
}

// Build runs every metric over r and over the week before it and derives
// the headline, recommendations and patch. It fails with ErrNoData when r
// holds no request.
func Build(ctx context.Context, src Source, r analytics.Range, o Options) (*Report, error) {
	prev := analytics.Range{From: r.From.Add(-r.To.Sub(r.From)), To: r.From}
	rep := &Report{From: r.From.UTC(), To: r.To.UTC(), PrevFrom: prev.From.UTC(), PrevTo: prev.To.UTC()}
	if c, ok := src.(interface{ Cover(analytics.Range) }); ok {
		c.Cover(analytics.Range{From: prev.From, To: r.To})
	}
	cur, old, err := runWeeks(ctx, src, r, prev, o.Progress)
	if err != nil {
		return nil, err
	}
	for _, s := range specs {
		q, _ := analytics.QueryByName(s.name)
		sec := Section{Name: s.name, Title: s.title, Doc: q.Doc, Keys: s.keys, Value: s.value,
			Columns: cur[s.name].Columns, Rows: cur[s.name].Rows}
		prevBy := index(old[s.name], s.keys, s.value)
		for _, row := range sec.Rows {
			k := rowKey(cur[s.name], row, s.keys)
			if v, ok := prevBy[k]; ok {
				sec.Prev = append(sec.Prev, ptr(v))
			} else {
				sec.Prev = append(sec.Prev, nil)
			}
		}
		switch s.name {
		case "shadow_limits":
			sec.Summary = shadowSummary(cur[s.name], old[s.name])
		case "budget_burn":
			sec.Summary = budgetSummary(cur[s.name])
		}
		rep.Sections = append(rep.Sections, sec)
	}
	rep.Headline = headline(cur, old)
	rep.Recommendations, rep.Patch = recommend(cur, o.Bounds.withDefaults(), rep)
	return rep, nil
}

// concurrentSource is a Source whose Run may be called from two goroutines
// at once (ClickHouse: a connection pool).
type concurrentSource interface{ Concurrent() bool }

// runWeeks runs every metric over this week and the previous one. A
// concurrent source runs the two weeks side by side: on a small server the
// queries of one week leave a core idle, which the other week uses.
// Results are the same either way; only the progress lines interleave.
func runWeeks(ctx context.Context, src Source, r, prev analytics.Range, progress io.Writer) (cur, old map[string]*analytics.Result, err error) {
	total := 2 * len(specs)
	var mu sync.Mutex // guards step and progress
	step := 0
	noData := fmt.Errorf("%w in %s – %s", ErrNoData, r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339))
	week := func(ctx context.Context, rr analytics.Range, which string) (map[string]*analytics.Result, error) {
		out := map[string]*analytics.Result{}
		for _, s := range specs {
			mu.Lock()
			step++
			if progress != nil {
				fmt.Fprintf(progress, "report: %d/%d %s (%s week)\n", step, total, s.name, which)
			}
			mu.Unlock()
			q, err := analytics.QueryByName(s.name)
			if err != nil {
				return nil, err
			}
			res, err := src.Run(ctx, q, rr)
			if err != nil {
				return nil, err
			}
			out[s.name] = res
			if which == "this" && s.name == "acceptance" && sumCol(res, "received") == 0 {
				return nil, noData
			}
		}
		return out, nil
	}
	if c, ok := src.(concurrentSource); !ok || !c.Concurrent() {
		if cur, err = week(ctx, r, "this"); err != nil {
			return nil, nil, err
		}
		if old, err = week(ctx, prev, "previous"); err != nil {
			return nil, nil, err
		}
		return cur, old, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var oldErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if old, oldErr = week(ctx, prev, "previous"); oldErr != nil {
			cancel()
		}
	}()
	cur, err = week(ctx, r, "this")
	if err != nil {
		cancel()
	}
	<-done
	switch {
	// The previous week's error when this week's is only the cancellation
	// it caused (the bench printed "context canceled" for a query that
	// had run out of memory).
	case errors.Is(err, context.Canceled) && oldErr != nil && !errors.Is(oldErr, context.Canceled):
		return nil, nil, oldErr
	case err != nil: // this week's error first: ErrNoData says more than the cancellation it causes
		return nil, nil, err
	case oldErr != nil:
		return nil, nil, oldErr
	}
	return cur, old, nil
}

func ptr(v float64) *float64 { return &v }

func rowKey(res *analytics.Result, row []any, keys []string) string {
	k := ""
	for _, c := range keys {
		if i := res.Col(c); i >= 0 {
			k += fmt.Sprint(row[i]) + "\x00"
		}
	}
	return k
}

func index(res *analytics.Result, keys []string, value string) map[string]float64 {
	out := map[string]float64{}
	vi := res.Col(value)
	if vi < 0 {
		return out
	}
	for _, row := range res.Rows {
		out[rowKey(res, row, keys)] = toF(row[vi])
	}
	return out
}

func toF(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	}
	return math.NaN()
}

func sumCol(res *analytics.Result, col string) float64 {
	return sumWhere(res, col, nil)
}

func sumWhere(res *analytics.Result, col string, keep func(row []any) bool) float64 {
	i := res.Col(col)
	if i < 0 {
		return 0
	}
	s := 0.0
	for _, row := range res.Rows {
		if keep == nil || keep(row) {
			s += toF(row[i])
		}
	}
	return s
}

func colIs(res *analytics.Result, col, want string) func([]any) bool {
	i := res.Col(col)
	return func(row []any) bool { return i >= 0 && row[i] == want }
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// headlineOf computes the scalar metrics of one week's results; ok is
// false when the week has no request.
func headlineOf(res map[string]*analytics.Result) (map[string]float64, bool) {
	acc := res["acceptance"]
	if acc == nil || sumCol(acc, "received") == 0 {
		return nil, false
	}
	h := map[string]float64{}
	h["requests received"] = sumCol(acc, "received")
	h["acceptance rate"] = div(sumCol(acc, "dispatched"), sumCol(acc, "received"))
	r429 := res["ratio_429"]
	byClass := colIs(r429, "by", "class")
	h["provider 429 ratio"] = div(sumWhere(r429, "provider_429", byClass), sumWhere(r429, "upstream_attempts", byClass))
	amp := res["retry_amplification"]
	h["retry amplification"] = div(sumCol(amp, "upstream_attempts"), sumCol(amp, "requests"))
	// Every layer's retries: the gateway's, the SDK's (a new request id
	// per try) and the client's duplicates, per logical request.
	h["attempts per logical request"] = div(sumCol(amp, "upstream_attempts"), sumCol(amp, "logical_requests"))
	h["client retries"] = sumCol(amp, "sdk_retries") + sumCol(amp, "client_duplicates")
	h["retried tokens"] = sumCol(amp, "retried_tokens")
	ee := res["estimation_error"]
	byStream := colIs(ee, "by", "streaming")
	n := sumWhere(ee, "n", byStream)
	var ob, ib float64
	if ni, oi, ii := ee.Col("n"), ee.Col("out_bias"), ee.Col("in_bias"); ni >= 0 && oi >= 0 && ii >= 0 {
		for _, row := range ee.Rows {
			if byStream(row) {
				ob += toF(row[oi]) * toF(row[ni])
				ib += toF(row[ii]) * toF(row[ni])
			}
		}
	}
	h["output estimation bias"] = div(ob, n)
	h["input estimation bias"] = div(ib, n)
	h["stranded token·s"] = strandedTotal(res["stranded_quota"])
	dm := res["deadline_misses"]
	h["deadline miss ratio"] = div(sumCol(dm, "misses"), sumCol(dm, "requests"))
	h["success share"] = sumWhere(res["outcome_mix"], "share", colIs(res["outcome_mix"], "status", "success"))
	return h, true
}

// strandedTotal sums, per scope, the stranded token·s of the bucket that
// strands the most (every request of a scope passes its widest bucket, so
// summing overlapping buckets would count a hold twice).
func strandedTotal(res *analytics.Result) float64 {
	si, vi := res.Col("scope"), res.Col("stranded_token_s")
	if si < 0 || vi < 0 {
		return 0
	}
	best := map[string]float64{}
	for _, row := range res.Rows {
		s := fmt.Sprint(row[si])
		best[s] = math.Max(best[s], toF(row[vi]))
	}
	t := 0.0
	for _, v := range best {
		t += v
	}
	return t
}

var headlineOrder = []struct{ name, unit, better string }{
	{"requests received", "requests", ""},
	{"acceptance rate", "ratio", "up"},
	{"success share", "ratio", "up"},
	{"provider 429 ratio", "ratio", "down"},
	{"retry amplification", "attempts/request", "down"},
	{"attempts per logical request", "attempts/logical request", "down"},
	{"client retries", "requests", "down"},
	{"retried tokens", "tokens", "down"},
	{"output estimation bias", "ratio", "down"},
	{"input estimation bias", "ratio", "down"},
	{"stranded token·s", "token·s", "down"},
	{"deadline miss ratio", "ratio", "down"},
}

func headline(cur, old map[string]*analytics.Result) []Headline {
	c, _ := headlineOf(cur)
	p, havePrev := headlineOf(old)
	var out []Headline
	for _, h := range headlineOrder {
		x := Headline{Name: h.name, Unit: h.unit, Value: c[h.name], Better: h.better}
		if havePrev {
			x.Prev = ptr(p[h.name])
			x.Delta = ptr(c[h.name] - p[h.name])
		}
		out = append(out, x)
	}
	return out
}

// shadowSummary says what enforcing the shadow limits would have changed:
// how many of the grants they evaluated would have been queued or denied
// instead, the bucket that would have refused the most, and the same share
// the week before.
func shadowSummary(cur, old *analytics.Result) string {
	evaluated := shadowEvaluated(cur)
	if evaluated == 0 {
		return "No grant passed a shadow limit in this range: no bucket or scope is marked shadow, or none was on a granted path."
	}
	refused := sumCol(cur, "would_refuse")
	if refused == 0 {
		return fmt.Sprintf("Enforcing the shadow limits would have changed nothing: they covered all %s grants they evaluated.", fmtNum(evaluated))
	}
	s := fmt.Sprintf("Enforcing the shadow limits would have queued or denied %s of the %s grants they evaluated (%.1f %%)",
		fmtNum(refused), fmtNum(evaluated), 100*refused/evaluated)
	pi, di, ri, si := cur.Col("limit_path"), cur.Col("dimension"), cur.Col("would_refuse"), cur.Col("scope")
	by := map[string]float64{}
	var worst string
	for _, row := range cur.Rows {
		k := fmt.Sprint(row[si]) + " " + fmt.Sprint(row[pi]) + " (" + fmt.Sprint(row[di]) + ")"
		by[k] += toF(row[ri])
		if toF(row[ri]) > 0 && (worst == "" || by[k] > by[worst] || by[k] == by[worst] && k < worst) {
			worst = k
		}
	}
	s += fmt.Sprintf("; most of them at %s: %s", worst, fmtNum(by[worst]))
	if pe := shadowEvaluated(old); pe > 0 {
		s += fmt.Sprintf(". The week before: %.1f %%", 100*sumCol(old, "would_refuse")/pe)
	}
	return s + ". Enforced, these grants would have waited in the queue or been refused, and the traffic behind them would have changed too."
}

// budgetSummary says per budget and window what its holders spent of the
// limit, by provider, and what is still leased unspent: the rows give the
// same per holder, the sentence adds them up (each holder's counters are
// its own, so the budget's spent is their sum).
func budgetSummary(res *analytics.Result) string {
	if res == nil || len(res.Rows) == 0 {
		return "No lease messages in this range: no cross-scope budget (ledger.budget) was spent."
	}
	type burn struct {
		budget, unit string
		window       float64
		limit        float64
		spent, out   float64
		by           []string
	}
	var order []string
	all := map[string]*burn{}
	bi, ui, wi, li := res.Col("budget"), res.Col("unit"), res.Col("window_start_ms"), res.Col("budget_limit")
	pi, si, oi := res.Col("provider"), res.Col("spent"), res.Col("outstanding")
	for _, row := range res.Rows {
		k := fmt.Sprint(row[bi]) + "@" + fmtVal(row[wi])
		b := all[k]
		if b == nil {
			b = &burn{budget: fmt.Sprint(row[bi]), unit: fmt.Sprint(row[ui]), window: toF(row[wi]), limit: toF(row[li])}
			all[k] = b
			order = append(order, k)
		}
		b.spent += toF(row[si])
		b.out += toF(row[oi])
		b.by = append(b.by, fmt.Sprintf("%s %s", row[pi], fmtNum(toF(row[si]))))
	}
	var parts []string
	for _, k := range order {
		b := all[k]
		win := day(time.UnixMilli(int64(b.window)))
		p := fmt.Sprintf("%s (window from %s): %s", b.budget, win, fmtNum(b.spent))
		if b.limit > 0 {
			p += fmt.Sprintf(" of %s %s spent (%.1f %%)", fmtNum(b.limit), b.unit, 100*b.spent/b.limit)
			if b.spent > b.limit {
				p += fmt.Sprintf(", OVERSPENT by %s", fmtNum(b.spent-b.limit))
			}
		} else {
			p += " spent (no limit in the log's config)"
		}
		p += " — " + strings.Join(b.by, ", ")
		if b.out > 0 {
			p += fmt.Sprintf("; %s leased and not spent", fmtNum(b.out))
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ") + "."
}

// shadowEvaluated sums the evaluated grants once per scope, tenant and
// class (every row of a group repeats the group's total).
func shadowEvaluated(res *analytics.Result) float64 {
	if res == nil {
		return 0
	}
	si, ti, ci, ei := res.Col("scope"), res.Col("tenant"), res.Col("class"), res.Col("evaluated")
	if si < 0 || ti < 0 || ci < 0 || ei < 0 {
		return 0
	}
	seen := map[string]bool{}
	t := 0.0
	for _, row := range res.Rows {
		k := fmt.Sprint(row[si], "\x00", row[ti], "\x00", row[ci])
		if !seen[k] {
			seen[k] = true
			t += toF(row[ei])
		}
	}
	return t
}

// Script is the SQL that Build runs on ClickHouse over a range, in the
// same order and with the same parallelism: Setup takes the snapshot of
// both weeks (its statements at once), Weeks[0] are this week's queries
// and Weeks[1] the previous week's (the two weeks side by side), and
// Teardown drops the snapshot. `sluice bench report` runs it through
// clickhouse-client as the fixed reference its timing is a ratio of.
type Script struct {
	Setup, Teardown []string
	Weeks           [2][]string
}

// SQL returns the Script of a report over r on database.
func SQL(ctx context.Context, conn driver.Conn, database string, r analytics.Range) (*Script, error) {
	prev := analytics.Range{From: r.From.Add(-r.To.Sub(r.From)), To: r.From}
	t, creates, drops, err := analytics.SnapshotSQL(ctx, conn, database, analytics.Range{From: prev.From, To: r.To})
	if err != nil {
		return nil, err
	}
	sc := &Script{Setup: creates, Teardown: drops}
	for i, rr := range []analytics.Range{r, prev} {
		for _, s := range specs {
			q, err := analytics.QueryByName(s.name)
			if err != nil {
				return nil, err
			}
			sc.Weeks[i] = append(sc.Weeks[i], q.RenderIn(database, rr, t))
		}
	}
	return sc, nil
}
