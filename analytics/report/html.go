package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

// ChartLabelWidth is the width of a chart's label column, in CSS pixels;
// bars start there.
const ChartLabelWidth = 330

// Chart colours. The HTML test finds the charts in the rendered PNG by
// these exact colours.
const (
	ColorThisWeek = "#1f6feb"
	ColorPrevWeek = "#f0883e"
)

// chart is one grouped bar chart: a bar per label for this week and one
// for the week before.
type chart struct {
	title, unit string
	labels      []string
	cur, prev   []float64 // prev NaN = no previous value
}

// charts picks what a person would rather look at than read.
func charts(rep *Report) []chart {
	var out []chart
	sec := func(name string) *Section {
		for i := range rep.Sections {
			if rep.Sections[i].Name == name {
				return &rep.Sections[i]
			}
		}
		return nil
	}
	add := func(name, title, unit string, keep func(s *Section, row []any) bool, label func(s *Section, row []any) string) {
		s := sec(name)
		if s == nil {
			return
		}
		c := chart{title: title, unit: unit}
		vi := col(s, s.Value)
		for ri, row := range s.Rows {
			if keep != nil && !keep(s, row) {
				continue
			}
			c.labels = append(c.labels, label(s, row))
			c.cur = append(c.cur, toF(row[vi]))
			if s.Prev[ri] != nil {
				c.prev = append(c.prev, *s.Prev[ri])
			} else {
				c.prev = append(c.prev, math.NaN())
			}
		}
		if len(c.labels) > 0 {
			out = append(out, c)
		}
	}
	keys := func(s *Section, row []any) string {
		var parts []string
		for _, k := range s.Keys {
			if k == "by" {
				continue
			}
			parts = append(parts, fmtVal(row[col(s, k)]))
		}
		return strings.Join(parts, " ")
	}
	by := func(v string) func(s *Section, row []any) bool {
		return func(s *Section, row []any) bool { return row[col(s, "by")] == v }
	}
	add("estimation_error", "Output estimation bias by route", "(estimate − actual) ÷ actual", by("route"), keys)
	add("stranded_quota", "Stranded quota by bucket", "token·s", nil, keys)
	add("stranded_by_owner", "Stranded quota by tenant, route and class", "token·s", nil, keys)
	add("queue_wait", "Queue wait p95 by class", "ms", nil, keys)
	add("retry_amplification", "Upstream attempts per logical request (every layer's retries)", "attempts per logical request",
		func(s *Section, row []any) bool { return row[col(s, "provider")] != "" }, keys)
	add("ratio_429", "Provider 429 ratio by model", "429s ÷ upstream attempts", by("model"), keys)
	add("outcome_mix", "Outcome mix", "share of requests", nil, keys)
	add("budget_burn", "Budget burn by provider", "% of the budget's limit spent", nil, func(s *Section, row []any) string {
		return fmtVal(row[col(s, "budget")]) + " " + day(time.UnixMilli(int64(toF(row[col(s, "window_start_ms")])))) + " " + fmtVal(row[col(s, "holder")])
	})
	return out
}

func col(s *Section, name string) int {
	for i, c := range s.Columns {
		if c == name {
			return i
		}
	}
	return -1
}

