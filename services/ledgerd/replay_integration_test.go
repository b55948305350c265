//go:build integration

package ledgerd_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// rangeLine is how `sluice replay --verify` states a partition's range.
var rangeLine = regexp.MustCompile(`partition (\d+): verified inputs \[(\d+), (\d+)\)`)

// TestReplayVerifyUnderLoad: `sluice replay --verify` on a live system —
// a ledger applying a steady load while the replay runs — reports no
// divergence, exits 0 and verifies a non-empty range of every partition,
// run after run.
func TestReplayVerifyUnderLoad(t *testing.T) {
	const partitions = 2
	r := newRig(t, partitions)
	r.ledger("ledger-v")
	actx, stopAudit := context.WithCancel(context.Background())
	defer stopAudit()
	go r.audit(actx)
	lctx, stopLoad := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.load(lctx, 200, 4); close(done) }()
	defer func() { stopLoad(); <-done }()
	r.awaitDecisions(partitions, 60*time.Second)

	for run := 1; run <= 5; run++ {
		time.Sleep(time.Second) // more load between runs, not a timing assertion
		if run == 2 {
			out, err := r.replay("--json")
			if err != nil {
				t.Fatalf("run %d: replay --verify --json: %v\n%s", run, err, out)
			}
			var rep ledgerd.ReplayReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("run %d: --json output: %v\n%s", run, err, out)
			}
			if len(rep.Divergences) != 0 || len(rep.Ranges) != partitions {
				t.Errorf("run %d: %d divergences, %d ranges, want 0 and %d:\n%s", run, len(rep.Divergences), len(rep.Ranges), partitions, out)
			}
			for _, pr := range rep.Ranges {
				if pr.To <= pr.From || pr.Inputs == 0 {
					t.Errorf("run %d: empty range %+v", run, pr)
				}
			}
			continue
		}
		out, err := r.replay()
		if err != nil {
			t.Fatalf("run %d: replay --verify exited with %v:\n%s", run, err, out)
		}
		ms := rangeLine.FindAllStringSubmatch(out, -1)
		if len(ms) != partitions {
			t.Fatalf("run %d: %d range lines, want %d:\n%s", run, len(ms), partitions, out)
		}
		for _, m := range ms {
			from, _ := strconv.ParseInt(m[2], 10, 64)
			to, _ := strconv.ParseInt(m[3], 10, 64)
			if to <= from {
				t.Errorf("run %d: partition %s verified the empty range [%d, %d):\n%s", run, m[1], from, to, out)
			}
		}
		t.Logf("run %d:\n%s", run, out)
	}
}

// awaitDecisions waits until the auditor has seen a decision on every
// partition (the ledger is up and has committed), failing after timeout.
func (r *rig) awaitDecisions(partitions int, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		seen := map[int32]bool{}
		for _, d := range r.decisions {
			seen[d.partition] = true
		}
		r.mu.Unlock()
		if len(seen) >= partitions {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.t.Fatalf("no decision within %v", timeout)
}

// deploymentLedgerConfig has deployment buckets, so by default every path
// of its scopes must name the deployment (and the key: it has a "*" bucket).
const deploymentLedgerConfig = `{"scopes":[{"name":"*","buckets":[
 {"level":"key","id":"*","dimension":"requests","refill":"fixed","capacity":20,"period_ms":1000},
 {"level":"deployment","id":"dep1","dimension":"requests","capacity":600}]}]}`

// TestForgedPathRefused: a ReserveRequested produced straight to
// sluice.requests (not by a gateway) whose path leaves out the deployment
// is refused by the ledger on the real broker, naming the level; the same
// request with the deployment is granted; replay agrees.
func TestForgedPathRefused(t *testing.T) {
	r := newRig(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := ledgerd.PublishConfig(ctx, r.brokers, r.names, []byte(deploymentLedgerConfig), "test"); err != nil {
		t.Fatal(err)
	}
	r.ledger("ledger-p")
	actx, stopAudit := context.WithCancel(context.Background())
	defer stopAudit()
	go r.audit(actx)

	forge := func(id string, path ...schemas.PathLevel) {
		ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = id, 1, "forger", "scope-x", "t", "k-x", "interactive"
		ev.ReserveRequested = &schemas.ReserveRequested{Path: path, InputTokens: 10, OutputTokens: 10}
		if err := r.produce(ctx, ev); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		r.sent[id] = true
		r.mu.Unlock()
	}
	forge("forged-no-deployment", schemas.PathLevel{Level: "key", ID: "k-x"})
	forge("with-deployment", schemas.PathLevel{Level: "key", ID: "k-x"}, schemas.PathLevel{Level: "deployment", ID: "dep1"})
	r.settle(60 * time.Second)
	stopAudit()

	r.mu.Lock()
	forged, good := r.terminal["forged-no-deployment"], r.terminal["with-deployment"]
	r.mu.Unlock()
	if len(forged) != 1 {
		t.Fatalf("forged request: %d terminal decisions, want 1: %+v", len(forged), forged)
	}
	d := forged[0].Decision
	if d.Status != schemas.StatusDenied || d.Reason != schemas.ReasonPathMissingLevel ||
		d.LimitPath != ledger.LevelDeployment || d.RetryClass != schemas.RetryRequestError {
		t.Errorf("forged request decided %+v, want denied %s on %q (%s)", d, schemas.ReasonPathMissingLevel, ledger.LevelDeployment, schemas.RetryRequestError)
	}
	if len(good) != 1 || good[0].Decision.Status != schemas.StatusGranted {
		t.Errorf("request with the deployment: %+v, want one grant", good)
	}
	r.verifyReplay()
}
