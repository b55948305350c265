// Package gateway is the admission node: it speaks the provider APIs callers
// already use, and governs every request through the ledger before it leaves
// for the provider: identity → route → estimate → reserve → dispatch →
// reconcile. It is stateless; every decision is the ledger's.
package gateway

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/apierr/httperr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/admission/provider"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/httpmux"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// Server is the gateway's HTTP handler. It is safe for concurrent use; the
// configuration is swapped atomically on reload, and a request keeps the
// configuration it started with.
type Server struct {
	cfg      atomic.Pointer[config.Config]
	rc       *reserve.Client
	est      *estimate.Estimator
	upstream *http.Client
	log      *slog.Logger
	reg      *prometheus.Registry
	mux      *http.ServeMux
	posts    map[string]http.HandlerFunc // the mux's exact-path POST routes (the API calls): ServeHTTP's one lookup
	m        *metrics
	idem     *idemStore
	emCap    emergencyCap // local admissions while the ledger is silent
	deg      degradedMode // degraded mode's budget (degraded.go)

	// The admin API (admin.go) and where /v1/sluice/usage reads remaining
	// quota (usage.go).
	admin   atomic.Pointer[http.Handler]
	levels  LevelSource
	explain Explainer // GET /v1/sluice/requests/{id} (explain.go)

	// Operational endpoints (ops.go).
	probe          bool
	probeGroup     string
	adminExpected  bool
	adminLoaded    atomic.Bool
	operatorToken  atomic.Pointer[string]
	noTenantLabels bool
}

// Option configures a Server.
type Option func(*Server)

// WithUpstreamClient replaces the HTTP client used to call providers
// (tests and benchmarks use it to count or intercept upstream calls).
func WithUpstreamClient(c *http.Client) Option { return func(s *Server) { s.upstream = c } }

// New returns a gateway serving cfg through the ledger client rc. It loads
// the tokenizer encodings before returning so the first request does not
// pay for them.
func New(cfg *config.Config, rc *reserve.Client, log *slog.Logger, opts ...Option) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{rc: rc, log: log, reg: prometheus.NewRegistry(), est: estimate.New(estimate.Options{}),
		upstream: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}}
	for _, o := range opts {
		o(s)
	}
	if err := s.est.Preload(); err != nil {
		// Estimation still works (encodings load lazily); say why the
		// first request will be slow.
		log.Warn("tokenizer preload failed", "err", err)
	}
	s.cfg.Store(cfg)
	s.idem = newIdemStore(cfg.Idempotency)
	s.m = newMetrics(s.reg, !s.noTenantLabels)
	s.reg.MustRegister(ledgerCollectors(rc)...)
	s.mux = http.NewServeMux()
	s.posts = map[string]http.HandlerFunc{}
	post := func(path string, h http.HandlerFunc) {
		s.mux.HandleFunc("POST "+path, h)
		s.posts[path] = h
	}
	post("/v1/chat/completions", s.handle(provider.APIChat))
	post("/v1/embeddings", s.handle(provider.APIEmbeddings))
	post("/v1/messages", s.handle(provider.APIMessages))
	post("/v1/responses", s.handle(provider.APIResponses))
	post("/v1/responses/input_tokens", s.handleResponsesInputTokens)
	post("/v1/completions", s.handle(provider.APICompletions))
	post("/v1/messages/count_tokens", s.handleCountTokens)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /v1/models/{id...}", s.handleModel)
	s.mux.HandleFunc("GET /v1/sluice/usage", s.handleUsage)
	s.mux.HandleFunc("/admin/v1/", s.serveAdmin)
	s.mux.HandleFunc("GET /admin/v1/budgets", s.handleAdminBudgets) // usage_budget.go: reads ledger snapshots, which the admin store does not hold
	s.mux.HandleFunc("GET /v1/sluice/requests/{id}", s.handleExplain)
	s.routeOps()
	s.startProbe()
	return s
}

// Config returns the running configuration.
func (s *Server) Config() *config.Config { return s.cfg.Load() }

// SetConfig swaps in a validated configuration (hot reload). Requests in
// flight finish under the configuration they started with.
func (s *Server) SetConfig(c *config.Config) { s.cfg.Store(c) }

// Estimator returns the server's estimator (shared by `sluice estimate`).
func (s *Server) Estimator() *estimate.Estimator { return s.est }

