package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// api is the client-facing shape of a request.
type api int

const (
	apiChat       api = iota // POST /v1/chat/completions (OpenAI)
	apiEmbeddings            // POST /v1/embeddings (OpenAI)
	apiMessages              // POST /v1/messages (Anthropic)
)

func (a api) String() string {
	switch a {
	case apiChat:
		return "chat"
	case apiEmbeddings:
		return "embeddings"
	}
	return "messages"
}

// serves reports whether a provider kind can answer this API: OpenAI-shaped
// requests go to OpenAI, Azure and OpenAI-compatible providers (and chat to
// Gemini, translated); Anthropic messages only to Anthropic. Bodies are
// passed through, so no other translation is attempted.
func (a api) serves(kind string) bool {
	switch a {
	case apiChat:
		return kind != config.KindAnthropic
	case apiEmbeddings:
		return kind == config.KindOpenAI || kind == config.KindAzure || kind == config.KindOpenAICompatible
	}
	return kind == config.KindAnthropic
}

func (a api) parse(body []byte) (estimate.Request, error) {
	switch a {
	case apiChat:
		return estimate.ParseOpenAIChat(body)
	case apiEmbeddings:
		return estimate.ParseEmbeddings(body)
	}
	return estimate.ParseAnthropicMessages(body)
}

// call is one logical request from the moment it is admitted for
// reservation until its outcome is recorded. Its attempts share the request
// id; each attempt is a reservation of its own in the ledger.
type call struct {
	s     *Server
	cfg   *config.Config
	api   api
	w     *recorder
	r     *http.Request
	ctx   context.Context // the client's context, bounded by the deadline
	start time.Time

	id    *config.Identity
	adm   admission
	route *config.Route
	cands []candidate // eligible candidates, primary first
	body  []byte
	req   estimate.Request
	est   estimate.Estimate
	reqID string

	attempts int32
	queueMs  int64 // enqueue → first upstream attempt
	finished bool  // Outcome sent
}

// candidate is a route candidate resolved to its provider.
type candidate struct {
	*config.Candidate
	prov     *config.Provider
	fallback bool
}

