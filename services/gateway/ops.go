package gateway

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/apierr/httperr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/httpmux"
)

// The operational endpoints (docs/gateway.md, Operational endpoints).
//
// /livez says the process serves HTTP, nothing more: a liveness probe that
// restarts a gateway whose ledger is down would only add a restart to the
// outage. /readyz says whether this gateway can get decisions now; a load
// balancer sends it traffic only then. It used to say ready from the
// start: before the ledger had joined (the first 200 on the real cluster
// came 18 s later, the requests before it got 503s) and while the ledger
// was stopped (chat answered 503 ledger_unavailable after 2 s).

// RoundTripFreshMs is how recent the newest evidence that a scope's ledger
// answers must be for /readyz (a proven round trip, or a probe round that
// saw a ledger member hold the partition with nothing stuck;
// reserve.Health): the probe runs every second, so five leaves room for a
// slow round or two.
const RoundTripFreshMs = 5_000

// WithLedgerProbe makes /readyz depend on a proven ledger round trip: it
// starts the ledger client's probe (reserve.Client.StartProbe) for the
// scopes of the running configuration's providers. group is the ledger's
// consumer group ("" = "sluice-ledger").
func WithLedgerProbe(group string) Option {
	return func(s *Server) { s.probeGroup, s.probe = group, true }
}

// WithAdminState makes /readyz wait until the admin state is installed
// (AdminLoaded; services/admin.Start calls it): before that, the keys are
// the file's, not the admin API's.
func WithAdminState() Option { return func(s *Server) { s.adminExpected = true } }

// WithTenantLabels turns the per-tenant label of the gateway's metrics on
// (the default) or off: with it off, sluice_gateway_tokens_total has one
// series per dimension and source for all tenants (tenant=""), so a fleet
// of many tenants does not make one series each.
func WithTenantLabels(on bool) Option { return func(s *Server) { s.noTenantLabels = !on } }

// AdminLoaded marks the admin state installed (see WithAdminState).
func (s *Server) AdminLoaded() { s.adminLoaded.Store(true) }

// SetOperatorToken lets /metrics on the API listener answer callers who
// present the operator token (Authorization: Bearer). Without one it
// answers 404 there: the metrics list every tenant and its volume, so
// they are served on the metrics listener (MetricsHandler,
// `sluice gateway --metrics-addr`, loopback by default).
func (s *Server) SetOperatorToken(tok string) { s.operatorToken.Store(&tok) }

// MetricsHandler serves the gateway's Prometheus metrics without
// authentication, for a listener of their own.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
}

func (s *Server) startProbe() {
	if !s.probe || s.rc == nil {
		return
	}
	s.rc.StartProbe(reserve.ProbeConfig{Group: s.probeGroup, Scopes: func() []string { return scopes(s.cfg.Load()) }})
}

