package admin

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
)

var update = flag.Bool("update", false, "rewrite docs/admin-openapi.json")

const (
	opToken  = "operator-token-0123456789"
	seedKey  = "sk-seed-acme"
	testYAML = `node: gw-admin-test
providers:
  - {name: p1, kind: openai, scope: s1, base_url: "http://127.0.0.1:1/v1"}
  - {name: p2, kind: openai, scope: s2, base_url: "http://127.0.0.1:1/v1"}
routes:
  - {model: m, provider: p1}
tenants:
  - id: acme
    org: acme-org
    keys:
      - {id: acme-app, sha256: SEEDHASH, team: search}
ledger:
  scopes:
    - name: s1
      buckets:
        - {level: deployment, id: p1, dimension: requests, capacity: 1000}
        - {level: tenant, id: acme, dimension: requests, capacity: 100}
    - name: s2
      buckets:
        - {level: deployment, id: p2, dimension: requests, capacity: 1000}
`
)

// target records the configurations a Binding installs.
type target struct {
	mu  sync.Mutex
	cfg *config.Config
}

func (t *target) SetConfig(c *config.Config) { t.mu.Lock(); t.cfg = c; t.mu.Unlock() }
func (t *target) get() *config.Config        { t.mu.Lock(); defer t.mu.Unlock(); return t.cfg }

type fixture struct {
	t     *testing.T
	h     *Handler
	store *MemStore
	gw    *target
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	file, err := config.Load(strings.NewReader(strings.Replace(testYAML, "SEEDHASH", config.HashKey(seedKey), 1)))
	if err != nil {
		t.Fatal(err)
	}
	gw := &target{cfg: file}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b := NewBinding(gw, file, quiet)
	store := NewMemStore(Seed(file), b.Check, b.Apply)
	h, err := NewHandler(store, opToken, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, h: h, store: store, gw: gw}
}

