//go:build integration

package report

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/analytics"
	"github.com/sluice-dev/sluice/analytics/analyticstest"
	"github.com/sluice-dev/sluice/analytics/synth"
)

// TestIntegrationReportGolden: two generated weeks through the real Kafka
// and sink into ClickHouse 18.16, the report of the second week must match
// the golden markdown and JSON. With -update it rewrites them and the
// recorded query results the unit tests replay.
func TestIntegrationReportGolden(t *testing.T) {
	rng := goldenRange()
	recs := synth.Generate(synth.Options{Seed: 11, Requests: 4000, StartMs: rng.From.AddDate(0, 0, -7).UnixMilli(), SpanMs: 14 * 86400 * 1000})
	conn, db := analyticstest.SinkFixture(t, recs)
	src := NewClickHouse(conn, db)
	defer src.Close()
	rc := &recorder{src: src, got: recorded{}}
	var progress strings.Builder
	rep, err := Build(context.Background(), rc, rng, Options{Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "report: 36/36") {
		t.Errorf("progress lines: %q", progress.String())
	}
	if *update {
		saveRecorded(t, rc.got)
	}
	checkGolden(t, rep)

	_, err = Build(context.Background(), &ClickHouse{Conn: conn, Database: db}, analytics.Range{From: rng.From.AddDate(1, 0, 0), To: rng.To.AddDate(1, 0, 0)}, Options{})
	if !errors.Is(err, ErrNoData) {
		t.Errorf("empty range: err = %v, want ErrNoData", err)
	}
}

// recorder wraps a Source and keeps what it returned.
type recorder struct {
	src Source
	got recorded
}

func (rc *recorder) Run(ctx context.Context, q analytics.Query, r analytics.Range) (*analytics.Result, error) {
	res, err := rc.src.Run(ctx, q, r)
	if err == nil {
		rc.got[recKey(q.Name, r)] = res
	}
	return res, err
}

func saveRecorded(t *testing.T, rc recorded) {
	t.Helper()
	type rr struct {
		Columns []string `json:"columns"`
		Rows    [][]any  `json:"rows"`
		Ints    []bool   `json:"ints"`
	}
	out := map[string]rr{}
	for k, r := range rc {
		ints := make([]bool, len(r.Columns))
		for i := range ints {
			ints[i] = len(r.Rows) > 0
			for _, row := range r.Rows {
				if _, ok := row[i].(int64); !ok {
					ints[i] = false
				}
			}
		}
		out[k] = rr{r.Columns, r.Rows, ints}
	}
	b, _ := json.MarshalIndent(out, "", " ")
	if err := os.WriteFile("testdata/results.json", append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