// handle serves one API. Every path out of it writes exactly one response
// in the error contract or the provider's answer, and leaves no grant held:
// a grant is always followed by Reconciled, Released or ProviderRejected.
func (s *Server) handle(a api) http.HandlerFunc {
	return func(hw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		cfg := s.cfg.Load()
		w := &recorder{ResponseWriter: hw}
		defer func() { s.m.latency.WithLabelValues(a.String()).Observe(time.Since(start).Seconds()) }()
		anth := a == apiMessages
		reject := func(e *apierr.Error) {
			s.m.requests.WithLabelValues(e.Code).Inc()
			apierr.Write(w, e, anth)
		}
		id, e := s.identify(cfg, r)
		if e != nil {
			reject(e)
			return
		}
		adm, e := parseAdmission(r.Header, id, cfg.HasClass)
		if e != nil {
			reject(withIdentity(e, id))
			return
		}
		idemKey, e := parseIdempotencyKey(r.Header)
		if e != nil {
			reject(withIdentity(e, id))
			return
		}
		body, e := readBody(w, r, cfg.BodyLimitBytes)
		if e != nil {
			reject(withIdentity(e, id))
			return
		}
		req, err := a.parse(body)
		if err != nil {
			reject(withIdentity(requestError(err), id))
			return
		}
		route := cfg.Route(req.Model)
		if route == nil {
			e := apierr.New(http.StatusNotFound, apierr.CodeModelNotFound, fmt.Sprintf("the model %q does not exist or is not routed by this gateway", req.Model))
			e.Param = "model"
			reject(withIdentity(e, id))
			return
		}
		c := &call{s: s, cfg: cfg, api: a, w: w, r: r, start: start, id: id, adm: adm, route: route, body: body, req: req, reqID: schemas.NewID()}
		p95 := route.P95OutputTokens
		if req.MaxTokens == 0 && (p95 == 0 || route.DefaultMaxOutputTokens < p95) {
			p95 = route.DefaultMaxOutputTokens // the route's default reservation when the request does not say
		}
		c.est = s.est.Estimate(req, p95)
		if a == apiEmbeddings {
			c.est.OutputTokens = 0
		}

		c.cands = c.eligible()
		if len(c.cands) == 0 {
			e := apierr.New(http.StatusBadRequest, apierr.CodeUnsupportedAPI, fmt.Sprintf("model %q is served by a %s provider, which does not speak this API (%s)", req.Model, cfg.Provider(route.Provider).Kind, r.URL.Path))
			e.Param = "model"
			reject(withIdentity(e, id))
			return
		}

		if idemKey != "" {
			ie, st := s.idem.begin(id.Tenant+"\x00"+idemKey, idemFingerprint(r.URL.Path, body), start)
			switch st {
			case idemReplay:
				for k, v := range ie.header {
					w.Header()[k] = v
				}
				w.Header().Set("Idempotent-Replayed", "true")
				w.WriteHeader(ie.status)
				_, _ = w.Write(ie.body)
				s.m.requests.WithLabelValues("idempotent_replay").Inc()
				return
			case idemInFlight:
				reject(withIdentity(apierr.New(http.StatusConflict, apierr.CodeIdempotencyInFlight, "a request with this Idempotency-Key is still in progress"), id))
				return
			case idemMismatch:
				reject(withIdentity(apierr.New(http.StatusConflict, apierr.CodeIdempotencyReused, "this Idempotency-Key was used with a different request body"), id))
				return
			case idemTooLarge:
				reject(withIdentity(apierr.New(http.StatusConflict, apierr.CodeIdempotencyReused, "this Idempotency-Key's request finished but its response was too large to keep for replay"), id))
				return
			}
			w.capture = s.idem.bodyMax
			defer func() { s.idem.complete(ie, w.status, w.savedHeader(), w.buf.Bytes(), w.truncated) }()
		}

		ctx := r.Context()
		if adm.DeadlineMs > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(adm.DeadlineMs)*time.Millisecond)
			defer cancel()
		}
		c.ctx = ctx
		c.run()
	}
}

// eligible lists the candidates this request may use: the primary if it
// speaks the API, then fallbacks that speak it, whose contract the route
// allows (checked at config load) and that fit this request — its context
// length, tools and structured output — when fallback is allowed at all.
func (c *call) eligible() []candidate {
	var out []candidate
	for i := range c.route.Candidates {
		cd := &c.route.Candidates[i]
		p := c.cfg.Provider(cd.Provider)
		if p == nil || !c.api.serves(p.Kind) || (p.Kind == config.KindGemini && !geminiTranslatable(c.req)) {
			continue
		}
		if len(out) > 0 {
			if !c.adm.Fallback || !c.fits(cd) {
				continue
			}
		}
		out = append(out, candidate{Candidate: cd, prov: p, fallback: len(out) > 0})
	}
	return out
}

// fits tells whether a fallback candidate can serve this very request.
func (c *call) fits(cd *config.Candidate) bool {
	if cd.ContextTokens > 0 && c.est.InputTokens+c.est.OutputTokens > cd.ContextTokens {
		return false
	}
	if len(c.req.Tools) > 0 && !cd.Tools {
		return false
	}
	if rf := c.req.ResponseFormat; rf != nil && rf.Type != "text" && rf.Type != "" && !cd.StructuredOutput {
		return false
	}
	return true
}

// attemptResult is how one upstream attempt ended.
type attemptResult struct {
	done bool // the client has its answer (success or final error)
	// rejected: the provider refused before any byte reached the client;
	// ProviderRejected is already reported, so the grant is settled.
	rej        schemas.ProviderRejected
	retryClass string
}

