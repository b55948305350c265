package pipesim

import (
	"reflect"
	"testing"
)

// TestPipelineLoop runs the real ledger-service loop (ledgerd.Service.Round)
// over the simulated broker, one run per seed of -seeds/-first/-seed, as
// TestPipeline does for the modelled pipeline; make simulate's
// `-run TestPipeline` runs both. A failing seed prints the command that
// reruns it alone.
func TestPipelineLoop(t *testing.T) {
	seeds := make([]uint64, 0, *seedsFlag)
	if *seedFlag != 0 {
		seeds = append(seeds, *seedFlag)
	} else {
		for i := range *seedsFlag {
			seeds = append(seeds, *firstFlag+uint64(i))
		}
	}
	var total LoopStats
	failed := 0
	for _, seed := range seeds {
		res := RunLoop(seed, LoopOptions{})
		addLoop(&total, res.Stats)
		if len(res.Problems) > 0 {
			failed++
			t.Errorf("seed %d: %d problems; rerun: go test ./services/loadtest/pipesim -run TestPipelineLoop -count=1 -seed=%d -v\n  %s",
				seed, len(res.Problems), seed, join(res.Problems))
		} else if *seedFlag != 0 || testing.Verbose() {
			t.Logf("seed %d: %+v", seed, res.Stats)
		}
	}
	t.Logf("%d seeds, %d failed; totals %+v", len(seeds), failed, total)
	if len(seeds) >= 10 && (total.Crashes == 0 || total.Revokes == 0 || total.Fences == 0 || total.Backlogs == 0 || total.Rebuilds == 0 || total.Snapshots == 0) {
		t.Errorf("the seeds did not exercise every fault: %+v", total)
	}
}

// TestLoopSameSeedSameRun: one seed reproduces a run of the real loop
// exactly (its map iterations and off-loop work included).
func TestLoopSameSeedSameRun(t *testing.T) {
	for _, seed := range []uint64{3, 4} {
		a, b := RunLoop(seed, LoopOptions{}), RunLoop(seed, LoopOptions{})
		if !reflect.DeepEqual(a, b) {
			t.Errorf("seed %d: two runs differ:\n %+v\n %+v", seed, a, b)
		}
	}
}

func addLoop(t *LoopStats, s LoopStats) {
	tv, sv := reflect.ValueOf(t).Elem(), reflect.ValueOf(s)
	for i := range tv.NumField() {
		tv.Field(i).SetInt(tv.Field(i).Int() + sv.Field(i).Int())
	}
}
