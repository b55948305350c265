//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sluice-dev/sluice/dashboards/live"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/services/dev"
)

const viewAdminToken = "view-integration-operator-token"

// viewCall sends one JSON request with a bearer credential and returns the
// status and the decoded body (services/admin's integration tests do the
// same against the admin API).
func viewCall(t *testing.T, ctx context.Context, method, url, token string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(ctx, method, url, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if err := json.Unmarshal(raw, &out); err != nil {
		out["raw"] = string(raw)
	}
	return resp.StatusCode, out
}

// viewPoll polls f every 50 ms until it holds, failing after a generous
// bound (no timing assertion: the time taken is only logged).
func viewPoll(t *testing.T, what string, f func() bool) {
	t.Helper()
	const bound = 30 * time.Second
	start := time.Now()
	for !f() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %s", what, bound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s: %s", what, time.Since(start).Round(time.Millisecond))
}

// TestViewFollowsAdminKeys runs the view as `sluice view` does (no
// --config: keys from the admin topic only) beside a dev stack with the
// admin API on the real broker. A key created through the admin API opens
// its tenant's view and only that tenant's; a rotated key's old secret and
// a revoked key are refused with 401.
func TestViewFollowsAdminKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	brokers := bus.SplitBrokers(testenv.KafkaBrokers(t))
	names := bus.NamesWithPrefix(fmt.Sprintf("viewadmin%d.", time.Now().UnixNano()))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: brokers, Topics: names, Partitions: 2, AdminToken: viewAdminToken, Log: log})
	if err != nil {
		t.Fatalf("dev stack on the real broker: %v", err)
	}
	t.Cleanup(func() { // runs last: after the stack and the view stopped
		cl, err := bus.NewClient(context.Background(), brokers, 10*time.Second)
		if err != nil {
			return
		}
		defer cl.Close()
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(cl).DeleteTopics(dctx, append(names.All(), names.Admin)...)
	})
	defer st.Close()

	keys := &viewKeys{log: log}
	adm, err := keys.followAdmin(ctx, brokers, names)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	view, stop, err := live.Listen(ctx, live.Config{Brokers: brokers, Topics: names, Addr: "127.0.0.1:0", Log: log, Lookup: keys.lookup})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	adminURL := st.GatewayURL + "/admin/v1"
	change := func(want int, method, path string, body map[string]any) map[string]any {
		t.Helper()
		code, out := viewCall(t, ctx, "GET", adminURL+"/tenants", viewAdminToken, nil)
		if code != 200 {
			t.Fatalf("list tenants: %d %v", code, out)
		}
		body["base_version"], body["reason"] = out["version"], "view test"
		code, out = viewCall(t, ctx, method, adminURL+path, viewAdminToken, body)
		if code != want {
			t.Fatalf("%s %s: %d, want %d: %v", method, path, code, want, out)
		}
		return out
	}
	change(201, "POST", "/tenants", map[string]any{"id": "shop"})
	key := change(201, "POST", "/tenants/shop/keys", map[string]any{"id": "shop-app"})["api_key"].(string)

	// A second view opened now (read-only: it writes nothing to the admin
	// topic) starts with the key already in force.
	adminEnd := func() int64 {
		t.Helper()
		cl, err := bus.NewClient(ctx, brokers, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		o, err := kadm.NewClient(cl).ListEndOffsets(ctx, names.Admin)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := o.Lookup(names.Admin, 0)
		return l.Offset
	}
	before := adminEnd()
	late := &viewKeys{log: log}
	lateAdm, err := late.followAdmin(ctx, brokers, names)
	if err != nil {
		t.Fatal(err)
	}
	defer lateAdm.Close()
	if tenant, ok := late.lookup(key); !ok || tenant != "shop" {
		t.Fatalf("a view opened after the key was made: lookup = %q %v, want shop", tenant, ok)
	}
	if after := adminEnd(); after != before {
		t.Fatalf("opening the view wrote %d records to %s", after-before, names.Admin)
	}

	// Traffic from shop and from the dev stack's demo tenant, so that the
	// view has another tenant to leave out.
	chat := func(k string) {
		t.Helper()
		code, out := viewCall(t, ctx, "POST", st.GatewayURL+"/v1/chat/completions", k,
			map[string]any{"model": "gpt-4o-mini", "max_tokens": 16, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
		if code != 200 {
			t.Fatalf("chat: %d %v", code, out)
		}
	}
	chat(key)
	chat(st.APIKey)

	snapshot := func(k string) (int, live.Snapshot) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", view+"/api/snapshot", nil)
		req.Header.Set("Authorization", "Bearer "+k)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s live.Snapshot
		if resp.StatusCode == 200 {
			if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, s
	}
	var got live.Snapshot
	viewPoll(t, "the admin-made key opens shop's view with its traffic", func() bool {
		code, s := snapshot(key)
		got = s
		return code == 200 && len(s.Tenants) > 0
	})
	if got.View != "tenant" || got.Tenant != "shop" {
		t.Fatalf("view %q tenant %q, want shop's tenant view", got.View, got.Tenant)
	}
	for _, r := range got.Tenants {
		if r.Tenant != "shop" {
			t.Errorf("shop's view shows tenant %q", r.Tenant)
		}
	}
	if b, _ := json.Marshal(got); strings.Contains(string(b), `"demo"`) {
		t.Errorf("shop's view mentions the demo tenant: %s", b)
	}

	// Rotate: the old secret stops, the new one opens the view.
	rotated := change(200, "POST", "/tenants/shop/keys/shop-app/rotate", map[string]any{})["api_key"].(string)
	viewPoll(t, "the rotated key's old secret is refused", func() bool { code, _ := snapshot(key); return code == 401 })
	if code, s := snapshot(rotated); code != 200 || s.Tenant != "shop" {
		t.Fatalf("the new secret: %d %q, want shop's view", code, s.Tenant)
	}

	// Revoke: refused for good, and an open stream is closed with 4401
	// at the view's next re-check (every 5 s, as in `sluice view`).
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(view, "http")+"/ws?key="+rotated, nil)
	if err != nil {
		t.Fatalf("shop's stream: %v", err)
	}
	defer ws.Close()
	change(200, "POST", "/tenants/shop/keys/shop-app/revoke", map[string]any{})
	viewPoll(t, "the revoked key is refused", func() bool { code, _ := snapshot(rotated); return code == 401 })
	revoked := time.Now()
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			if !websocket.IsCloseError(err, 4401) {
				t.Fatalf("shop's stream after the revoke: %v, want close 4401", err)
			}
			break
		}
	}
	t.Logf("the revoked key's stream closed with 4401 after %s", time.Since(revoked).Round(time.Millisecond))
}
