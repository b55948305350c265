//go:build integration

package report

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/analytics"
	"github.com/sluice-dev/sluice/analytics/analyticstest"
	"github.com/sluice-dev/sluice/analytics/synth"
)

// TestIntegrationStormReport: the weekly report over the storm recorded
// from the real gateway (../testdata/recorded-oracle-storm.jsonl.gz: 429
// and 503 storms, retries without a ReserveRequested, cancels) proposes
// no capacity cut for the storm and no input correction (the estimates
// are right; the retries no longer read as estimate 0). With -update it
// writes the sample HTML report to testdata/storm-report.html.
func TestIntegrationStormReport(t *testing.T) {
	recs, err := synth.ReadLog("../testdata/recorded-oracle-storm.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	conn, db := analyticstest.SinkFixture(t, recs)
	src := NewClickHouse(conn, db)
	defer src.Close()
	day := time.UnixMilli(recs[0].LogTimeMs).UTC().Truncate(24 * time.Hour)
	rep, err := Build(context.Background(), src, analytics.Range{From: day, To: day.Add(24 * time.Hour)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Recommendations {
		t.Logf("%s %s: %v → %v (%s)", r.Kind, r.Target, r.Current, r.Recommended, r.Reason)
		if r.Kind == KindRouteInputCorrection || r.Kind == KindBucketCapacity {
			t.Errorf("recommends %s for %s on the storm", r.Kind, r.Target)
		}
	}
	if len(rep.Patch.Buckets) > 0 || len(rep.Patch.Routes) > 0 && rep.Patch.Routes[0].InputCorrection != 0 {
		t.Errorf("patch: %+v", rep.Patch)
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("testdata/storm-report.html", b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The committed sample is this report: regenerated, byte for byte,
	// with the storm's advice and neither a capacity cut nor an input
	// correction in it.
	committed, err := os.ReadFile("testdata/storm-report.html")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, b.Bytes()) {
		t.Errorf("testdata/storm-report.html is not the report of the recorded storm (regenerate with -update after review)")
	}
	for _, kind := range []string{string(KindRouteInputCorrection), string(KindBucketCapacity)} {
		if bytes.Contains(committed, []byte("<li><b>"+kind+"</b>")) {
			t.Errorf("the sample report recommends %s", kind)
		}
	}
	if !bytes.Contains(committed, []byte("<li><b>"+string(KindProviderStorm)+"</b>")) {
		t.Errorf("the sample report has no %s advice for the storm", KindProviderStorm)
	}
}
