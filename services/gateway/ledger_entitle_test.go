package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// TestLedgerRefusesBeyondItsEntitlements: the ledger checks entitlements
// itself (ledger/entitle.go). Here it holds one this gateway's file does
// not (demo-key: max_priority 0; a gateway on an older file, or an event
// from elsewhere), so the gateway's check passes a request at priority 50
// and the ledger refuses it: the client gets the same 403
// priority_not_entitled the gateway gives, final (x-should-retry: false),
// naming the holder; within the entitlement the key is served.
func TestLedgerRefusesBeyondItsEntitlements(t *testing.T) {
	st := startStack(t, nil)
	c, err := config.Load(strings.NewReader(testYAML("http://127.0.0.1:1", "", "", "")))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := ledger.ParseConfig(c.LedgerJSON())
	if err != nil {
		t.Fatal(err)
	}
	zero := int32(0)
	doc.Entitlements = append(doc.Entitlements, ledger.EntitlementConfig{Tenant: "demo", Key: "demo-key", MaxPriority: &zero})
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ledgerd.PublishConfig(ctx, st.Brokers, st.names, b, "test"); err != nil {
		t.Fatal(err)
	}
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	// The ConfigChanged reaches the ledger's partition some records
	// later: ask until it is applied (bounded by ctx).
	var status int
	var body []byte
	for ctx.Err() == nil {
		resp, bb := st.do(t, "POST", "/v1/chat/completions", keyDemo, chat, "X-Sluice-Priority", "50")
		status, body = resp.StatusCode, bb
		if status != 200 {
			if resp.Header.Get("x-should-retry") != "false" {
				t.Errorf("the ledger's refusal is not final: %v", resp.Header)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status != 403 {
		t.Fatalf("status %d, want 403: %s", status, body)
	}
	e := decodeError(t, body, false)
	if e.Code != "priority_not_entitled" || e.Sluice.GatewayDecision != "rejected_policy" || !strings.Contains(e.Message, "key demo-key") {
		t.Errorf("refusal %+v, want priority_not_entitled, rejected_policy, naming key demo-key", e)
	}
	if resp, bb := st.do(t, "POST", "/v1/chat/completions", keyDemo, chat); resp.StatusCode != 200 {
		t.Errorf("within the entitlement: %d %s", resp.StatusCode, bb)
	}
}