// svg draws a chart as inline SVG: horizontal bars, this week above the
// week before, values printed at the bar ends.
func (c chart) svg() string {
	const w, left, barH, gap = 900, ChartLabelWidth, 12, 10
	h := 40 + len(c.labels)*(2*barH+gap) + 20
	maxV := 0.0
	for i := range c.cur {
		maxV = math.Max(maxV, math.Abs(c.cur[i]))
		if !math.IsNaN(c.prev[i]) {
			maxV = math.Max(maxV, math.Abs(c.prev[i]))
		}
	}
	if maxV == 0 {
		maxV = 1
	}
	scale := float64(w-left-90) / maxV
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, w, h, w, h, html.EscapeString(c.title))
	fmt.Fprintf(&b, `<text x="0" y="18" font-size="15" font-weight="bold">%s</text>`, html.EscapeString(c.title))
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="11" fill="#555" text-anchor="end">%s</text>`, w, html.EscapeString(c.unit))
	y := 36
	for i, l := range c.labels {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" text-anchor="end">%s</text>`, left-8, y+barH+4, html.EscapeString(l))
		bar := func(v float64, color string, yy int) {
			bw := math.Max(3, math.Abs(v)*scale) // a zero still shows
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`, left, yy, bw, barH, color, fmtNum(v))
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="11">%s</text>`, float64(left)+bw+4, yy+barH-2, fmtNum(v))
		}
		bar(c.cur[i], ColorThisWeek, y)
		if !math.IsNaN(c.prev[i]) {
			bar(c.prev[i], ColorPrevWeek, y+barH)
		}
		y += 2*barH + gap
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// WriteHTML writes a self-contained page: headline cards, charts (inline
// SVG), recommendations and every metric table. It loads nothing.
func WriteHTML(w io.Writer, rep *Report) error {
	var b strings.Builder
	title := fmt.Sprintf("Sluice calibration report %s – %s", day(rep.From), day(rep.To))
	fmt.Fprintf(&b, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>%s</title><style>
body{font-family:"DejaVu Sans",sans-serif;margin:24px;color:#1b1f24;max-width:1100px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;min-width:150px}
.card b{display:block;font-size:20px}.good{color:#1a7f37}.bad{color:#cf222e}
table{border-collapse:collapse;font-size:12px;margin:8px 0 20px}td,th{border:1px solid #d0d7de;padding:3px 6px;text-align:right}
td:first-child,th:first-child{text-align:left}.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
</style></head><body>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<h1>%s</h1><p>Week over week against %s – %s.</p><div class="cards">`, html.EscapeString(title), day(rep.PrevFrom), day(rep.PrevTo))
	for _, h := range rep.Headline {
		cls := ""
		if h.Delta != nil && *h.Delta != 0 && h.Better != "" {
			if (*h.Delta > 0) == (h.Better == "up") {
				cls = "good"
			} else {
				cls = "bad"
			}
		}
		fmt.Fprintf(&b, `<div class="card">%s<b>%s</b><span class="%s">%s</span></div>`, html.EscapeString(h.Name), fmtNum(h.Value), cls, html.EscapeString(fmtDelta(h.Value, h.Prev)))
	}
	b.WriteString(`</div><p class="legend"><span style="background:` + ColorThisWeek + `"></span>this week<span style="background:` + ColorPrevWeek + `"></span>previous week</p>`)
	for _, c := range charts(rep) {
		b.WriteString(`<div class="chart">` + c.svg() + `</div>`)
	}
	b.WriteString(`<h2>Recommendations</h2><ol>`)
	for _, r := range rep.Recommendations {
		fmt.Fprintf(&b, `<li><b>%s</b> <code>%s</code>: %s → %s. %s<ul>`, html.EscapeString(r.Kind), html.EscapeString(r.Target), fmtNum(r.Current), fmtNum(r.Recommended), html.EscapeString(r.Reason))
		for _, e := range r.Evidence {
			fmt.Fprintf(&b, `<li>%s: %s</li>`, html.EscapeString(e.Name), fmtNum(e.Value))
		}
		if r.Effect != "" {
			fmt.Fprintf(&b, `<li>expected effect: %s</li>`, html.EscapeString(r.Effect))
		}
		b.WriteString(`</ul></li>`)
	}
	b.WriteString(`</ol>`)
	for _, s := range rep.Sections {
		fmt.Fprintf(&b, `<h2>%s</h2><p>%s</p>`, html.EscapeString(s.Title), html.EscapeString(s.Doc))
		if s.Summary != "" {
			fmt.Fprintf(&b, `<p><b>%s</b></p>`, html.EscapeString(s.Summary))
		}
		b.WriteString(`<table><tr>`)
		for _, c := range s.Columns {
			fmt.Fprintf(&b, `<th>%s</th>`, html.EscapeString(c))
		}
		fmt.Fprintf(&b, `<th>Δ %s wow</th></tr>`, html.EscapeString(s.Value))
		vi := col(&s, s.Value)
		for ri, row := range s.Rows {
			b.WriteString(`<tr>`)
			for _, v := range row {
				fmt.Fprintf(&b, `<td>%s</td>`, html.EscapeString(fmtVal(v)))
			}
			fmt.Fprintf(&b, `<td>%s</td></tr>`, html.EscapeString(fmtDelta(toF(row[vi]), s.Prev[ri])))
		}
		b.WriteString(`</table>`)
	}
	b.WriteString(`</body></html>` + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}