// ServeHTTP implements http.Handler. Unknown paths and wrong methods get the
// error contract too, in the Anthropic shape under /v1/messages.
//
// Every answer carries X-Sluice-Request-Id, set here before routing: an
// API request keeps it as its logical request id (handle), and a refusal
// before any request existed (a bad key, a bad header, an unknown path)
// still names one that logs and support can find.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderRequestID, eventid.NewID())
	if r.Method == http.MethodPost {
		if h, ok := s.posts[r.URL.Path]; ok {
			h(w, r) // what the mux would pick: an exact path, no wildcard
			return
		}
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		anth := strings.HasPrefix(r.URL.Path, "/v1/messages")
		// A path routed under other methods is a 405 with Allow, read from
		// the route table (no list to keep in step with it).
		if allow := httpmux.Allowed(s.mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			httperr.Write(w, apierr.New(http.StatusMethodNotAllowed, apierr.CodeMethodNotAllowed,
				fmt.Sprintf("%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))), anth)
			return
		}
		httperr.Write(w, apierr.New(http.StatusNotFound, apierr.CodeNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)), anth)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg.Load()
	id, e := s.identify(cfg, r)
	if e != nil {
		s.m.count(e.Code)
		httperr.Write(w, e, r.Header.Get("anthropic-version") != "")
		return
	}
	out := struct {
		Object  string        `json:"object"`
		Data    []modelObject `json:"data"`
		HasMore bool          `json:"has_more"`
		FirstID string        `json:"first_id,omitempty"`
		LastID  string        `json:"last_id,omitempty"`
	}{Object: "list", Data: []modelObject{}}
	for _, m := range visibleModels(cfg, id) {
		out.Data = append(out.Data, newModelObject(m))
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = out.Data[0].ID, out.Data[n-1].ID
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// modelObject is one model readable by both SDKs: OpenAI's fields plus
// Anthropic's (type, display_name, created_at).
type modelObject struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Type        string `json:"type"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

func newModelObject(id string) modelObject {
	return modelObject{ID: id, Object: "model", OwnedBy: "sluice", Type: "model", DisplayName: id, CreatedAt: "1970-01-01T00:00:00Z"}
}

// handleModel answers GET /v1/models/{id} (OpenAI's models.retrieve,
// Anthropic's models.retrieve): a model the gateway routes, or 404
// model_not_found.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg.Load()
	anthropic := r.Header.Get("anthropic-version") != ""
	ident, e := s.identify(cfg, r)
	if e != nil {
		s.m.count(e.Code)
		httperr.Write(w, e, anthropic)
		return
	}
	id := r.PathValue("id")
	if slices.Contains(cfg.Models(), id) {
		if e := modelAllowed(ident, id); e != nil {
			httperr.Write(w, e, anthropic)
			return
		}
	}
	if !slices.Contains(cfg.Models(), id) {
		e := apierr.New(http.StatusNotFound, apierr.CodeModelNotFound, fmt.Sprintf("model %q is not routed by this gateway (GET /v1/models lists those that are)", id))
		e.Param = "model"
		httperr.Write(w, e, anthropic)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(newModelObject(id))
}

// clientKey is the API key the caller presented: Authorization: Bearer
// (the scheme case-insensitive, RFC 9110 §11.1), else x-api-key. identify
// resolves it; every provider message is redacted of it (provider.Secrets).
func clientKey(r *http.Request) string {
	if key, _ := httpmux.BearerToken(r.Header.Get("Authorization")); key != "" {
		return key
	}
	return strings.TrimSpace(r.Header.Get("x-api-key"))
}

// identify resolves the caller's API key.
func (s *Server) identify(cfg *config.Config, r *http.Request) (*config.Identity, *apierr.Error) {
	key := clientKey(r)
	if key == "" {
		return nil, apierr.New(http.StatusUnauthorized, apierr.CodeMissingKey, "no API key: send Authorization: Bearer <key> or x-api-key")
	}
	id := cfg.Lookup(key)
	if id == nil {
		return nil, apierr.New(http.StatusUnauthorized, apierr.CodeInvalidKey, "invalid API key")
	}
	if id.Disabled {
		return nil, apierr.New(http.StatusUnauthorized, apierr.CodeKeyDisabled, "this API key is disabled")
	}
	if expired(id, time.Now()) {
		// OpenAI's answer to a revoked key: 401 invalid_api_key.
		return nil, apierr.New(http.StatusUnauthorized, apierr.CodeInvalidKey,
			"invalid API key: this key expired at "+time.UnixMilli(id.ExpiresAtMs).UTC().Format(time.RFC3339)+"; ask your Sluice administrator for a new one")
	}
	if id.TenantPaused || id.Paused {
		what := "key " + id.KeyID
		if id.TenantPaused {
			what = "tenant " + id.Tenant
		}
		e := apierr.New(http.StatusForbidden, apierr.CodePaused, what+" is paused by an operator (emergency pause); contact your Sluice administrator")
		e.Sluice.Tenant, e.Sluice.KeyID, e.Sluice.GatewayDecision = id.Tenant, id.KeyID, schemas.GDRejectedPolicy
		return nil, e
	}
	return id, nil
}

type metrics struct {
	requests *prometheus.CounterVec
	attempts *prometheus.CounterVec
	dropped  prometheus.Counter
	latency  *prometheus.HistogramVec
	// answer is the ledger's round trip as the request path sees it: from
	// producing a reservation to the first decision on it.
	answer prometheus.Histogram
	// sendHold is how long granted attempts with a send-at were held
	// before their dispatch (sendhold.go).
	sendHold prometheus.Histogram
	// lateGrants counts grants not dispatched because they arrived too
	// long after the ledger's log time, by class and what followed.
	lateGrants *prometheus.CounterVec
	// degraded counts the requests degraded mode admitted locally, or
	// refused, by class and verdict (degraded.go).
	degraded *prometheus.CounterVec
	// tokens counts reconciled tokens by tenant, dimension and source
	// (estimated, actual): token pressure per tenant and estimation drift
	// for the alerting rules (dashboards/alerts).
	tokens *prometheus.CounterVec
	// tenantRequests counts API requests by tenant and outcome (success or
	// the refusal's code): per-tenant traffic and denials. spend counts the
	// reconciled spend by tenant.
	tenantRequests *prometheus.CounterVec
	spend          *prometheus.CounterVec
	// byKey caches the children the request path counts (metriccache.go).
	byKey *metricCache
	// tenantLabels: label tokens by tenant; off, every tenant counts
	// under tenant="" (WithTenantLabels).
	tenantLabels bool
}

func newMetrics(r prometheus.Registerer, tenantLabels bool) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_gateway_requests_total", Help: "Requests by outcome or error code."}, []string{"outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_gateway_upstream_attempts_total", Help: "Upstream attempts by provider and HTTP status."}, []string{"provider", "status"}),
		dropped:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_gateway_events_dropped_total", Help: "Events that could not be produced (logged with their type and request id)."}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_gateway_request_seconds", Help: "End-to-end request latency by API.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"api"}),
		answer: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_gateway_ledger_answer_seconds",
			Help:    "Time from producing a reservation (ReserveRequested, RetryRequested) to the ledger's first decision on it: the ledger round trip on the request path.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		sendHold: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_gateway_send_hold_seconds",
			Help:    "How long granted attempts with a send-at (a requests bucket paced at one request per window) were held before their dispatch, so that they reach the provider as far apart as the ledger granted them.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 10)}),
		lateGrants: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_gateway_late_grants_total",
			Help: "Grants released undispatched because they reached the gateway later than late_grant_ms after the ledger decided, by class and action (reserved_again, refused)."}, []string{"class", "action"}),
	}
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_gateway_tokens_total",
		Help: "Tokens of reconciled requests by tenant, dimension (input, output) and source (estimated: the reservation's estimate; actual: the provider's usage)."}, []string{"tenant", "dimension", "source"})
	m.degraded = newDegradedMetric()
	m.tenantRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_gateway_tenant_requests_total",
		Help: "API requests of identified callers by tenant and outcome (success, or the refusal's error code)."}, []string{"tenant", "outcome"})
	m.spend = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_gateway_spend_micro_usd_total",
		Help: "Spend of reconciled requests by tenant, in micro-USD (the route candidate's prices × the provider's usage)."}, []string{"tenant"})
	m.tenantLabels = tenantLabels
	r.MustRegister(m.requests, m.attempts, m.dropped, m.latency, m.answer, m.sendHold, m.lateGrants, m.tokens, m.tenantRequests, m.spend, m.degraded)
	m.byKey = newMetricCache(m)
	return m
}

// countTokens adds a reconciled request's estimate and actual usage to
// sluice_gateway_tokens_total.
func (m *metrics) countTokens(tenant string, rec *schemas.Reconciled) {
	if !m.tenantLabels {
		tenant = ""
	}
	t := m.byKey.tokens.get(tenant)
	t.inEst.Add(float64(rec.EstimatedInputTokens))
	t.inAct.Add(float64(rec.InputTokens))
	t.outEst.Add(float64(rec.EstimatedOutputTokens))
	t.outAct.Add(float64(rec.OutputTokens))
	t.spend.Add(float64(rec.SpendMicros))
}

// countTenant adds one to sluice_gateway_tenant_requests_total{tenant,
// outcome}.
func (m *metrics) countTenant(tenant, outcome string) {
	if !m.tenantLabels {
		tenant = ""
	}
	m.byKey.tenantRequests.get(tenantOutcome{tenant, outcome}).Inc()
}

// count adds one to sluice_gateway_requests_total{outcome}.
func (m *metrics) count(outcome string) {
	m.byKey.requests.get(outcome).Inc()
}