// run reserves, dispatches and follows the ledger through retries and
// fallbacks until the client has an answer.
func (c *call) run() {
	ci := 0
	c.attempts = 1
	ev := c.reserveEvent(c.cands[ci], c.attempts)
	d, err := c.s.rc.Reserve(c.ctx, ev)
	var lastRej *schemas.ProviderRejected
	for {
		if err != nil {
			c.fail(c.reserveError(err, ev), ev, schemas.GDQueued)
			return
		}
		if d.Status != schemas.StatusGranted {
			// A denial may allow a fallback (the class overloads to
			// fallback, or the ledger refused a retry after a provider
			// rejection): the fallback is a new reservation, in its own
			// scope, that the ledger decides like any other.
			if ci+1 < len(c.cands) && (d.FallbackAllowed || (lastRej != nil && d.RetryClass != ledger.RetryDeadline)) {
				ci++
				c.attempts++
				ev = c.reserveEvent(c.cands[ci], c.attempts)
				lastRej = nil
				d, err = c.s.rc.Reserve(c.ctx, ev)
				continue
			}
			if lastRej != nil {
				c.fail(c.providerError(*lastRej, ev, d), ev, schemas.GDAdmittedThenProviderReject)
				return
			}
			c.fail(decisionError(d, ev), ev, d.GatewayDecision)
			return
		}
		if c.queueMs == 0 {
			c.queueMs = max(1, time.Since(c.start).Milliseconds())
		}
		res := c.dispatch(c.cands[ci], ev, d)
		if res.done {
			return
		}
		rej := res.rej
		lastRej = &rej
		if res.retryClass != ledger.RetryCapacity && res.retryClass != ledger.RetryOverload {
			c.fail(c.providerError(rej, ev, schemas.Decision{}), ev, schemas.GDAdmittedThenProviderReject)
			return
		}
		if c.cfg.EmergencyCapPerSec > 0 {
			// reserve.Client's emergency path assumes a ReserveRequested
			// payload; a RetryRequested would not carry one. Fail clearly
			// instead of retrying while the emergency cap is configured.
			c.fail(c.providerError(rej, ev, schemas.Decision{}), ev, schemas.GDAdmittedThenProviderReject)
			return
		}
		// Ask the ledger: it answers with a Decision for the next attempt
		// (queued until the backoff and Retry-After floor pass, then
		// granted), or a denial when the budget or deadline says no.
		c.attempts++
		retry := c.envelope(schemas.TypeRetryRequested, ev, c.attempts)
		retry.RetryRequested = &schemas.RetryRequested{PreviousAttempt: ev.Attempt, Reason: res.retryClass, RetryAfterMs: rej.RetryAfterMs}
		next := *ev
		next.Attempt = c.attempts
		ev = &next
		d, err = c.s.rc.Reserve(c.ctx, retry)
	}
}

// reserveEvent builds the ReserveRequested of one attempt on cand.
func (c *call) reserveEvent(cand candidate, attempt int32) *schemas.Event {
	ev := schemas.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
	ev.RequestID, ev.Attempt, ev.Node = c.reqID, attempt, c.cfg.Node
	ev.Scope, ev.Tenant, ev.KeyID, ev.Route, ev.Class = cand.prov.Scope, c.id.Tenant, c.id.KeyID, cand.Profile, c.adm.Class
	deadline := int64(0)
	if c.adm.DeadlineMs > 0 {
		deadline = max(1, c.adm.DeadlineMs-time.Since(c.start).Milliseconds())
	}
	ev.ReserveRequested = &schemas.ReserveRequested{
		Path:              path(c.id, cand.Profile, cand.prov),
		InputTokens:       c.est.InputTokens,
		CachedInputTokens: c.est.CachedInputTokens,
		OutputTokens:      c.est.OutputTokens,
		SpendMicros:       cand.SpendMicros(c.est.InputTokens, c.est.OutputTokens),
		Streaming:         c.est.Streaming,
		Priority:          c.adm.Priority,
		DeadlineMs:        deadline,
		FallbackAllowed:   c.adm.Fallback && len(c.cands) > 1,
		PromptFamily:      promptFamily(c.r.Header, &c.req),
	}
	return ev
}

