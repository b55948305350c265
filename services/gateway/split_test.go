package gateway_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// TestSplitScopeRequestGoesToItsKeysSubScope: when the ledger document
// splits a provider's scope over partitions, the gateway sends a request
// to its key's sub-scope (config.LedgerScope), where the deployment's
// limit is a lease of the split budget; the request is granted through
// that lease and settled there.
func TestSplitScopeRequestGoesToItsKeysSubScope(t *testing.T) {
	st := startStack(t, func(u string) string {
		y := testYAML(u, "", "", "")
		lc := ledger.DefaultDevConfig()
		lc.Scopes[0].Partitions = 2
		lc.Scopes[0].Buckets = append(lc.Scopes[0].Buckets,
			ledger.BucketConfig{Level: ledger.LevelDeployment, ID: "sim-openai", Dimension: schemas.DimRequests, Capacity: 6000, PeriodMs: 60_000})
		b, _ := json.Marshal(lc)
		i := strings.Index(y, "ledger: ")
		return y[:i] + "ledger: " + string(b) + "\n"
	})
	resp, b := st.do(t, "POST", "/v1/chat/completions", keyDemo, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}],"max_tokens":16}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	want := ledger.PartitionScope("sim-openai", 2, "demo-key")
	evs := st.events(t, resp.Header.Get("X-Sluice-Request-Id"), func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeReconciled)) })
	for _, e := range evs {
		switch e.Type {
		case schemas.TypeReserveRequested, schemas.TypeDecision, schemas.TypeReconciled:
			if e.Scope != want {
				t.Errorf("%s in scope %q, want the key's sub-scope %q", e.Type, e.Scope, want)
			}
		}
	}
	// The tenant's explain searches the sub-scopes' partitions, not the
	// unsplit scope's, and finds the request there.
	resp, b = st.do(t, "GET", "/v1/sluice/requests/"+resp.Header.Get("X-Sluice-Request-Id"), keyDemo, "")
	var x struct {
		Scope string `json:"scope"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &x) != nil || x.Scope != want {
		t.Errorf("explain: %d %s, want the request in %s", resp.StatusCode, b, want)
	}
	// Readiness names the sub-scopes' partitions.
	_, b = st.do(t, "GET", "/readyz", "", "")
	for _, sub := range []string{"sim-openai#0", "sim-openai#1"} {
		if !strings.Contains(string(b), `"ledger_round_trip:`+sub+`"`) {
			t.Errorf("readyz does not check %s: %s", sub, b)
		}
	}
	if strings.Contains(string(b), `"ledger_round_trip:sim-openai"`) {
		t.Errorf("readyz checks the unsplit scope, which no ledger scope holds: %s", b)
	}
}
