//go:build integration

package loop

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
	if res.After.StrandedTokenS >= res.Before.StrandedTokenS {
		t.Errorf("stranded token·s %v after, %v before", res.After.StrandedTokenS, res.Before.StrandedTokenS)
	}
	if res.After.OK <= res.Before.OK {
		t.Errorf("requests served %d after, %d before", res.After.OK, res.Before.OK)
	}
	if res.After.Provider429 != 0 {
		t.Errorf("%d provider 429s after calibration", res.After.Provider429)
	}
}
