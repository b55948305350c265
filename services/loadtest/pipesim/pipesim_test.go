package pipesim

import (
	"flag"
	"fmt"
	"reflect"
	"testing"
)

// make simulate runs: go test -tags invariants ./services/loadtest/pipesim -run TestPipeline -count=1 -seeds=N
// (the tag makes the ledger, the budget machine and the lifecycle check
// their invariants after every step: internal/invariants).
// A failing seed prints the command that reruns it alone.
var (
	seedsFlag = flag.Int("seeds", 20, "how many seeds TestPipeline runs (from -first)")
	firstFlag = flag.Uint64("first", 1, "the first seed")
	seedFlag  = flag.Uint64("seed", 0, "run this one seed (0: -seeds seeds from -first)")
)

func TestPipeline(t *testing.T) {
	seeds := make([]uint64, 0, *seedsFlag)
	if *seedFlag != 0 {
		seeds = append(seeds, *seedFlag)
	} else {
		for i := range *seedsFlag {
			seeds = append(seeds, *firstFlag+uint64(i))
		}
	}
	var total Stats
	failed := 0
	for _, seed := range seeds {
		res := Run(seed, Options{})
		add(&total, res.Stats)
		if len(res.Problems) > 0 {
			failed++
			t.Errorf("seed %d: %d problems; rerun: go test -tags invariants ./services/loadtest/pipesim -run TestPipeline -count=1 -seed=%d -v\n  %s",
				seed, len(res.Problems), seed, join(res.Problems))
		} else if *seedFlag != 0 || testing.Verbose() {
			t.Logf("seed %d: %+v", seed, res.Stats)
		}
	}
	t.Logf("%d seeds, %d failed; totals %+v", len(seeds), failed, total)
	if len(seeds) >= 5 && (total.Rides == 0 || total.Alone == 0) {
		// The coalesced reconciles' two ways out must both be exercised.
		t.Errorf("reconciles: %d rode with a later event, %d went when their linger ran out; want both > 0", total.Rides, total.Alone)
	}
	if len(seeds) >= 5 && (total.LateGrants == 0 || total.Retries == 0 || total.Cancels == 0 || total.Streams == 0) {
		// The gateway shell's paths beyond reserve → dispatch → reconcile.
		t.Errorf("late grants %d, retries %d, cancels %d, streams %d: want all > 0", total.LateGrants, total.Retries, total.Cancels, total.Streams)
	}
	if len(seeds) >= 5 && total.DeadlineChecked == 0 {
		// The deadline-minus-service-time check (checkDeadline) saw no
		// grant with a deadline: it would pass whatever the ledger did.
		t.Errorf("no grant with a deadline was checked against its service time")
	}
}

// TestForgedRequestsRefused: requests past tenant t2's entitlement
// (priority 100, as an event that no gateway checked) are refused by the
// ledger through crashes, lost and duplicated decisions and retries: none
// is dispatched (the run's auditor), none within the entitlement is
// refused, and all but those whose client left first get 403
// priority_not_entitled.
func TestForgedRequestsRefused(t *testing.T) {
	var total Stats
	for seed := uint64(1); seed <= 20; seed++ {
		res := Run(seed, Options{ForgeEvery: 3})
		add(&total, res.Stats)
		if len(res.Problems) > 0 {
			t.Errorf("seed %d: %d problems\n  %s", seed, len(res.Problems), join(res.Problems))
		}
	}
	t.Logf("totals %+v", total)
	if total.Forged == 0 || total.ForgedRefused*10 < total.Forged*9 {
		t.Errorf("%d of %d forged requests refused priority_not_entitled", total.ForgedRefused, total.Forged)
	}
}

// TestSameSeedSameRun: one seed reproduces a run exactly.
func TestSameSeedSameRun(t *testing.T) {
	for _, seed := range []uint64{7, 8} {
		a, b := Run(seed, Options{}), Run(seed, Options{})
		if !reflect.DeepEqual(a, b) {
			t.Errorf("seed %d: two runs differ:\n %+v\n %+v", seed, a, b)
		}
	}
}

// TestRegressionSeeds pins seeds beyond make simulate's default range that
// once failed, with what each must have exercised.
func TestRegressionSeeds(t *testing.T) {
	for _, c := range []struct {
		seed uint64
		why  string
		ok   func(Stats) bool
	}{
		// A re-derivation by another version put another request's
		// decision at the key of an acted-on grant: the auditor must
		// still count that grant as exposed (the ledger charged it).
		{402, "usage charged on ungranted reservations", func(s Stats) bool { return s.VersionChanges > 0 && s.Ungranted > 0 }},
		// An old-version zombie's queued decision shadowed the new
		// owner's grant at the same position; the hold TTL released it.
		// (Seed 543 until the storm policy of issue 10 (retry jitter on top
		// of Retry-After, retry budget defaults) moved its run off that
		// path; 222 takes it now.)
		{222, "a grant shadowed behind a zombie's decision", func(s Stats) bool { return s.Zombies > 0 && s.Shadowed > 0 }},
		// An upgraded owner crashed before deciding and went on as a
		// zombie: it must read the re-derived round as its version does.
		// (Seed 4437 until the ledger's learned service time (issue 20)
		// refused some attempts with short deadlines and moved its run off
		// that path; 4411 takes it now.)
		{4411, "a zombie of the upgraded version", func(s Stats) bool { return s.Zombies > 0 && s.VersionChanges > 0 }},
		// The same, the zombie deciding the re-derived round first.
		{3179, "a zombie of the upgraded version re-deriving", func(s Stats) bool { return s.Zombies > 1 && s.VersionChanges > 0 }},
	} {
		res := Run(c.seed, Options{})
		if len(res.Problems) > 0 {
			t.Errorf("seed %d (%s): %d problems:\n  %s", c.seed, c.why, len(res.Problems), join(res.Problems))
		}
		if !c.ok(res.Stats) {
			t.Errorf("seed %d no longer exercises %s: %+v", c.seed, c.why, res.Stats)
		}
	}
}

func add(t *Stats, s Stats) {
	tv, sv := reflect.ValueOf(t).Elem(), reflect.ValueOf(s)
	for i := range tv.NumField() {
		tv.Field(i).SetInt(tv.Field(i).Int() + sv.Field(i).Int())
	}
}

func join(ps []string) string {
	out := ""
	for i, p := range ps {
		if i > 0 {
			out += "\n  "
		}
		out += fmt.Sprint(p)
	}
	return out
}

// TestBudgetAcrossScopes runs the pipeline with tenant t1's budget over
// both scopes (Options.Budget: leases between the scope partitions and the
// budget partition, through crashes with aborted rounds, zombies, stalls
// and late delivery) against the conservation auditor, and checks that
// the budget was the limit: t1 got about its budget, no more.
func TestBudgetAcrossScopes(t *testing.T) {
	var total Stats
	for seed := uint64(1); seed <= 20; seed++ {
		res := Run(seed, Options{Budget: 30})
		add(&total, res.Stats)
		if len(res.Problems) > 0 {
			t.Errorf("seed %d: %d problems; rerun: go test -tags invariants ./services/loadtest/pipesim -run TestBudgetAcrossScopes -count=1 -v\n  %s",
				seed, len(res.Problems), join(res.Problems))
		}
	}
	t.Logf("totals %+v", total)
	if total.BudgetLeaseMsgs == 0 || total.BudgetDenied == 0 {
		t.Errorf("no lease messages (%d) or no budget denials (%d): the run did not exercise the budget", total.BudgetLeaseMsgs, total.BudgetDenied)
	}
}
