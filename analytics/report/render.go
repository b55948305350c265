package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Formats `sluice report --format` accepts.
var Formats = []string{"md", "json", "html"}

// Write renders rep in format (md, json or html).
func Write(w io.Writer, rep *Report, format string) error {
	switch format {
	case "md":
		return WriteMarkdown(w, rep)
	case "json":
		return WriteJSON(w, rep)
	case "html":
		return WriteHTML(w, rep)
	}
	return fmt.Errorf("unknown format %q (want %s)", format, strings.Join(Formats, ", "))
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// fmtNum prints integers as integers and other values with up to four
// significant decimals, so golden files stay stable and readable.
func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatInt(int64(v), 10)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

func fmtVal(v any) string {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return fmtNum(x)
	case string:
		if x == "" {
			return "(none)"
		}
		return strings.ReplaceAll(x, "|", "\\|")
	}
	return fmt.Sprint(v)
}

// fmtDelta prints a week-over-week change: the difference, and the
// relative change when the previous value is not zero.
func fmtDelta(cur float64, prev *float64) string {
	if prev == nil {
		return "new"
	}
	d := cur - *prev
	s := fmtNum(d)
	if d >= 0 {
		s = "+" + s
	}
	if *prev != 0 {
		s += fmt.Sprintf(" (%+.1f%%)", 100*d/math.Abs(*prev))
	}
	return s
}

func day(t time.Time) string { return t.UTC().Format("2006-01-02") }

// WriteMarkdown writes the report for review in a pull request.
func WriteMarkdown(w io.Writer, rep *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sluice calibration report %s – %s\n\n", day(rep.From), day(rep.To))
	fmt.Fprintf(&b, "Range [%s, %s); week-over-week changes against [%s, %s).\n\n",
		rep.From.Format(time.RFC3339), rep.To.Format(time.RFC3339), rep.PrevFrom.Format(time.RFC3339), rep.PrevTo.Format(time.RFC3339))
	b.WriteString("## Headline\n\n| metric | value | week over week | better |\n|---|---:|---:|---|\n")
	for _, h := range rep.Headline {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", h.Name, fmtNum(h.Value), fmtDelta(h.Value, h.Prev), h.Better)
	}
	b.WriteString("\n## Recommendations\n\n")
	if len(rep.Recommendations) == 0 {
		b.WriteString("None: every estimate and limit is within its bounds.\n")
	}
	for i, r := range rep.Recommendations {
		patch := "in the patch"
		if !r.InPatch {
			patch = "advice, not in the patch"
		}
		fmt.Fprintf(&b, "%d. **%s** `%s`: %s → %s (%s). %s.\n", i+1, r.Kind, r.Target, fmtNum(r.Current), fmtNum(r.Recommended), patch, r.Reason)
		for _, e := range r.Evidence {
			fmt.Fprintf(&b, "   - %s: %s\n", e.Name, fmtNum(e.Value))
		}
		if r.Effect != "" {
			fmt.Fprintf(&b, "   - expected effect: %s\n", r.Effect)
		}
	}
	b.WriteString("\n## Config patch\n\nApply with `sluice config apply --config <gateway.yaml> PATCH` (shows the diff; `--yes` installs it).\n\n```json\n")
	pj, err := json.MarshalIndent(rep.Patch, "", "  ")
	if err != nil {
		return err
	}
	b.Write(pj)
	b.WriteString("\n```\n")
	for _, s := range rep.Sections {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n\n", s.Title, s.Doc)
		if s.Summary != "" {
			fmt.Fprintf(&b, "**%s**\n\n", s.Summary)
		}
		if len(s.Rows) == 0 {
			b.WriteString("No rows in this range.\n")
			continue
		}
		b.WriteString("| " + strings.Join(s.Columns, " | ") + " | Δ " + s.Value + " wow |\n|")
		for range s.Columns {
			b.WriteString("---|")
		}
		b.WriteString("---|\n")
		vi := -1
		for i, c := range s.Columns {
			if c == s.Value {
				vi = i
			}
		}
		for ri, row := range s.Rows {
			cells := make([]string, len(row))
			for i, v := range row {
				cells[i] = fmtVal(v)
			}
			delta := "–"
			if vi >= 0 {
				delta = fmtDelta(toF(row[vi]), s.Prev[ri])
			}
			b.WriteString("| " + strings.Join(cells, " | ") + " | " + delta + " |\n")
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}
