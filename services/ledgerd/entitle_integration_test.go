//go:build integration

package ledgerd_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// TestForgedPromotionRefused is issue 21's D6 with the gateway out of the
// way: a ReserveRequested written straight to sluice.requests, for the dev
// config's batch key (tenant nightly: allowed_classes [batch],
// max_priority 0) asking for class interactive at priority 100, is denied
// by a real ledger on the real broker with the gateway's code; so is
// priority 100 in its own class; within the entitlement it is granted.
// The ledger document is the one the gateway publishes for that file
// (LedgerJSON), and replay decides the same.
func TestForgedPromotionRefused(t *testing.T) {
	y, err := os.ReadFile("../../deploy/examples/dev-three-tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(strings.NewReader(strings.ReplaceAll(string(y), "${SIM_URL}", "http://127.0.0.1:1")))
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := ledgerd.PublishConfig(ctx, r.brokers, r.names, cfg.LedgerJSON(), "test"); err != nil {
		t.Fatal(err)
	}
	r.ledger("ledger-e")
	actx, stopAudit := context.WithCancel(context.Background())
	defer stopAudit()
	go r.audit(actx)

	forge := func(id, class string, priority int32) {
		ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Route, ev.Class =
			id, 1, "forger", "sim-openai", "nightly", "nightly-etl", "gpt-4o-mini", class
		ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{
			{Level: "tenant", ID: "nightly"}, {Level: "team", ID: "data"}, {Level: "key", ID: "nightly-etl"},
			{Level: "profile", ID: "gpt-4o-mini"}, {Level: "deployment", ID: "sim-openai"},
		}, InputTokens: 10, OutputTokens: 10, Priority: priority}
		if err := r.produce(ctx, ev); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		r.sent[id] = true
		r.mu.Unlock()
	}
	forge("forged-interactive-100", "interactive", 100)
	forge("forged-batch-100", "batch", 100)
	forge("batch-within", "batch", -10)
	r.settle(60 * time.Second)
	stopAudit()

	for _, tc := range []struct {
		id     string
		status schemas.Status
		reason schemas.Reason
	}{
		{"forged-interactive-100", schemas.StatusDenied, schemas.ReasonClassNotEntitled},
		{"forged-batch-100", schemas.StatusDenied, schemas.ReasonPriorityNotEntitled},
		{"batch-within", schemas.StatusGranted, ""},
	} {
		r.mu.Lock()
		got := r.terminal[tc.id]
		r.mu.Unlock()
		if len(got) != 1 {
			t.Fatalf("%s: %d terminal decisions, want 1: %+v", tc.id, len(got), got)
		}
		d := got[0].Decision
		if d.Status != tc.status || d.Reason != tc.reason {
			t.Errorf("%s: %s %s, want %s %s", tc.id, d.Status, d.Reason, tc.status, tc.reason)
		}
		if tc.status == schemas.StatusDenied && (d.LimitPath != "tenant:nightly" || d.RetryClass != schemas.RetryRequestError) {
			t.Errorf("%s: limit_path %q retry_class %s, want tenant:nightly %s (never retried)", tc.id, d.LimitPath, d.RetryClass, schemas.RetryRequestError)
		}
	}
	r.verifyReplay()
}
