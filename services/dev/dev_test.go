package dev

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/bus"
)

// TestConfigFileThreeTenants starts the dev stack (embedded kfake) on
// deploy/examples/dev-three-tenants.yaml: each of its three keys, one per
// class, is served, and a key the file does not list is refused.
func TestConfigFileThreeTenants(t *testing.T) {
	load, err := ConfigFile("../../deploy/examples/dev-three-tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := Start(ctx, Options{Addr: "127.0.0.1:0", Config: load})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for key, want := range map[string]int{"sk-sluice-dev-web": 200, "sk-sluice-dev-agent": 200, "sk-sluice-dev-batch": 200, st.APIKey: 401} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.GatewayURL+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("key %s: status %d, want %d", key, resp.StatusCode, want)
		}
	}
	promotionRefused(t, ctx, st)
}

// promotionRefused: the batch key of dev-three-tenants.yaml cannot promote
// itself with headers (issue 21, D6: it got 200 and class interactive),
// and may still choose within its entitlement.
func promotionRefused(t *testing.T, ctx context.Context, st *Stack) {
	t.Helper()
	for _, tc := range []struct {
		hdr    []string
		status int
		code   string
	}{
		{[]string{"X-Sluice-Class", "interactive", "X-Sluice-Priority", "100"}, 403, "class_not_entitled"},
		{[]string{"X-Sluice-Priority", "100"}, 403, "priority_not_entitled"},
		{[]string{"X-Sluice-Class", "batch", "X-Sluice-Priority", "-10"}, 200, ""},
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.GatewayURL+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`))
		req.Header.Set("Authorization", "Bearer sk-sluice-dev-batch")
		for i := 0; i+1 < len(tc.hdr); i += 2 {
			req.Header.Set(tc.hdr[i], tc.hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || body.Error.Code != tc.code {
			t.Errorf("batch key with %v: %d %q, want %d %q", tc.hdr, resp.StatusCode, body.Error.Code, tc.status, tc.code)
		}
	}
}

// TestConfigFileRefusesABadFileBeforeStarting: a file that does not load
// fails in ConfigFile, with its path and the problem.
func TestConfigFileRefusesABadFileBeforeStarting(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte("node: x\nroutes:\n  - {model: m, provider: nowhere}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ConfigFile(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("want an error naming %s, got %v", p, err)
	}
	if _, err := ConfigFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("a missing file loaded")
	}
}

// TestOperatorDefaultsAndKnownKeys: the dev stack's ledger group on the
// default topics is the ledger's default group (what whatif and replay
// assume), and the keys the example config names in its comments are
// found (and only those it accepts), so `sluice dev --config` can print a
// key that works.
func TestOperatorDefaultsAndKnownKeys(t *testing.T) {
	if g := LedgerGroup(bus.Names{}); g != DefaultLedgerGroup {
		t.Errorf("default-topic group %q, want %q", g, DefaultLedgerGroup)
	}
	if g := LedgerGroup(bus.NamesWithPrefix("t.")); g == DefaultLedgerGroup {
		t.Errorf("prefixed topics share the default group %q", g)
	}
	keys, err := ConfigFileKeys("../../deploy/examples/dev-three-tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sk-sluice-dev-web", "sk-sluice-dev-agent", "sk-sluice-dev-batch"}; !slices.Equal(keys, want) {
		t.Errorf("known keys %v, want %v", keys, want)
	}
	c, err := DevConfig("http://127.0.0.1:1", "sk-sluice-demo-1234567890")
	if err != nil {
		t.Fatal(err)
	}
	if got := KnownKeys([]byte("sk-sluice-demo-1234567890 sk-sluice-not-a-key-0000"), c); !slices.Equal(got, []string{"sk-sluice-demo-1234567890"}) {
		t.Errorf("KnownKeys = %v", got)
	}
}
