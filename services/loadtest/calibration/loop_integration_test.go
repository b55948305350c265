//go:build integration

package calibration

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestIntegrationLoopCloses: the report of a run that reserves 4× the
// output recommends the route's p95 output, the patch installs it, and the
// rerun strands less quota, serves more, and draws no provider 429.
func TestIntegrationLoopCloses(t *testing.T) {
	res, err := Run(context.Background(), Options{ClickHouseAddr: testenv.ClickHouseAddr(t), Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("loop:\n%s", b)
	var p95 int64
	for _, r := range res.Patch.Routes {
		if r.Route == "gpt-4o-mini" {
			p95 = r.P95OutputTokens
		}
	}
	if p95 == 0 || p95 >= 400 {
		t.Fatalf("no bounded output estimate for the route: %+v", res.Patch.Routes)
	}
	if len(res.Changes) == 0 {
		t.Fatal("the patch changed nothing in the gateway configuration")
	}
	// Stranded quota per served request: the patch lets more requests
	// through in the same 20 s (each a hold), and stranded quota now counts
	// every hold (retries', expired and late-granted ones, issue 22), so the
	// total grows with throughput; what calibration must cut is what each
	// hold strands (a run measured 315 → 231 token·s a request, while the
	// total went 47,822 → 56,590 with 152 → 245 served).
	if res.Before.OK == 0 || res.After.OK == 0 {
		t.Fatalf("requests served %d before, %d after", res.Before.OK, res.After.OK)
	}
	before, after := res.Before.StrandedTokenS/float64(res.Before.OK), res.After.StrandedTokenS/float64(res.After.OK)
	if after >= before {
		t.Errorf("stranded token·s per served request %.1f after, %.1f before (totals %v, %v)", after, before, res.After.StrandedTokenS, res.Before.StrandedTokenS)
	}
	if res.After.OK <= res.Before.OK {
		t.Errorf("requests served %d after, %d before", res.After.OK, res.Before.OK)
	}
	if res.After.Provider429 != 0 {
		t.Errorf("%d provider 429s after calibration", res.After.Provider429)
	}
}
