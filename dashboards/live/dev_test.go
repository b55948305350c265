package live_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sluice-dev/sluice/dashboards/live"
	"github.com/sluice-dev/sluice/services/dev"
)

// TestDevStackView runs the one-process dev stack and follows one chat
// completion through the live view: gateway → ledger → provider simulator
// → reconcile, seen by the demo key's tenant view over the websocket.
func TestDevStackView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.ViewURL == "" {
		t.Fatal("no ViewURL")
	}

	ws := "ws" + strings.TrimPrefix(st.ViewURL, "http") + "/ws?key=" + st.APIKey
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, ws, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello view"}],"max_tokens":16}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.GatewayURL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+st.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("gateway %d: %s", resp.StatusCode, raw)
	}

	_ = conn.SetReadDeadline(time.Now().Add(50 * time.Second))
	var s live.Snapshot
	for {
		_, b, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("no snapshot with the request (last %+v): %v", s.Totals, err)
		}
		s = live.Snapshot{}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if s.Totals.Received >= 1 && s.Totals.Granted >= 1 && s.Totals.Reconciled >= 1 && len(s.RecentDecisions) > 0 {
			break
		}
	}
	if s.View != "tenant" || s.Tenant != "demo" || s.Totals.InFlight != 0 || s.Totals.ActInputTokens == 0 {
		t.Fatalf("snapshot %+v", s)
	}
	if d := s.RecentDecisions[0]; d.Status != "granted" || d.KeyID != "demo-key" || d.GatewayDecision == "" {
		t.Fatalf("decision %+v", d)
	}
}
