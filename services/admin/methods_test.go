package admin

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
)

// TestAdminWrongMethod: a path of the route table under a method it does
// not serve is 405 method_not_allowed with an Allow header, before any
// authentication (the route table is public: openapi.json); an unknown
// path stays 404.
func TestAdminWrongMethod(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		token, method, path string
		status              int
		allow, code         string
	}{
		{opToken, "GET", "/admin/v1/tenants/shop/pause", 405, "POST", "method_not_allowed"},
		{"", "GET", "/admin/v1/tenants/shop/keys/k/revoke", 405, "POST", "method_not_allowed"},
		{opToken, "POST", "/admin/v1/tenants/shop", 405, "GET, HEAD, DELETE", "method_not_allowed"},
		{opToken, "DELETE", "/admin/v1/tenants", 405, "GET, HEAD, POST", "method_not_allowed"},
		{opToken, "GET", "/admin/v1/partners/p/allotment", 405, "PUT", "method_not_allowed"},
		{opToken, "POST", "/admin/v1/openapi.json", 405, "GET, HEAD", "method_not_allowed"},
		{opToken, "GET", "/admin/v1/nothing", 404, "", "not_found"},
		{opToken, "GET", "/admin/v1/tenants", 200, "", ""},
	} {
		req := httptest.NewRequest(c.method, c.path, nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		rec := httptest.NewRecorder()
		f.h.ServeHTTP(rec, req)
		if rec.Code != c.status || rec.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q, want %d Allow %q: %s", c.method, c.path, rec.Code, rec.Header().Get("Allow"), c.status, c.allow, rec.Body)
		}
		var out map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		if got := errCode(out); got != c.code {
			t.Errorf("%s %s: code %q, want %q", c.method, c.path, got, c.code)
		}
	}
}
