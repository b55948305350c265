package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/analytics"
)

var update = flag.Bool("update", false, "rewrite the golden files and recorded results (integration test)")

// recorded is a Source that replays query results recorded from the real
// ClickHouse by TestIntegrationReportGolden (testdata/results.json).
type recorded map[string]*analytics.Result

func recKey(q string, r analytics.Range) string {
	return fmt.Sprintf("%s@%d-%d", q, r.From.Unix(), r.To.Unix())
}

func (rc recorded) Run(_ context.Context, q analytics.Query, r analytics.Range) (*analytics.Result, error) {
	res, ok := rc[recKey(q.Name, r)]
	if !ok {
		return nil, fmt.Errorf("no recorded result for %s", recKey(q.Name, r))
	}
	return res, nil
}

// loadRecorded reads testdata/results.json; JSON numbers come back as
// float64, so integral columns are restored to int64 as the driver gives.
func loadRecorded(t *testing.T) recorded {
	t.Helper()
	b, err := os.ReadFile("testdata/results.json")
	if err != nil {
		t.Fatalf("%v (recorded by `go test -tags integration ./analytics/report -run Golden -update`)", err)
	}
	var raw map[string]struct {
		Columns []string `json:"columns"`
		Rows    [][]any  `json:"rows"`
		Ints    []bool   `json:"ints"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	out := recorded{}
	for k, r := range raw {
		res := &analytics.Result{Columns: r.Columns}
		for _, row := range r.Rows {
			for i := range row {
				if f, ok := row[i].(float64); ok && r.Ints[i] {
					row[i] = int64(f)
				}
			}
			res.Rows = append(res.Rows, row)
		}
		out[k] = res
	}
	return out
}

// goldenRange is the fixture's report week: Monday 2026-11-23.
func goldenRange() analytics.Range {
	from := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	return analytics.Range{From: from, To: from.AddDate(0, 0, 7)}
}

func checkGolden(t *testing.T, rep *Report) {
	t.Helper()
	for _, f := range []string{"md", "json"} {
		var buf bytes.Buffer
		if err := Write(&buf, rep, f); err != nil {
			t.Fatal(err)
		}
		path := "testdata/report.golden." + f
		if *update {
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), want) {
			os.WriteFile(path+".got", buf.Bytes(), 0o644)
			t.Errorf("%s differs from %s (see %s.got; regenerate with -update after review)", f, path, path)
		}
	}
}

// TestReportGoldenReplay renders the report from the results the
// integration test recorded from ClickHouse; it must match the same golden
// files, byte for byte. Under -update it writes them from those results,
// which is the same bytes the integration test writes.
func TestReportGoldenReplay(t *testing.T) {
	rep, err := Build(context.Background(), loadRecorded(t), goldenRange(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, rep)
}

func TestReportRecommendsBoundedCorrections(t *testing.T) {
	rep, err := Build(context.Background(), loadRecorded(t), goldenRange(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out *RoutePatch
	for i := range rep.Patch.Routes {
		if rep.Patch.Routes[i].Route == "chat-4x" {
			out = &rep.Patch.Routes[i]
		}
	}
	if out == nil || out.P95OutputTokens == 0 {
		t.Fatalf("no output estimate for the 4x route: %+v", rep.Patch.Routes)
	}
	for _, r := range rep.Patch.Routes {
		if r.InputCorrection != 0 && (r.InputCorrection < 0.9 || r.InputCorrection > 1.1) {
			t.Errorf("%s input correction %v outside ±10%%", r.Route, r.InputCorrection)
		}
	}
	for _, r := range rep.Recommendations {
		if len(r.Evidence) == 0 {
			t.Errorf("%s %s has no evidence", r.Kind, r.Target)
		}
	}
	for _, h := range rep.Headline {
		if h.Prev == nil {
			t.Errorf("headline %s has no week-over-week value", h.Name)
		}
	}
}

func TestReportNoData(t *testing.T) {
	empty := recorded{}
	for k, v := range loadRecorded(t) {
		empty[k] = &analytics.Result{Columns: v.Columns}
	}
	_, err := Build(context.Background(), empty, goldenRange(), Options{})
	if err == nil || !errors.Is(err, ErrNoData) {
		t.Fatalf("err = %v, want ErrNoData", err)
	}
}

func TestLastFullWeek(t *testing.T) {
	for _, c := range []struct{ now, from string }{
		{"2026-12-01T09:00:00Z", "2026-11-23"}, // Tuesday
		{"2026-11-30T00:00:00Z", "2026-11-23"}, // Monday midnight
		{"2026-11-29T23:59:59Z", "2026-11-16"}, // Sunday
	} {
		now, _ := time.Parse(time.RFC3339, c.now)
		r := LastFullWeek(now)
		if r.From.Format("2006-01-02") != c.from || r.To.Sub(r.From) != 7*24*time.Hour {
			t.Errorf("LastFullWeek(%s) = %v – %v, want from %s", c.now, r.From, r.To, c.from)
		}
	}
}