// envelope copies ev's envelope into a new event of type t for attempt.
func (c *call) envelope(t schemas.Type, ev *schemas.Event, attempt int32) *schemas.Event {
	out := schemas.New(t, time.Now().UnixMilli())
	out.RequestID, out.Attempt, out.Node = ev.RequestID, attempt, ev.Node
	out.Scope, out.Tenant, out.KeyID, out.Route, out.Class = ev.Scope, ev.Tenant, ev.KeyID, ev.Route, ev.Class
	return out
}

func path(id *config.Identity, profile string, prov *config.Provider) []schemas.PathLevel {
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
	add("profile", profile)
	add("deployment", prov.Name)
	return p
}

// release gives back the grant of ev's attempt.
func (c *call) release(ev *schemas.Event, reason string, in, out int64) {
	rel := c.envelope(schemas.TypeReleased, ev, ev.Attempt)
	rel.Released = &schemas.Released{Reason: reason, InputTokens: in, OutputTokens: out}
	c.s.report(rel)
}

// fail answers the client with e (in the API's envelope) and records the
// outcome. The caller has already settled any grant.
func (c *call) fail(e *apierr.Error, ev *schemas.Event, gd schemas.GatewayDecision) {
	if e.Sluice.GatewayDecision == "" {
		e.Sluice.GatewayDecision = gd
	}
	fillSluice(e, ev)
	status := "failure"
	switch {
	case e.Code == apierr.CodeCancelled:
		status = "cancelled"
	case e.Code == apierr.CodeDeadlineExceeded || e.Code == apierr.CodeQueueTimeout:
		status = "timeout"
	}
	c.outcome(ev, status, int32(e.Status), e.Code, e.Sluice.GatewayDecision, 0, 0)
	c.s.m.requests.WithLabelValues(e.Code).Inc()
	if c.w.wrote {
		return // a stream already started: nothing more can be said
	}
	apierr.Write(c.w, e, c.api == apiMessages)
}

func fillSluice(e *apierr.Error, ev *schemas.Event) {
	e.Sluice.Scope, e.Sluice.Tenant, e.Sluice.KeyID = ev.Scope, ev.Tenant, ev.KeyID
	e.Sluice.Class, e.Sluice.ModelProfile, e.Sluice.RequestID = ev.Class, ev.Route, ev.RequestID
	if rr := ev.ReserveRequested; rr != nil {
		e.Sluice.EstimatedInput, e.Sluice.EstimatedOutput = rr.InputTokens, rr.OutputTokens
	}
}

func withIdentity(e *apierr.Error, id *config.Identity) *apierr.Error {
	e.Sluice.Tenant, e.Sluice.KeyID = id.Tenant, id.KeyID
	return e
}

// outcome sends the logical request's Outcome (once).
func (c *call) outcome(ev *schemas.Event, status string, httpStatus int32, code string, gd schemas.GatewayDecision, in, out int64) {
	if c.finished {
		return
	}
	c.finished = true
	o := c.envelope(schemas.TypeOutcome, ev, ev.Attempt)
	o.Outcome = &schemas.Outcome{Status: status, HTTPStatus: httpStatus, Attempts: c.attempts, QueueMs: c.queueMs,
		TotalMs: time.Since(c.start).Milliseconds(), ErrorCode: code, GatewayDecision: gd, InputTokens: in, OutputTokens: out}
	c.s.background(o, false)
}

