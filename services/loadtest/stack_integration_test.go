//go:build integration

package loadtest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
)

// buildSluice builds the sluice binary the stack's processes run.
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command("go", "build", "-o", bin, "./services/sluice")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	return bin
}

// runStack runs noisy-neighbor for 60 s on the real broker through the
// stack of separate processes: the simulator, two `sluice ledger` at their
// default snapshot, session and transaction settings, and a gateway.
func runStack(t *testing.T, o Options) *Report {
	t.Helper()
	sc, err := LoadScenario("noisy-neighbor", "../../deploy/scenarios")
	if err != nil {
		t.Fatal(err)
	}
	o.Brokers = bus.SplitBrokers(testenv.KafkaBrokers(t))
	o.SluiceBin = buildSluice(t)
	o.Duration = 60 * time.Second
	o.Retries = -1
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	rep, err := Execute(ctx, sc, o, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	st := rep.Stack
	if st == nil {
		t.Fatal("no stack report")
	}
	t.Logf("stack: %+v", *st)
	ic := rep.Classes["interactive"]
	t.Logf("provider_429 %d goodput %.3f jain %v interactive %d/%d served, queue wait p99 %.0f ms, decisions %v",
		rep.Provider429, rep.GoodputRatio, fmtPtr(rep.JainFairness), ic.Outcomes.Success, ic.Requests, ic.QueueWaitMs.P99, ic.GatewayDecisions)
	if st.DecisionsDoubled != 0 || st.RequestsUndecided != 0 {
		t.Errorf("decisions doubled %d, requests without a decision %d: want 0 and 0", st.DecisionsDoubled, st.RequestsUndecided)
	}
	if rep.Provider429 != 0 {
		t.Errorf("provider_429 = %d, want 0", rep.Provider429)
	}
	if ic.Requests == 0 || ic.Outcomes.Success == 0 {
		t.Errorf("no interactive request served: %+v", ic.Outcomes)
	}
	return rep
}

// TestStackNoisyNeighborRealBroker is issue 9's acceptance run: at the
// default settings, in steady state, no transaction aborts, no
// ledger_unavailable answers, and the busy partition is snapshotted.
func TestStackNoisyNeighborRealBroker(t *testing.T) {
	rep := runStack(t, Options{})
	st := rep.Stack
	ic := rep.Classes["interactive"]
	// Every interactive request is served, as on the embedded stack: the
	// ledger service fails none, and aged batch work never takes the
	// capacity an interactive request needs before its deadline. The one
	// refusal allowed is the deadline rule's (ledger/service.go): when the
	// route's learned p95 service time leaves a request less of its 2 s
	// than the call takes, sending it is an upstream call for nothing. On a
	// starved CI machine that p95 rises with the machine's latency: CI's
	// run of 483c386 answered one of 241 queued_then_expired 272 ms after
	// it was sent, under a 300 ms max wait, which only that rule ends so
	// early (a learned service time of about 1.7 s). Up to 1 % may end so
	// (the answer's code says which rule); any other ending fails.
	byRule := st.InteractiveFailedCodes[string(schemas.ReasonDeadlineBelowService)]
	if ic.Outcomes.Success+byRule != ic.Requests || byRule*100 > ic.Requests {
		t.Errorf("interactive requests served %d of %d, %d refused by the service-time rule (%+v, %v, %v)",
			ic.Outcomes.Success, ic.Requests, byRule, ic.Outcomes, ic.GatewayDecisions, st.InteractiveFailed)
	}
	if st.TransactionAborts != 0 {
		t.Errorf("transaction_aborts = %d, want 0 (logs in %s)", st.TransactionAborts, st.LogsDir)
	}
	if st.LedgerUnavailable != 0 {
		t.Errorf("ledger_unavailable = %d, want 0", st.LedgerUnavailable)
	}
	if st.BusiestSnapshots == 0 {
		t.Errorf("no snapshot of the busy partition %d in 60 s at the default settings", st.BusiestPartition)
	}
}

// TestStackKillLedgerRealBroker kills -9 the ledger owning the busy
// partition 20 s into the same run: the other takes over with no decision
// lost or doubled, and the provider sees no 429 during or after the
// recovery (the backlog's grants are not dispatched as a burst). Requests
// caught in the takeover may be answered ledger_unavailable or late_grant.
func TestStackKillLedgerRealBroker(t *testing.T) {
	rep := runStack(t, Options{KillLedgerAt: 20 * time.Second})
	st := rep.Stack
	if len(st.Faults) != 1 {
		t.Errorf("faults = %v, want the one kill", st.Faults)
	}
	// The takeover's figures (docs/ledger-service.md, Takeover), logged,
	// not asserted: they are timings on a shared machine.
	ic := rep.Classes["interactive"]
	t.Logf("takeover: decision gap as acted on %d ms, committed %d ms; ledger_unavailable %d; rebuilds %d; interactive %d/%d served (%+v)",
		st.ActedDecisionGapMs, st.LongestDecisionGapMs, st.LedgerUnavailable, st.Rebuilds, ic.Outcomes.Success, ic.Requests, ic.Outcomes)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s", b)
	return len(b), nil
}

func fmtPtr(f *float64) string {
	if f == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", *f)
}
