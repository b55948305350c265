package live

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func lookup(key string) (string, bool) {
	switch key {
	case "sk-acme":
		return "acme", true
	case "sk-globex":
		return "globex", true
	}
	return "", false
}

func testView(t *testing.T, token string) (*View, *httptest.Server) {
	t.Helper()
	clk := newClock()
	v := New(Config{Lookup: lookup, OperatorToken: token, Now: clk.Now, PushInterval: 20 * time.Millisecond})
	v.Projection().Apply(
		reserve("acme", "ka", "a1"), granted("acme", "ka", "a1"),
		reserve("globex", "kg", "g1"), granted("globex", "kg", "g1"),
		observedEv("globex", 5),
	)
	srv := httptest.NewServer(v)
	t.Cleanup(func() { v.Close(); srv.Close() })
	return v, srv
}

func getSnapshot(t *testing.T, url, auth, host string) (int, Snapshot) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/api/snapshot", nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s Snapshot
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, s
}

func TestSnapshotAuth(t *testing.T) {
	_, srv := testView(t, "op-secret")
	cases := []struct {
		name, auth string
		status     int
		view       string
		tenants    int
	}{
		{"no credential with a token configured", "", 401, "", 0},
		{"operator token", "Bearer op-secret", 200, "operator", 2},
		{"wrong operator token", "Bearer op-wrong", 401, "", 0},
		{"tenant key", "Bearer sk-acme", 200, "tenant", 1},
		{"unknown key is not widened to operator", "Bearer sk-nobody", 401, "", 0},
		{"non-bearer scheme", "Basic b3A6b3Atc2VjcmV0", 401, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, s := getSnapshot(t, srv.URL, c.auth, "")
			if status != c.status {
				t.Fatalf("status %d, want %d", status, c.status)
			}
			if status == 200 && (s.View != c.view || len(s.Tenants) != c.tenants) {
				t.Fatalf("view %q tenants %+v", s.View, s.Tenants)
			}
			if s.View == "tenant" && (s.Tenant != "acme" || s.Tenants[0].Tenant != "acme" || len(s.ProviderObserved) != 0) {
				t.Fatalf("tenant view %+v", s)
			}
		})
	}
}

func TestOpenOperatorViewOnlyOnLoopback(t *testing.T) {
	_, srv := testView(t, "")
	if status, s := getSnapshot(t, srv.URL, "", ""); status != 200 || s.View != "operator" {
		t.Fatalf("open loopback view: %d %q", status, s.View)
	}
	// A DNS-rebinding page reaches the loopback port under a foreign name.
	if status, _ := getSnapshot(t, srv.URL, "", "evil.example:80"); status != 401 {
		t.Fatalf("open view answered a foreign Host: %d", status)
	}
	// A key still narrows the open view to its tenant.
	if status, s := getSnapshot(t, srv.URL, "Bearer sk-globex", ""); status != 200 || s.View != "tenant" || s.Tenant != "globex" {
		t.Fatalf("key on open view: %d %+v", status, s)
	}
	// Query credentials are for the websocket only (keys stay out of
	// access logs of plain HTTP requests).
	resp, err := http.Get(srv.URL + "/api/snapshot?key=sk-acme")
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	err = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if err != nil || s.View != "operator" {
		t.Fatalf("query key on /api/snapshot: %v %q", err, s.View)
	}
}

func TestNoKeyLookupRefusesKeys(t *testing.T) {
	v := New(Config{})
	srv := httptest.NewServer(v)
	defer srv.Close()
	if status, _ := getSnapshot(t, srv.URL, "Bearer sk-acme", ""); status != 401 {
		t.Fatalf("status %d", status)
	}
}

func wsURL(srv *httptest.Server, query string) string {
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws" + query
}