// requestError maps a parser error to a 400 carrying the parser's stable
// code and the offending parameter.
func requestError(err error) *apierr.Error {
	var re *estimate.RequestError
	if errors.As(err, &re) {
		e := apierr.New(http.StatusBadRequest, re.Code, re.Message)
		e.Param = re.Param
		return e
	}
	return apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "malformed request body")
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
	case schemas.StatusConflict:
		e = apierr.New(http.StatusConflict, apierr.CodeInvalidRequest, "the ledger saw this request id and attempt with different content")
	default:
		msg := "rate limit exceeded"
		if d.LimitDimension != "" {
			msg = fmt.Sprintf("rate limit exceeded on %s %s: needed %d, available %d", d.LimitPath, d.LimitDimension, d.Needed, d.Available)
		} else if d.Reason != "" {
			msg = "request refused by the quota ledger: " + d.Reason
		}
		code := apierr.CodeRateLimited
		if d.RetryClass == ledger.RetryPolicy {
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

// providerError is the error contract for a provider refusal that will not
// be retried (not retryable, or the ledger refused the retry d).
func (c *call) providerError(rej schemas.ProviderRejected, ev *schemas.Event, d schemas.Decision) *apierr.Error {
	status, code := http.StatusTooManyRequests, apierr.CodeUpstreamRejected
	switch rej.Kind {
	case ledger.KindOverloaded:
		status, code = http.StatusServiceUnavailable, apierr.CodeUpstreamOverloaded
	case ledger.KindQuotaExhausted:
		code = apierr.CodeQuotaExhausted
	case ledger.KindRequestError:
		status, code = http.StatusBadGateway, apierr.CodeUpstreamRequestError
	}
	msg := fmt.Sprintf("provider %s refused the request (HTTP %d)", ev.Scope, rej.HTTPStatus)
	if rej.Message != "" {
		msg += ": " + rej.Message // already scrubbed of credentials
	}
	if d.Reason != "" {
		msg += "; retry not granted: " + d.Reason
	}
	e := apierr.New(status, code, msg)
	e.Sluice.Type = "provider_limit"
	e.Sluice.Limiter = string(rej.Limiter)
	e.Sluice.Provider = rej.Deployment
	e.Sluice.RetryAfterMs = max(rej.RetryAfterMs, d.RetryAfterMs)
	e.Sluice.GatewayDecision = schemas.GDAdmittedThenProviderReject
	return e
}

func (c *call) reserveError(err error, ev *schemas.Event) *apierr.Error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if c.r.Context().Err() == nil {
			e := apierr.New(http.StatusGatewayTimeout, apierr.CodeDeadlineExceeded, fmt.Sprintf("no capacity within the request's %d ms deadline", c.adm.DeadlineMs))
			e.Sluice.GatewayDecision = schemas.GDQueuedThenExpired
			return e
		}
		e := apierr.New(499, apierr.CodeCancelled, "request cancelled while waiting for capacity")
		e.Sluice.GatewayDecision = schemas.GDQueued
		return e
	}
	e := apierr.New(http.StatusServiceUnavailable, apierr.CodeLedgerUnavailable, "the quota ledger did not answer in time; failing closed (retry shortly)")
	e.Sluice.RetryAfterMs = 1000
	e.Sluice.GatewayDecision = schemas.GDLedgerUnavailable
	if !errors.Is(err, reserve.ErrLedgerUnavailable) {
		c.s.log.Warn("ledger unavailable", "request_id", ev.RequestID, "err", err)
	}
	return e
}

// recorder wraps the client's ResponseWriter: it knows whether the first
// byte went out (after which no retry is allowed) and, for Idempotency-Key
// requests, keeps up to capture bytes of the response for replay.
type recorder struct {
	http.ResponseWriter
	wrote     bool
	status    int
	capture   int
	buf       bytes.Buffer
	truncated bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.wrote = true
	if r.capture > 0 && !r.truncated {
		if r.buf.Len()+len(b) > r.capture {
			r.truncated = true
			r.buf = bytes.Buffer{}
		} else {
			r.buf.Write(b)
		}
	}
	return r.ResponseWriter.Write(b)
}

// Flush forwards to the client connection (SSE).
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) savedHeader() http.Header {
	h := http.Header{}
	for _, k := range []string{"Content-Type", HeaderRequestID} {
		if v := r.Header().Get(k); v != "" {
			h.Set(k, v)
		}
	}
	return h
}

// setSluiceHeaders adds the request id, queue wait and attempt count to a
// successful response.
func (c *call) setSluiceHeaders(h http.Header) {
	h.Set(HeaderRequestID, c.reqID)
	h.Set(HeaderQueueMs, strconv.FormatInt(c.queueMs, 10))
	h.Set(HeaderAttempts, strconv.FormatInt(int64(c.attempts), 10))
}