// scopes lists the ledger scopes of cfg's providers, sorted: each
// provider scope, or the sub-scopes of a split one (config.LedgerScopes),
// since those are the partitions that decide its requests and the ones a
// probe must go through.
func scopes(cfg *config.Config) []string {
	var out []string
	for _, p := range cfg.Providers {
		for _, sc := range cfg.LedgerScopes(p.Scope) {
			if !slices.Contains(out, sc) {
				out = append(out, sc)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (s *Server) routeOps() {
	live := func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }
	s.mux.HandleFunc("GET /livez", live)
	s.mux.HandleFunc("GET /healthz", live)
	s.mux.HandleFunc("GET /health/liveliness", live) // LiteLLM's names
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux.HandleFunc("GET /health/readiness", s.handleReady)
	s.mux.HandleFunc("GET /metrics", s.handleMetrics)
}

// Readiness is the /readyz body: whether the gateway can get decisions
// now, and each check that says so.
type Readiness struct {
	Ready  bool    `json:"ready"`
	Checks []Check `json:"checks"`
}

// Check is one readiness condition.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Readiness evaluates the readiness checks at nowMs.
func (s *Server) Readiness(nowMs int64) Readiness {
	var h reserve.Health
	if s.rc != nil && s.probe {
		h = s.rc.Health()
	}
	return s.readiness(s.cfg.Load(), h, nowMs)
}

// readiness is Readiness over the probe's health h.
func (s *Server) readiness(cfg *config.Config, h reserve.Health, nowMs int64) Readiness {
	var checks []Check
	add := func(name string, ok bool, detail string) { checks = append(checks, Check{name, ok, detail}) }
	if !h.Probing {
		add("ledger_probe", false, "no ledger probe runs on this gateway (gateway.WithLedgerProbe)")
	}
	add("decision_partition", h.DecisionsOK, map[bool]string{true: "this node's partition of the decisions topic answers",
		false: "this node's partition of the decisions topic has no reachable leader, or its fetch failed"}[h.DecisionsOK])
	checks, fresh := roundTripChecks(cfg, h, nowMs, checks)
	if s.adminExpected {
		ok := s.adminLoaded.Load()
		add("admin_state", ok, map[bool]string{true: "installed", false: "the admin state is not installed yet"}[ok])
	}
	usable := 0
	for _, m := range cfg.Models() {
		for _, cd := range cfg.Route(m).Candidates {
			if p := cfg.Provider(cd.Provider); p != nil && slices.ContainsFunc(cfg.LedgerScopes(p.Scope), func(sc string) bool { return fresh[sc] }) {
				usable++
				break
			}
		}
	}
	add("usable_route", usable > 0, fmt.Sprintf("%d of %d routes have a candidate whose scope's ledger answers", usable, len(cfg.Models())))
	r := Readiness{Ready: true, Checks: checks}
	// Every scope need not answer: a route of another scope still serves.
	// The decision partition, the admin state and one usable route must.
	for _, c := range checks {
		if !c.OK && (c.Name == "ledger_probe" || c.Name == "decision_partition" || c.Name == "admin_state" || c.Name == "usable_route") {
			r.Ready = false
		}
	}
	return r
}

// roundTripChecks appends one ledger_round_trip check per ledger scope of
// cfg (scopes: a split scope's sub-scopes each, as each is a partition of
// its own that may have no ledger) and returns which ledger scopes are
// fresh. A split scope serves a route while any of its sub-scopes does:
// the keys of the others are refused, as a route of a scope that does not
// answer is while another route serves.
func roundTripChecks(cfg *config.Config, h reserve.Health, nowMs int64, checks []Check) ([]Check, map[string]bool) {
	fresh := map[string]bool{}
	for _, sc := range scopes(cfg) {
		at, proven := h.RoundTripMs[sc]
		heldAt, held := h.HeldMs[sc]
		fresh[sc] = (proven && nowMs-at <= RoundTripFreshMs) || (held && nowMs-heldAt <= RoundTripFreshMs)
		detail := "no ledger answers for this scope: none holds its partition, or it applies nothing"
		switch {
		case proven && held:
			detail = fmt.Sprintf("last round trip through the ledger %d ms ago; a ledger held its partition %d ms ago (at most %d)", nowMs-at, nowMs-heldAt, RoundTripFreshMs)
		case proven:
			detail = fmt.Sprintf("last round trip through the ledger %d ms ago (at most %d)", nowMs-at, RoundTripFreshMs)
		case held:
			detail = fmt.Sprintf("a ledger held its partition %d ms ago (at most %d)", nowMs-heldAt, RoundTripFreshMs)
		}
		checks = append(checks, Check{"ledger_round_trip:" + sc, fresh[sc], detail})
	}
	return checks, fresh
}

func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	r := s.Readiness(time.Now().UnixMilli())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !r.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(r)
}

// handleMetrics serves /metrics on the API listener to the operator only.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	tok := s.operatorToken.Load()
	if tok == nil || *tok == "" {
		httperr.Write(w, apierr.New(http.StatusNotFound, apierr.CodeNotFound,
			"metrics are not served on the API listener: scrape the metrics listener (sluice gateway --metrics-addr, 127.0.0.1:9464 by default), or start the gateway with an operator token and present it"), false)
		return
	}
	got, ok := httpmux.BearerToken(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice metrics"`)
		httperr.Write(w, apierr.New(http.StatusUnauthorized, apierr.CodeMissingAdminToken, "metrics on the API listener need the operator token: send Authorization: Bearer <operator token>"), false)
		return
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(*tok)) != 1 {
		httperr.Write(w, apierr.New(http.StatusUnauthorized, apierr.CodeInvalidAdminToken, "invalid operator token"), false)
		return
	}
	s.MetricsHandler().ServeHTTP(w, r)
}