func readSnapshot(t *testing.T, c *websocket.Conn) Snapshot {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, b, err := c.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestWebsocketPushesSnapshots(t *testing.T) {
	v, srv := testView(t, "op-secret")

	// Tenant key on the query string (browsers cannot set headers).
	c, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "?key=sk-acme"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := readSnapshot(t, c)
	if s.View != "tenant" || s.Tenant != "acme" || len(s.Series) != 1 || s.Series[0].Tenant != "acme" || s.Totals.Granted != 1 {
		t.Fatalf("tenant frame %+v", s)
	}
	// Later frames carry later state.
	v.Projection().Apply(reserve("acme", "ka", "a2"), reserve("globex", "kg", "g2"))
	for i := 0; ; i++ {
		s = readSnapshot(t, c)
		if s.Totals.Received == 2 {
			break
		}
		if i > 500 {
			t.Fatalf("update never pushed: %+v", s.Totals)
		}
	}

	// Operator token via header.
	h := http.Header{"Authorization": {"Bearer op-secret"}}
	op, _, err := websocket.DefaultDialer.Dial(wsURL(srv, ""), h)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if s := readSnapshot(t, op); s.View != "operator" || len(s.Tenants) != 2 {
		t.Fatalf("operator frame %+v", s)
	}
	// Operator token via query.
	op2, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "?token=op-secret"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer op2.Close()
	if s := readSnapshot(t, op2); s.View != "operator" {
		t.Fatalf("operator frame %+v", s)
	}
}

func TestWebsocketRefusals(t *testing.T) {
	_, srv := testView(t, "op-secret")
	for _, q := range []string{"", "?key=sk-nobody", "?token=nope", "?key=op-secret"} {
		_, resp, err := websocket.DefaultDialer.Dial(wsURL(srv, q), nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("query %q: err %v resp %v", q, err, resp)
		}
	}
	// Another web page must not read the view through a visitor's browser.
	h := http.Header{"Origin": {"http://evil.example"}}
	_, resp, err := websocket.DefaultDialer.Dial(wsURL(srv, "?key=sk-acme"), h)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin: err %v resp %v", err, resp)
	}
}

func TestWebsocketClosedOnStop(t *testing.T) {
	v, srv := testView(t, "")
	c, _, err := websocket.DefaultDialer.Dial(wsURL(srv, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readSnapshot(t, c)
	v.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Fatalf("want a going-away close, got %v", err)
			}
			return
		}
	}
}

func TestIndexPage(t *testing.T) {
	_, srv := testView(t, "op-secret")
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "/ws") {
		t.Fatalf("status %d", resp.StatusCode)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'sha256-") || !strings.Contains(csp, "style-src 'sha256-") || !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("csp %q", csp)
	}
	for _, ext := range []string{"http://", "https://", "innerHTML"} {
		if strings.Contains(string(body), ext) {
			t.Errorf("page references %q (must be self-contained and build DOM with textContent)", ext)
		}
	}
	resp, err = http.Get(srv.URL + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown path: %d", resp.StatusCode)
	}
}

func TestListenRefusesOpenNonLoopback(t *testing.T) {
	_, _, err := Listen(context.Background(), Config{Addr: "0.0.0.0:0", Brokers: []string{"127.0.0.1:1"}})
	if err == nil || !strings.Contains(err.Error(), "operator token") {
		t.Fatalf("err %v", err)
	}
}

// TestRefusalSaysWhy: every refusal carries a stable code, so that the page
// can tell a wrong key from a missing credential and stop retrying.
func TestRefusalSaysWhy(t *testing.T) {
	_, srv := testView(t, "op-secret")
	for _, c := range []struct{ path, auth, code string }{
		{"/api/snapshot", "", "credential_required"},
		{"/api/snapshot", "Bearer sk-nobody", "invalid_credential"},
		{"/api/snapshot", "Basic eA==", "invalid_authorization"},
		{"/ws?key=sk-nobody", "", "invalid_api_key"},
		{"/ws?token=nope", "", "invalid_operator_token"},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Error, Code string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || body.Code != c.code || body.Error == "" {
			t.Errorf("%s %q: %d %+v, want 401 %s", c.path, c.auth, resp.StatusCode, body, c.code)
		}
	}
}

// TestWebsocketDropsRevokedKey: a key revoked while its stream is open
// loses the stream with the credential-invalid close code.
func TestWebsocketDropsRevokedKey(t *testing.T) {
	var revoked atomic.Bool
	v := New(Config{PushInterval: 10 * time.Millisecond, RecheckInterval: 10 * time.Millisecond,
		Lookup: func(key string) (string, bool) {
			if key == "sk-acme" && !revoked.Load() {
				return "acme", true
			}
			return "", false
		}})
	srv := httptest.NewServer(v)
	defer func() { v.Close(); srv.Close() }()
	c, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "?key=sk-acme"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readSnapshot(t, c)
	revoked.Store(true)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			if !websocket.IsCloseError(err, closeCredentialInvalid) {
				t.Fatalf("want close %d, got %v", closeCredentialInvalid, err)
			}
			return
		}
	}
}
