// Package gateway is the admission node: it speaks the provider APIs callers
// already use, and governs every request through the ledger before it leaves
// for the provider: identity → route → estimate → reserve → dispatch →
// reconcile. It is stateless; every decision is the ledger's.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/schemas"
)

// Server is the gateway's HTTP handler.
type Server struct {
	cfg      atomic.Pointer[config.Config]
	rc       *reserve.Client
	upstream *http.Client
	log      *slog.Logger
	reg      *prometheus.Registry
	mux      *http.ServeMux
	ready    atomic.Bool
	m        *metrics
}

// New returns a gateway serving cfg through the ledger client rc.
func New(cfg *config.Config, rc *reserve.Client, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{rc: rc, log: log, reg: prometheus.NewRegistry(),
		upstream: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}}
	s.cfg.Store(cfg)
	s.m = newMetrics(s.reg)
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.ready.Store(true)
	return s
}

// Config returns the running configuration.
func (s *Server) Config() *config.Config { return s.cfg.Load() }

// SetConfig swaps in a validated configuration (hot reload).
func (s *Server) SetConfig(c *config.Config) { s.cfg.Store(c) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := s.mux.Handler(r); pattern == "" {
		apierr.Write(w, apierr.New(http.StatusNotFound, apierr.CodeNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)), false)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg.Load()
	if _, e := s.identify(cfg, r); e != nil {
		apierr.Write(w, e, false)
		return
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, m := range cfg.Models() {
		out.Data = append(out.Data, model{ID: m, Object: "model", Created: 0, OwnedBy: "sluice"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// identify resolves the caller's API key.
func (s *Server) identify(cfg *config.Config, r *http.Request) (*config.Identity, *apierr.Error) {
	key := ""
	if a := r.Header.Get("Authorization"); a != "" {
		if k, ok := strings.CutPrefix(a, "Bearer "); ok {
			key = strings.TrimSpace(k)
		}
	}
	if key == "" {
		key = strings.TrimSpace(r.Header.Get("x-api-key"))
	}
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

// chatRequest is the part of an OpenAI chat request the gateway reads; the
// body itself is forwarded untouched except for the model name.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	cfg := s.cfg.Load()
	id, e := s.identify(cfg, r)
	if e != nil {
		s.fail(w, e, nil)
		return
	}
	body, e := readBody(w, r, cfg.BodyLimitBytes)
	if e != nil {
		s.fail(w, e, nil)
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.fail(w, apierr.New(http.StatusBadRequest, apierr.CodeInvalidJSON, "request body is not valid JSON for a chat completion: "+err.Error()), nil)
		return
	}
	if req.Model == "" {
		ee := apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "missing required field: model")
		ee.Param = "model"
		s.fail(w, ee, nil)
		return
	}
	if len(req.Messages) == 0 || req.Messages[0] != '[' {
		ee := apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "messages must be a non-empty array")
		ee.Param = "messages"
		s.fail(w, ee, nil)
		return
	}
	route := cfg.Route(req.Model)
	if route == nil {
		ee := apierr.New(http.StatusNotFound, apierr.CodeModelNotFound, fmt.Sprintf("the model %q does not exist or is not routed by this gateway", req.Model))
		ee.Param = "model"
		s.fail(w, ee, nil)
		return
	}
	prov := cfg.Provider(route.Provider)
	maxOut := route.DefaultMaxOutputTokens
	for _, p := range []*int64{req.MaxTokens, req.MaxCompletionTokens} {
		if p == nil {
			continue
		}
		if *p <= 0 || *p > 1_000_000 {
			ee := apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, fmt.Sprintf("max tokens must be between 1 and 1000000, got %d", *p))
			ee.Param = "max_tokens"
			s.fail(w, ee, nil)
			return
		}
		maxOut = min(maxOut, *p)
	}
	est := estimateInput(req.Messages)

	ev := s.envelope(cfg, schemas.TypeReserveRequested, id, prov, route, schemas.NewID(), 1, r)
	ev.ReserveRequested = &schemas.ReserveRequested{
		Path:         path(id, route, prov),
		InputTokens:  est,
		OutputTokens: maxOut,
		Streaming:    req.Stream,
	}
	d, err := s.rc.Reserve(r.Context(), ev)
	if err != nil {
		s.fail(w, s.reserveError(err, ev), ev)
		return
	}
	if d.Status != schemas.StatusGranted {
		s.fail(w, decisionError(d, ev), ev)
		return
	}
	queueMs := time.Since(start).Milliseconds()
	s.dispatch(w, r, body, req.Model, ev, prov, route, start, queueMs)
}

// dispatch forwards the body to the provider, relays the answer and
// reconciles actual usage with the ledger.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, body []byte, model string, ev *schemas.Event, prov *config.Provider, route *config.Route, start time.Time, queueMs int64) {
	if route.UpstreamModel != model {
		body = replaceModel(body, route.UpstreamModel)
	}
	dis := *ev
	dis.Type, dis.ID, dis.ReserveRequested = schemas.TypeDispatched, schemas.NewID(), nil
	dis.Dispatched = &schemas.Dispatched{Provider: prov.Kind, Deployment: prov.Name, Model: route.UpstreamModel, QueueMs: queueMs}
	s.telemetry(&dis)

	up, err := http.NewRequestWithContext(r.Context(), http.MethodPost, strings.TrimRight(prov.BaseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		s.release(ev, "error")
		s.fail(w, apierr.New(http.StatusInternalServerError, apierr.CodeUpstreamError, "cannot build upstream request"), ev)
		return
	}
	up.Header.Set("Content-Type", "application/json")
	if k := prov.APIKey(); k != "" {
		up.Header.Set("Authorization", "Bearer "+k)
	}
	sent := time.Now()
	resp, err := s.upstream.Do(up)
	if err != nil {
		s.release(ev, "error")
		if r.Context().Err() != nil {
			s.outcome(ev, "cancelled", 499, 1, queueMs, start, apierr.CodeCancelled, schemas.GDAdmitted, 0, 0)
			return
		}
		// Never echo the upstream URL's error verbatim: it may carry a
		// credential in a proxy URL; name the provider instead.
		s.fail(w, apierr.New(http.StatusBadGateway, apierr.CodeUpstreamError, "provider "+prov.Name+" unreachable"), ev)
		return
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	firstByte := time.Since(sent).Milliseconds()
	if err != nil {
		s.release(ev, "error")
		s.fail(w, apierr.New(http.StatusBadGateway, apierr.CodeUpstreamError, "provider "+prov.Name+" response interrupted"), ev)
		return
	}
	var usage struct {
		Usage struct {
			PromptTokens        int64 `json:"prompt_tokens"`
			CompletionTokens    int64 `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(respBody, &usage)
	rec := *ev
	rec.Type, rec.ID, rec.ReserveRequested = schemas.TypeReconciled, schemas.NewID(), nil
	rec.Reconciled = &schemas.Reconciled{
		InputTokens: usage.Usage.PromptTokens, CachedInputTokens: usage.Usage.PromptTokensDetails.CachedTokens,
		OutputTokens: usage.Usage.CompletionTokens, HTTPStatus: int32(resp.StatusCode),
		FirstByteMs: firstByte, TotalMs: time.Since(sent).Milliseconds(),
		EstimatedInputTokens: ev.ReserveRequested.InputTokens, EstimatedOutputTokens: ev.ReserveRequested.OutputTokens,
	}
	s.report(&rec)
	status := "success"
	if resp.StatusCode >= 400 {
		status = "failure"
	}
	s.outcome(ev, status, int32(resp.StatusCode), 1, queueMs, start, "", schemas.GDAdmitted, usage.Usage.PromptTokens, usage.Usage.CompletionTokens)
	for _, h := range []string{"Content-Type", "x-request-id", "openai-processing-ms"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set("X-Sluice-Request-Id", ev.RequestID)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
	s.m.requests.WithLabelValues(status).Inc()
}

func (s *Server) envelope(cfg *config.Config, t schemas.Type, id *config.Identity, prov *config.Provider, route *config.Route, reqID string, attempt int32, r *http.Request) *schemas.Event {
	ev := schemas.New(t, time.Now().UnixMilli())
	ev.RequestID, ev.Attempt, ev.Node = reqID, attempt, cfg.Node
	ev.Scope, ev.Tenant, ev.KeyID, ev.Route = prov.Scope, id.Tenant, id.KeyID, route.Profile
	ev.Class = id.Class
	if c := r.Header.Get("X-Sluice-Class"); c != "" {
		ev.Class = c
	}
	return ev
}

func path(id *config.Identity, route *config.Route, prov *config.Provider) []schemas.PathLevel {
	p := make([]schemas.PathLevel, 0, 6)
	add := func(level, v string) {
		if v != "" {
			p = append(p, schemas.PathLevel{Level: level, ID: v})
		}
	}
	add("org", id.Org)
	add("tenant", id.Tenant)
	add("team", id.Team)
	add("key", id.KeyID)
	add("profile", route.Profile)
	add("deployment", prov.Name)
	return p
}

// estimateInput is a placeholder estimate (bytes/4 + overhead) until the
// tokenizer-based estimator is wired in.
func estimateInput(messages json.RawMessage) int64 { return int64(len(messages))/4 + 8 }

func replaceModel(body []byte, model string) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return body
	}
	b, _ := json.Marshal(model)
	m["model"] = b
	out, err := json.Marshal(m)
	if err != nil {
		return body
	}
	return out
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apierr.Error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodeBodyTooLarge, fmt.Sprintf("request body exceeds the %d-byte limit", limit))
		}
		return nil, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "cannot read request body")
	}
	return b, nil
}

// decisionError turns a refusal by the ledger into the error contract.
func decisionError(d schemas.Decision, ev *schemas.Event) *apierr.Error {
	var e *apierr.Error
	switch d.Status {
	case schemas.StatusExpired:
		e = apierr.New(http.StatusTooManyRequests, apierr.CodeQueueTimeout, "request waited in the "+ev.Class+" queue past its deadline")
	default:
		msg := "rate limit exceeded"
		if d.LimitDimension != "" {
			msg = fmt.Sprintf("rate limit exceeded on %s %s: needed %d, available %d", d.LimitPath, d.LimitDimension, d.Needed, d.Available)
		}
		code := apierr.CodeRateLimited
		if d.RetryClass == "non_retryable_policy" {
			code = apierr.CodeQuotaExhausted
		}
		e = apierr.New(http.StatusTooManyRequests, code, msg)
	}
	e.Sluice.Type = "local_limit"
	e.Sluice.Limiter = string(d.LimitDimension)
	e.Sluice.LimitPath = d.LimitPath
	e.Sluice.RetryAfterMs = d.RetryAfterMs
	e.Sluice.GatewayDecision = d.GatewayDecision
	e.Sluice.FallbackAllowed = d.FallbackAllowed
	return e
}

func (s *Server) reserveError(err error, ev *schemas.Event) *apierr.Error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		e := apierr.New(499, apierr.CodeCancelled, "request cancelled while waiting for capacity")
		e.Sluice.GatewayDecision = schemas.GDQueued
		return e
	}
	e := apierr.New(http.StatusServiceUnavailable, apierr.CodeLedgerUnavailable, "the quota ledger did not answer in time; failing closed (retry shortly)")
	e.Sluice.RetryAfterMs = 1000
	e.Sluice.GatewayDecision = schemas.GDLedgerUnavailable
	s.log.Warn("ledger unavailable", "request_id", ev.RequestID, "err", err)
	return e
}

// fail writes e, filling the request context into its Sluice object, and
// records the outcome.
func (s *Server) fail(w http.ResponseWriter, e *apierr.Error, ev *schemas.Event) {
	if ev != nil {
		e.Sluice.Scope, e.Sluice.Tenant, e.Sluice.KeyID = ev.Scope, ev.Tenant, ev.KeyID
		e.Sluice.Class, e.Sluice.ModelProfile, e.Sluice.RequestID = ev.Class, ev.Route, ev.RequestID
		if rr := ev.ReserveRequested; rr != nil {
			e.Sluice.EstimatedInput, e.Sluice.EstimatedOutput = rr.InputTokens, rr.OutputTokens
		}
		s.outcome(ev, "failure", int32(e.Status), 1, 0, time.UnixMilli(ev.ProducedAtMs), e.Code, e.Sluice.GatewayDecision, 0, 0)
	}
	s.m.requests.WithLabelValues(e.Code).Inc()
	apierr.Write(w, e, false)
}

func (s *Server) release(ev *schemas.Event, reason string) {
	rel := *ev
	rel.Type, rel.ID, rel.ReserveRequested = schemas.TypeReleased, schemas.NewID(), nil
	rel.Released = &schemas.Released{Reason: reason}
	s.report(&rel)
}

func (s *Server) outcome(ev *schemas.Event, status string, httpStatus, attempts int32, queueMs int64, start time.Time, code string, gd schemas.GatewayDecision, in, out int64) {
	o := *ev
	o.Type, o.ID, o.ReserveRequested = schemas.TypeOutcome, schemas.NewID(), nil
	o.Outcome = &schemas.Outcome{Status: status, HTTPStatus: httpStatus, Attempts: attempts, QueueMs: queueMs,
		TotalMs: time.Since(start).Milliseconds(), ErrorCode: code, GatewayDecision: gd, InputTokens: in, OutputTokens: out}
	s.telemetry(&o)
}

// report sends an event the ledger must see (reconcile, release). It is
// synchronous so that a caller's next request sees the capacity returned.
func (s *Server) report(ev *schemas.Event) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.rc.Produce(ctx, ev); err != nil {
		s.log.Error("report to ledger failed; the hold will expire by TTL", "type", ev.Type, "request_id", ev.RequestID, "err", err)
	}
}

func (s *Server) telemetry(ev *schemas.Event) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.rc.Telemetry(ctx, ev); err != nil {
		s.log.Warn("telemetry event lost", "type", ev.Type, "err", err)
	}
}

type metrics struct {
	requests *prometheus.CounterVec
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_gateway_requests_total", Help: "Requests by outcome or error code."}, []string{"outcome"})}
	r.MustRegister(m.requests)
	return m
}
