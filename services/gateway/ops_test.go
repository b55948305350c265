package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestOperationalEndpoints: /livez and its aliases are alive whatever the
// ledger does; /readyz says not ready on a gateway with no ledger probe;
// /metrics on the API listener answers only the operator token, and the
// metrics handler serves them as they are.
func TestOperationalEndpoints(t *testing.T) {
	s := New(mustLoad(t, minimal("600")), nil, nil)
	s.m.countTokens("tenant-a", &schemas.Reconciled{InputTokens: 5, OutputTokens: 7})
	s.m.countTenant("tenant-a", "insufficient_quota")
	srv := httptest.NewServer(s)
	defer srv.Close()
	metrics := httptest.NewServer(s.MetricsHandler())
	defer metrics.Close()
	get := func(url, auth string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	type row struct {
		name, url, auth string
		status          int
		contains        string
	}
	steps := []struct {
		token string // the operator token set before the rows ("" = none)
		rows  []row
	}{
		{"", []row{
			{"livez", srv.URL + "/livez", "", 200, "ok"},
			{"healthz", srv.URL + "/healthz", "", 200, "ok"},
			{"LiteLLM liveliness", srv.URL + "/health/liveliness", "", 200, "ok"},
			{"readyz without a ledger probe", srv.URL + "/readyz", "", 503, `"name":"ledger_probe","ok":false`},
			{"LiteLLM readiness", srv.URL + "/health/readiness", "", 503, `"ready":false`},
			{"metrics on the API listener, no operator token", srv.URL + "/metrics", "", 404, "--metrics-addr"},
			{"metrics listener", metrics.URL, "", 200, `sluice_gateway_tokens_total{dimension="input",source="actual",tenant="tenant-a"} 5`},
			{"per-tenant denials", metrics.URL, "", 200, `sluice_gateway_tenant_requests_total{outcome="insufficient_quota",tenant="tenant-a"} 1`},
		}},
		{"op-secret", []row{
			{"metrics on the API listener, no token", srv.URL + "/metrics", "", 401, "missing_admin_token"},
			{"metrics on the API listener, wrong token", srv.URL + "/metrics", "Bearer nope", 401, "invalid_admin_token"},
			{"metrics on the API listener, operator token", srv.URL + "/metrics", "bearer op-secret", 200, "sluice_gateway_tokens_total"},
		}},
	}
	for _, st := range steps {
		if st.token != "" {
			s.SetOperatorToken(st.token)
		}
		for _, r := range st.rows {
			status, body, h := get(r.url, r.auth)
			if status != r.status || !strings.Contains(body, r.contains) {
				t.Errorf("%s: %d %q, want %d containing %q", r.name, status, body, r.status, r.contains)
			}
			if r.url != metrics.URL && h.Get("X-Sluice-Request-Id") == "" {
				t.Errorf("%s: no X-Sluice-Request-Id", r.name)
			}
		}
	}
}

// TestTenantLabelsCanBeSwitchedOff: with WithTenantLabels(false) every
// tenant's tokens count in one series (tenant=""), so no tenant id appears.
func TestTenantLabelsCanBeSwitchedOff(t *testing.T) {
	s := New(mustLoad(t, minimal("600")), nil, nil, WithTenantLabels(false))
	s.m.countTokens("tenant-a", &schemas.Reconciled{InputTokens: 5, SpendMicros: 3})
	s.m.countTokens("tenant-b", &schemas.Reconciled{InputTokens: 6, SpendMicros: 4})
	s.m.countTenant("tenant-a", "success")
	s.m.countTenant("tenant-b", "success")
	srv := httptest.NewServer(s.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(b), "tenant-a") || !strings.Contains(string(b), `sluice_gateway_tokens_total{dimension="input",source="actual",tenant=""} 11`) ||
		!strings.Contains(string(b), `sluice_gateway_spend_micro_usd_total{tenant=""} 7`) ||
		!strings.Contains(string(b), `sluice_gateway_tenant_requests_total{outcome="success",tenant=""} 2`) {
		t.Errorf("tenant labels not off:\n%s", b)
	}
}