// do sends one request and decodes the JSON answer.
func (f *fixture) do(token, method, path string, body any) (int, map[string]any) {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req := httptest.NewRequest(method, path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

// change sends a change at the store's current version.
func (f *fixture) change(token, method, path string, body map[string]any) (int, map[string]any) {
	f.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["base_version"]; !ok {
		body["base_version"] = f.store.State().Version
	}
	if _, ok := body["reason"]; !ok {
		body["reason"] = "test"
	}
	return f.do(token, method, path, body)
}

func (f *fixture) mustChange(want int, token, method, path string, body map[string]any) map[string]any {
	f.t.Helper()
	code, out := f.change(token, method, path, body)
	if code != want {
		f.t.Fatalf("%s %s: status %d, want %d: %v", method, path, code, want, out)
	}
	return out
}

func (f *fixture) mustDo(want int, token, method, path string, body any) map[string]any {
	f.t.Helper()
	code, out := f.do(token, method, path, body)
	if code != want {
		f.t.Fatalf("%s %s: status %d, want %d: %v", method, path, code, want, out)
	}
	return out
}

func errCode(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestOpenAPIServedMatchesCheckedIn(t *testing.T) {
	f := newFixture(t)
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, httptest.NewRequest("GET", "/admin/v1/openapi.json", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	path := filepath.Join("..", "..", "docs", "admin-openapi.json")
	if *update {
		if err := os.WriteFile(path, rec.Body.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./services/admin -run OpenAPI -update)", err)
	}
	if !bytes.Equal(rec.Body.Bytes(), want) {
		t.Fatalf("served OpenAPI document differs from %s: run go test ./services/admin -run OpenAPI -update and review the diff", path)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(want, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi %q, want 3.x", doc.OpenAPI)
	}
	// Every route of the router is in the document…
	n := 0
	for _, rt := range Routes() {
		if _, ok := doc.Paths[rt.Pattern][strings.ToLower(rt.Method)]; !ok {
			t.Errorf("%s %s is routed but not in the OpenAPI document", rt.Method, rt.Pattern)
		}
		n++
	}
	// …and every documented operation is routed.
	m := 0
	for p, ops := range doc.Paths {
		for method := range ops {
			m++
			req := httptest.NewRequest(strings.ToUpper(method), strings.NewReplacer("{tenant}", "t", "{team}", "x", "{key}", "k", "{partner}", "p").Replace(p), nil)
			if _, pattern := f.h.mux.Handler(req); pattern != strings.ToUpper(method)+" "+p {
				t.Errorf("documented %s %s is served by %q", method, p, pattern)
			}
		}
	}
	if n != m {
		t.Errorf("%d routes, %d documented operations", n, m)
	}
}

func TestAuthentication(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, token, code string
		status            int
	}{
		{"no token", "", "missing_admin_token", 401},
		{"wrong token", "operator-token-0123456780", "invalid_admin_token", 401},
		{"an API key is not an admin token", seedKey, "invalid_admin_token", 401},
		{"operator", opToken, "", 200},
	}
	for _, tc := range tests {
		code, out := f.do(tc.token, "GET", "/admin/v1/tenants", nil)
		if code != tc.status || errCode(out) != tc.code {
			t.Errorf("%s: %d %q, want %d %q", tc.name, code, errCode(out), tc.status, tc.code)
		}
	}
	if _, err := NewHandler(f.store, "short", nil); err == nil {
		t.Error("a short operator token was accepted")
	}
}

func TestKeyLifecycle(t *testing.T) {
	f := newFixture(t)
	f.mustChange(201, opToken, "POST", "/admin/v1/tenants", map[string]any{"id": "beta", "org": "beta-org",
		"limits": []map[string]any{{"scope": "s1", "dimension": "requests", "capacity": 600}}})
	f.mustChange(201, opToken, "POST", "/admin/v1/tenants/beta/teams", map[string]any{"id": "ml"})
	out := f.mustChange(201, opToken, "POST", "/admin/v1/tenants/beta/keys", map[string]any{"id": "beta-app", "team": "ml", "class": "batch"})
	secret, _ := out["api_key"].(string)
	if !strings.HasPrefix(secret, KeyPrefix) {
		t.Fatalf("api_key %q", secret)
	}
	st := f.store.State()
	if b, _ := json.Marshal(st); bytes.Contains(b, []byte(secret)) {
		t.Fatal("the admin state holds the key itself, not only its hash")
	}
	id := f.gw.get().Lookup(secret)
	if id == nil || id.Tenant != "beta" || id.Team != "ml" || id.Class != "batch" || id.Org != "beta-org" {
		t.Fatalf("new key resolves to %+v", id)
	}
	if f.gw.get().Lookup(seedKey) == nil {
		t.Fatal("the file's key stopped working after the first admin change")
	}

	out = f.mustChange(200, opToken, "POST", "/admin/v1/tenants/beta/keys/beta-app/rotate", nil)
	rotated, _ := out["api_key"].(string)
	if rotated == secret || f.gw.get().Lookup(secret) != nil || f.gw.get().Lookup(rotated) == nil {
		t.Fatal("rotate: the old key must stop and the new one work")
	}
	f.mustChange(200, opToken, "POST", "/admin/v1/tenants/beta/keys/beta-app/pause", nil)
	if id := f.gw.get().Lookup(rotated); !id.Paused {
		t.Fatal("paused key not paused")
	}
	f.mustChange(200, opToken, "POST", "/admin/v1/tenants/beta/keys/beta-app/resume", nil)
	f.mustChange(200, opToken, "POST", "/admin/v1/tenants/beta/pause", nil)
	if id := f.gw.get().Lookup(rotated); id.Paused || !id.TenantPaused {
		t.Fatalf("tenant pause: %+v", id)
	}
	f.mustChange(200, opToken, "POST", "/admin/v1/tenants/beta/resume", nil)
	f.mustChange(200, opToken, "PUT", "/admin/v1/tenants/beta/keys/beta-app/limits", map[string]any{
		"limits": []map[string]any{{"dimension": "requests_per_day", "capacity": 500}}})
	out = f.mustDo(200, opToken, "GET", "/admin/v1/tenants/beta", nil)
	keys := out["tenant"].(map[string]any)["keys"].([]any)
	if lim := keys[0].(map[string]any)["limits"].([]any); len(lim) != 2 { // a scope-less limit goes to every scope
		t.Fatalf("key limits %v, want one per scope", lim)
	}
	f.mustChange(200, opToken, "POST", "/admin/v1/tenants/beta/keys/beta-app/revoke", nil)
	if id := f.gw.get().Lookup(rotated); !id.Disabled {
		t.Fatal("revoked key still enabled")
	}
	if code, out := f.change(opToken, "POST", "/admin/v1/tenants/beta/keys/beta-app/rotate", nil); code != 409 {
		t.Fatalf("rotating a revoked key: %d %v", code, out)
	}

	// Every change was committed with its actor, reason and change line.
	for _, c := range f.store.Committed {
		if c.Actor != "operator" || c.Reason != "test" || c.Change == "" {
			t.Errorf("commit %+v lacks its audit fields", c)
		}
	}
	if got := f.store.Committed[2].Change; got != "key.create tenant=beta key=beta-app" {
		t.Errorf("change line %q", got)
	}
}

func TestVersionConflictAndValidation(t *testing.T) {
	f := newFixture(t)
	f.mustChange(201, opToken, "POST", "/admin/v1/tenants", map[string]any{"id": "beta"})
	tests := []struct {
		name   string
		method string
		path   string
		body   map[string]any
		status int
		code   string
	}{
		{"stale base version", "POST", "/admin/v1/tenants", map[string]any{"id": "gamma", "base_version": 0}, 409, "version_conflict"},
		{"missing base version", "POST", "/admin/v1/tenants", map[string]any{"id": "gamma", "base_version": nil}, 400, "missing_field"},
		{"missing reason", "POST", "/admin/v1/tenants", map[string]any{"id": "gamma", "reason": " "}, 400, "missing_field"},
		{"unknown field", "POST", "/admin/v1/tenants", map[string]any{"id": "gamma", "colour": "red"}, 400, "invalid_json"},
		{"duplicate tenant", "POST", "/admin/v1/tenants", map[string]any{"id": "beta"}, 409, "already_exists"},
		{"bad id", "POST", "/admin/v1/tenants", map[string]any{"id": "a/b"}, 400, "invalid_value"},
		{"unknown tenant", "POST", "/admin/v1/tenants/nope/pause", nil, 404, "not_found"},
		{"unknown class", "POST", "/admin/v1/tenants/beta/keys", map[string]any{"class": "gold"}, 400, "invalid_config"},
		{"unknown team", "POST", "/admin/v1/tenants/beta/keys", map[string]any{"team": "ml"}, 400, "invalid_value"},
		{"unknown scope", "PUT", "/admin/v1/tenants/beta/limits", map[string]any{"limits": []map[string]any{{"scope": "s9", "dimension": "requests", "capacity": 1}}}, 400, "invalid_value"},
		{"unknown dimension", "PUT", "/admin/v1/tenants/beta/limits", map[string]any{"limits": []map[string]any{{"dimension": "joules", "capacity": 1}}}, 400, "invalid_value"},
		{"invalid bucket", "PUT", "/admin/v1/tenants/beta/limits", map[string]any{"limits": []map[string]any{{"dimension": "requests", "capacity": 1, "window_ms": 120000}}}, 400, "invalid_config"},
		{"team id of another tenant", "POST", "/admin/v1/tenants/beta/teams", map[string]any{"id": "search"}, 409, "already_exists"},
		{"no such route", "GET", "/admin/v1/nothing", nil, 404, "not_found"},
	}
	for _, tc := range tests {
		before := f.store.State().Version
		code, out := f.change(opToken, tc.method, tc.path, tc.body)
		if tc.body == nil && tc.method == "GET" {
			code, out = f.do(opToken, tc.method, tc.path, nil)
		}
		if code != tc.status || errCode(out) != tc.code {
			t.Errorf("%s: %d %q, want %d %q (%v)", tc.name, code, errCode(out), tc.status, tc.code, out)
		}
		if f.store.State().Version != before {
			t.Errorf("%s: a refused change moved the version", tc.name)
		}
	}
}

func TestPartnerIsolation(t *testing.T) {
	f := newFixture(t)
	allot := func(n int) map[string]any {
		return map[string]any{"limits": []map[string]any{{"scope": "s1", "dimension": "requests", "capacity": n}}}
	}
	tok := map[string]string{}
	for _, p := range []string{"p1", "p2"} {
		body := allot(6000)
		body["id"] = p
		out := f.mustChange(201, opToken, "POST", "/admin/v1/partners", body)
		tok[p], _ = out["partner_token"].(string)
	}
	p1, p2 := tok["p1"], tok["p2"]
	f.mustChange(201, p1, "POST", "/admin/v1/tenants", map[string]any{"id": "p1.shop",
		"limits": []map[string]any{{"scope": "s1", "dimension": "requests", "capacity": 3600}}})
	out := f.mustChange(201, p1, "POST", "/admin/v1/tenants/p1.shop/keys", map[string]any{"id": "p1.shop-key"})
	if id := f.gw.get().Lookup(out["api_key"].(string)); id == nil || id.Org != "p1" {
		t.Fatalf("a partner's tenant must carry the partner's org (its allotment): %+v", id)
	}
	if c := f.store.Committed[len(f.store.Committed)-1]; c.Actor != "partner:p1" {
		t.Errorf("actor %q", c.Actor)
	}

	tests := []struct {
		name, token, method, path string
		body                      map[string]any
		status                    int
		code                      string
	}{
		{"p2 reads p1's tenant", p2, "GET", "/admin/v1/tenants/p1.shop", nil, 404, "not_found"},
		{"p2 changes p1's limits", p2, "PUT", "/admin/v1/tenants/p1.shop/limits", allot(60), 404, "not_found"},
		{"p2 pauses p1's key", p2, "POST", "/admin/v1/tenants/p1.shop/keys/p1.shop-key/pause", map[string]any{}, 404, "not_found"},
		{"p2 creates a key in p1's tenant", p2, "POST", "/admin/v1/tenants/p1.shop/keys", map[string]any{}, 404, "not_found"},
		{"p2 reads an operator tenant", p2, "GET", "/admin/v1/tenants/acme", nil, 404, "not_found"},
		{"p2 reads p1", p2, "GET", "/admin/v1/partners/p1", nil, 404, "not_found"},
		{"p2 lists partners", p2, "GET", "/admin/v1/partners", nil, 403, "operator_required"},
		{"p2 grows its allotment", p2, "PUT", "/admin/v1/partners/p2/allotment", allot(100000), 403, "operator_required"},
		{"p2 takes p1's prefix", p2, "POST", "/admin/v1/tenants", map[string]any{"id": "p1.evil"}, 400, "invalid_value"},
		{"p1 exceeds its allotment", p1, "POST", "/admin/v1/tenants", map[string]any{"id": "p1.more",
			"limits": []map[string]any{{"scope": "s1", "dimension": "requests", "capacity": 2401}}}, 400, "allotment_exceeded"},
		{"p1 exceeds it with a slower period", p1, "PUT", "/admin/v1/tenants/p1.shop/limits", map[string]any{
			"limits": []map[string]any{{"scope": "s1", "dimension": "requests", "capacity": 360001, "period_ms": 3600000}}}, 400, "allotment_exceeded"},
	}
	for _, tc := range tests {
		var code int
		var out map[string]any
		if tc.method == "GET" {
			code, out = f.do(tc.token, tc.method, tc.path, nil)
		} else {
			code, out = f.change(tc.token, tc.method, tc.path, tc.body)
		}
		if code != tc.status || errCode(out) != tc.code {
			t.Errorf("%s: %d %q, want %d %q (%v)", tc.name, code, errCode(out), tc.status, tc.code, out)
		}
	}
	// Lists show only the partner's own tenants.
	for p, want := range map[string]string{p1: "[p1.shop]", p2: "[]"} {
		out := f.mustDo(200, p, "GET", "/admin/v1/tenants", nil)
		var ids []string
		for _, t := range out["tenants"].([]any) {
			ids = append(ids, t.(map[string]any)["id"].(string))
		}
		if got := fmt.Sprint(ids); got != want && !(want == "[]" && ids == nil) {
			t.Errorf("partner list %s, want %s", got, want)
		}
	}
	// Within the allotment is fine (3600 + 2400 = 6000).
	f.mustChange(201, p1, "POST", "/admin/v1/tenants", map[string]any{"id": "p1.more",
		"limits": []map[string]any{{"scope": "s1", "dimension": "requests", "capacity": 2400}}})
}

// TestApplyIsPure: the same state and op give the same state byte for byte,
// and the input state is never changed.
func TestApplyIsPure(t *testing.T) {
	f := newFixture(t)
	s := f.store.State()
	before := marshalState(s)
	op := Op{Kind: OpKeyCreate, Tenant: "acme", Key: "acme-2", KeyDefaults: Key{Team: "search"}, SecretSHA256: config.HashKey("x")}
	a, e1 := Apply(s, Actor{}, op)
	b, e2 := Apply(s, Actor{}, op)
	if e1 != nil || e2 != nil {
		t.Fatal(e1, e2)
	}
	if !bytes.Equal(marshalState(a), marshalState(b)) {
		t.Fatal("Apply is not deterministic")
	}
	if !bytes.Equal(marshalState(s), before) {
		t.Fatal("Apply changed its input")
	}
}

func FuzzParseChange(f *testing.F) {
	for _, s := range []string{
		`{"base_version":3,"reason":"r","id":"t","limits":[{"dimension":"requests","capacity":5}]}`,
		`{"base_version":0,"reason":"r"} {}`,
		`{"base_version":-1,"reason":"r"}`,
		`{"reason":"r"}`,
		`[]`,
		`{"base_version":1,"reason":"r","deadline_ms":99999999999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, e := ParseChange(bytes.NewReader(b))
		if e != nil {
			if e.Status < 400 || e.Status >= 500 || e.Code == "" {
				t.Fatalf("bad input got %d %q", e.Status, e.Code)
			}
			return
		}
		if c.BaseVersion == nil || *c.BaseVersion < 0 || strings.TrimSpace(c.Reason) == "" || len(c.Reason) > reasonLenMax || len(c.Limits) > maxLimitsPerLevel {
			t.Fatalf("accepted an invalid change: %+v", c)
		}
	})
}

// TestBindingKeepsAdminStateOverFileReloads: a reloaded file keeps the
// admin state's tenants (once there is one), and an admin change applied
// between a reload's overlay and its swap is installed again.
func TestBindingKeepsAdminStateOverFileReloads(t *testing.T) {
	f := newFixture(t)
	out := f.mustChange(201, opToken, "POST", "/admin/v1/tenants/acme/keys", map[string]any{"id": "acme-2"})
	secret := out["api_key"].(string)
	b := NewBinding(f.gw, f.gw.get(), nil)
	b.Apply(f.store.State())

	// The file changes: a new node name, and a tenant the admin API does
	// not know (ignored: tenants are the admin state's now).
	y := strings.Replace(testYAML, "SEEDHASH", config.HashKey(seedKey), 1)
	y = strings.Replace(y, "node: gw-admin-test", "node: gw-renamed", 1)
	y = strings.Replace(y, "tenants:\n", "tenants:\n  - {id: ghost}\n", 1)
	file, err := config.Load(strings.NewReader(y))
	if err != nil {
		t.Fatal(err)
	}
	next, err := b.Overlay(file)
	if err != nil {
		t.Fatal(err)
	}
	if next.Node != "gw-renamed" || next.Lookup(secret) == nil || len(next.Tenants) != 1 {
		t.Fatalf("overlay: node %q, admin key %v, tenants %d", next.Node, next.Lookup(secret) != nil, len(next.Tenants))
	}
	// An admin change lands before the reloader swaps next in.
	st, e := Prepare(f.store.State(), f.store.State().Version, Actor{}, Op{Kind: OpKeyPause, Tenant: "acme", Key: "acme-2"}, nil)
	if e != nil {
		t.Fatal(e)
	}
	b.Apply(st)
	f.gw.SetConfig(next) // the reloader's swap, with the older state
	b.Installed()
	if id := f.gw.get().Lookup(secret); id == nil || !id.Paused || f.gw.get().Node != "gw-renamed" {
		t.Fatalf("after the reload: %+v", id)
	}
}

// TestEntitlementsThroughTheAdminAPI: a tenant's, a team's and a key's
// entitlements (and a key's expiry) are set through the API, shown by GET
// and installed in the gateway's configuration, where they bound the key's
// identity; names the gateway does not know are refused whole.
func TestEntitlementsThroughTheAdminAPI(t *testing.T) {
	f := newFixture(t)
	base := "/admin/v1/tenants/acme"
	f.mustChange(200, opToken, "PUT", base+"/entitlements", map[string]any{"allowed_classes": []string{"batch", "interactive"}, "max_priority": 20})
	f.mustChange(200, opToken, "PUT", base+"/teams/search/entitlements", map[string]any{"allowed_models": []string{"m"}})
	f.mustChange(200, opToken, "PUT", base+"/keys/acme-app/entitlements", map[string]any{"max_priority": 5, "expires_at": "2030-01-01T00:00:00Z"})
	out := f.mustChange(201, opToken, "POST", base+"/keys", map[string]any{"id": "acme-batch", "class": "batch", "allowed_classes": []string{"batch"}})

	tv := out["tenant"].(map[string]any)
	if fmt.Sprint(tv["allowed_classes"]) != "[batch interactive]" || fmt.Sprint(tv["max_priority"]) != "20" {
		t.Errorf("tenant view: %v", tv)
	}
	if team := tv["teams"].([]any)[0].(map[string]any); fmt.Sprint(team["allowed_models"]) != "[m]" {
		t.Errorf("team view: %v", team)
	}
	if key := tv["keys"].([]any)[0].(map[string]any); fmt.Sprint(key["max_priority"]) != "5" || key["expires_at"] != "2030-01-01T00:00:00Z" {
		t.Errorf("key view: %v", key)
	}
	id := f.gw.get().Lookup(seedKey)
	var names []string
	for _, h := range id.Entitlements {
		names = append(names, h.Name())
	}
	if fmt.Sprint(names) != "[tenant acme team search key acme-app]" || id.ExpiresAtMs != 1893456000000 {
		t.Errorf("installed identity: entitlements %v, expires %d", names, id.ExpiresAtMs)
	}
	// The ledger document the change publishes carries them too, so the
	// ledger refuses a forged event beyond them (ledger entitle.go).
	if got := ledgerEntitlements(t, f.store.State()); got != "[acme: [batch interactive] 20 [] acme/team:search: [] - [m] acme/key:acme-app: [] 5 [] acme/key:acme-batch: [batch] - []]" {
		t.Errorf("published ledger entitlements %s", got)
	}

	for _, tc := range []struct {
		name, path string
		body       map[string]any
		code       string
	}{
		{"unknown class", base + "/entitlements", map[string]any{"allowed_classes": []string{"gold"}}, "invalid_config"},
		{"unrouted model", base + "/keys/acme-app/entitlements", map[string]any{"allowed_models": []string{"gpt-9"}}, "invalid_config"},
		{"priority out of range", base + "/entitlements", map[string]any{"max_priority": 500}, "invalid_value"},
		{"expiry not RFC 3339", base + "/keys/acme-app/entitlements", map[string]any{"expires_at": "tomorrow"}, "invalid_value"},
		{"an existing key's class outside the new entitlement", base + "/entitlements", map[string]any{"allowed_classes": []string{"agent"}}, "invalid_config"},
	} {
		if code, out := f.change(opToken, "PUT", tc.path, tc.body); code != 400 || errCode(out) != tc.code {
			t.Errorf("%s: %d %v, want 400 %s", tc.name, code, out, tc.code)
		}
	}
}

// TestPartnerGrantsOnlyWhatItHolds: a partner's entitlement (set by the
// operator) bounds every request of its sub-tenants, and a partner that
// tries to grant beyond it is refused with 403 entitlement_exceeded.
func TestPartnerGrantsOnlyWhatItHolds(t *testing.T) {
	f := newFixture(t)
	out := f.mustChange(201, opToken, "POST", "/admin/v1/partners", map[string]any{"id": "p1", "allowed_classes": []string{"batch"}, "max_priority": 0,
		"limits": []map[string]any{{"scope": "s1", "dimension": "requests", "capacity": 6000}}})
	if fmt.Sprint(out["partner"].(map[string]any)["allowed_classes"]) != "[batch]" {
		t.Errorf("partner view: %v", out["partner"])
	}
	p1 := out["partner_token"].(string)
	f.mustChange(201, p1, "POST", "/admin/v1/tenants", map[string]any{"id": "p1.shop"})
	out = f.mustChange(201, p1, "POST", "/admin/v1/tenants/p1.shop/keys", map[string]any{"id": "p1.k", "class": "batch"})
	id := f.gw.get().Lookup(out["api_key"].(string))
	if id == nil || len(id.Entitlements) != 1 || id.Entitlements[0].Name() != "partner p1" {
		t.Fatalf("the partner's entitlement does not bound its key: %+v", id)
	}
	if got := ledgerEntitlements(t, f.store.State()); !strings.Contains(got, "p1.shop/partner:p1: [batch] 0 []") {
		t.Errorf("published ledger entitlements %s: the partner's should bound p1.shop", got)
	}
	for _, tc := range []struct {
		name, method, path string
		body               map[string]any
	}{
		{"tenant class", "PUT", "/admin/v1/tenants/p1.shop/entitlements", map[string]any{"allowed_classes": []string{"interactive"}}},
		{"key priority", "PUT", "/admin/v1/tenants/p1.shop/keys/p1.k/entitlements", map[string]any{"max_priority": 100}},
		{"new key's class", "POST", "/admin/v1/tenants/p1.shop/keys", map[string]any{"id": "p1.k2", "class": "batch", "allowed_classes": []string{"batch", "agent"}}},
	} {
		if code, out := f.change(p1, tc.method, tc.path, tc.body); code != 403 || errCode(out) != "entitlement_exceeded" {
			t.Errorf("%s: %d %v, want 403 entitlement_exceeded", tc.name, code, out)
		}
	}
	// Within it: allowed. Only the operator changes the partner's own.
	f.mustChange(200, p1, "PUT", "/admin/v1/tenants/p1.shop/entitlements", map[string]any{"allowed_classes": []string{"batch"}, "max_priority": 0})
	if code, out := f.change(p1, "PUT", "/admin/v1/partners/p1/entitlements", map[string]any{}); code != 403 || errCode(out) != "operator_required" {
		t.Errorf("partner widening itself: %d %v", code, out)
	}
}

// ledgerEntitlements renders the entitlements of st's ledger document,
// one "holder: classes max_priority profiles" each.
func ledgerEntitlements(t *testing.T, st State) string {
	t.Helper()
	doc, err := ledger.ParseConfig(st.Ledger)
	if err != nil {
		t.Fatalf("the published ledger document does not parse: %v", err)
	}
	var out []string
	for _, e := range doc.Entitlements {
		k := e.Tenant
		switch {
		case e.Team != "":
			k += "/team:" + e.Team
		case e.Key != "":
			k += "/key:" + e.Key
		}
		if e.Holder != "" {
			k += "/" + e.Holder
		}
		p := "-"
		if e.MaxPriority != nil {
			p = fmt.Sprint(*e.MaxPriority)
		}
		out = append(out, fmt.Sprintf("%s: %v %s %v", k, e.AllowedClasses, p, e.AllowedProfiles))
	}
	return fmt.Sprint(out)
}
