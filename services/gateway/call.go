package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/apierr/httperr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/admission/lifecycle"
	"github.com/sluice-dev/sluice/admission/provider"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
	"github.com/sluice-dev/sluice/services/gateway/shell"
)

// parse parses a request body of API a.
func parse(a provider.API, body []byte) (estimate.Request, error) {
	switch a {
	case provider.APIChat:
		return estimate.ParseOpenAIChat(body)
	case provider.APIEmbeddings:
		return estimate.ParseEmbeddings(body)
	case provider.APIResponses:
		return estimate.ParseOpenAIResponses(body)
	case provider.APICompletions:
		return estimate.ParseOpenAICompletions(body)
	}
	return estimate.ParseAnthropicMessages(body)
}

// call is one logical request from the moment it is admitted for
// reservation until its outcome is recorded. Its attempts share the request
// id; each attempt is a reservation of its own in the ledger.
type call struct {
	s     *Server
	cfg   *config.Config
	api   provider.API
	w     *recorder
	r     *http.Request
	ctx   context.Context // the client's context, bounded by the deadline
	start time.Time

	id    *config.Identity
	adm   admission
	route *config.Route
	cands []candidate // the route's candidates (lifecycle.Target by index)
	// parsed is the request: its API, its body as sent and as the
	// estimator parsed it, and what a translation took of the body, for
	// every candidate and attempt, so that the body is decoded once
	// (provider.Parsed).
	parsed provider.Parsed
	est    estimate.Estimate
	reqID  string

	lreq lifecycle.Request    // what the lifecycle knows of the request
	lc   *lifecycle.Lifecycle // every rule of the request's life

	// What the shell waits on (Wait): this request's decisions, the
	// client's context (nil once its end was said) and the wake timer.
	decisions <-chan *reserve.Decided
	gone      <-chan struct{}
	wake      *time.Timer

	// The reservation waiting for its first decision, and since when
	// (sluice_gateway_ledger_answer_seconds); zero when none waits.
	askedAttempt int32
	askedAt      time.Time
	askedScope   string // where the ledger's answer ends a degraded episode

	// The send-at of the last grant and its attempt, and its allowance
	// (sendhold.go); sendAtMs 0: none pending.
	sendAtAttempt int32
	sendAtMs      int64
	sendAllowance time.Duration

	// degBuckets is what a degraded admission took of the budget, given
	// back when the request ends (degraded.go).
	degBuckets []lifecycle.DegradedBucket

	// The upstream attempt in flight: its cancel, and the answer held for
	// the lifecycle's Respond (non-streaming) or Relay (streaming).
	upCancel context.CancelFunc
	upResp   *http.Response
	upCand   candidate
	upSent   time.Time
	upEx     provider.Exchange // how the attempt was built (stream.go)
	upStatus int
	upHeader http.Header
	upBody   []byte
}

// candidate is a route candidate resolved to its provider.
type candidate struct {
	*config.Candidate
	prov *config.Provider
}

// handle serves one API. Every path out of it writes exactly one response
// in the error contract or the provider's answer, and leaves no grant held:
// a grant is always followed by Reconciled, Released or ProviderRejected.
func (s *Server) handle(a provider.API) http.HandlerFunc {
	latency := s.m.latency.WithLabelValues(a.String()) // looked up once, not per request
	anth := a == provider.APIMessages
	return func(hw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		cfg := s.cfg.Load()
		w := &recorder{ResponseWriter: hw}
		defer func() { latency.Observe(time.Since(start).Seconds()) }()
		// Built here rather than returned by prepare, so that escape
		// analysis keeps it on the stack (go build -gcflags=-m).
		c := &call{s: s, cfg: cfg, api: a, w: w, r: r, start: start}
		idemKey, e := c.prepare()
		if e != nil {
			s.reject(w, e, anth)
			return
		}
		if idemKey != "" {
			ie, ok := s.beginIdempotent(c, idemKey, anth)
			if !ok {
				return
			}
			w.capture = s.idem.bodyMax
			defer func() { s.idem.complete(ie, w.status, w.savedHeader(), w.buf.Bytes(), w.truncated) }()
		}
		ctx := r.Context()
		if c.adm.DeadlineMs > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(c.adm.DeadlineMs)*time.Millisecond)
			defer cancel()
		}
		c.ctx = ctx
		c.run()
	}
}

// reject answers a request the gateway refuses before it reaches the
// lifecycle, and counts it by code (and by tenant once the key is known),
// in the error contract of the API called.
func (s *Server) reject(w http.ResponseWriter, e *apierr.Error, anth bool) {
	s.m.count(e.Code)
	if e.Sluice.Tenant != "" {
		s.m.countTenant(e.Sluice.Tenant, e.Code)
	}
	httperr.Write(w, e, anth)
}

// prepare takes a request from its headers to a call ready to run, or to
// the error that refuses it, in the order that tells the client the most:
// who is calling, what they may ask for, the body, the model and its
// route, and whether any candidate can serve this API. It returns the
// Idempotency-Key (empty when none was sent). Nothing is reserved
// yet, so a refusal here leaves nothing to give back. The errors after the
// key is known carry its identity (withIdentity); a model the key may not
// use carries it already.
func (c *call) prepare() (string, *apierr.Error) {
	cfg := c.cfg
	id, e := c.s.identify(cfg, c.r)
	if e != nil {
		return "", e
	}
	adm, e := parseAdmission(c.r.Header, id, cfg)
	if e == nil {
		e = entitled(id, adm)
	}
	if e != nil {
		return "", withIdentity(e, id)
	}
	idemKey, e := parseIdempotencyKey(c.r.Header)
	if e != nil {
		return "", withIdentity(e, id)
	}
	body, e := readBody(c.w, c.r, cfg.BodyLimitBytes)
	if e != nil {
		return "", withIdentity(e, id)
	}
	req, err := parse(c.api, body)
	if err != nil {
		return "", withIdentity(requestError(err), id)
	}
	route := cfg.Route(req.Model)
	if route == nil {
		e := apierr.New(http.StatusNotFound, apierr.CodeModelNotFound, fmt.Sprintf("the model %q does not exist or is not routed by this gateway", req.Model))
		e.Param = "model"
		return "", withIdentity(e, id)
	}
	if e := modelAllowed(id, req.Model); e != nil {
		return "", e
	}
	c.id, c.adm, c.route, c.reqID = id, adm, route, requestID(c.w.ResponseWriter)
	c.parsed = provider.Parsed{API: c.api, Request: req, Body: body}
	c.est = c.s.est.EstimateRoute(req, c.s.routeEstimate(route, req.MaxTokens))
	if c.api == provider.APIEmbeddings {
		c.est.OutputTokens = 0
	}
	c.cands = c.candidates()
	c.lreq = c.lifecycleRequest()
	if len(lifecycle.Eligible(&c.lreq)) == 0 {
		e := apierr.New(http.StatusBadRequest, apierr.CodeUnsupportedAPI, c.unsupported())
		e.Param = "model"
		return "", withIdentity(e, id)
	}
	return idemKey, nil
}

// beginIdempotent claims the call's Idempotency-Key before anything is
// reserved. A key already answered is replayed from the store and one in
// progress, reused with another body or whose answer was too large to keep
// is refused: in all four the request is answered here (ok false) and
// never reaches the ledger, so a client's retry cannot be charged twice.
func (s *Server) beginIdempotent(c *call, idemKey string, anth bool) (ie *idemEntry, ok bool) {
	w, id := c.w, c.id
	ie, st := s.idem.begin(id.Tenant+"\x00"+idemKey, idemFingerprint(c.r.URL.Path, c.parsed.Body), c.start)
	switch st {
	case idemReplay:
		for k, v := range ie.header {
			w.Header()[k] = v
		}
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(ie.status)
		_, _ = w.Write(ie.body)
		s.m.count("idempotent_replay")
		return nil, false
	case idemInFlight:
		s.reject(w, withIdentity(apierr.New(http.StatusConflict, apierr.CodeIdempotencyInFlight, "a request with this Idempotency-Key is still in progress"), id), anth)
		return nil, false
	case idemMismatch:
		s.reject(w, withIdentity(apierr.New(http.StatusConflict, apierr.CodeIdempotencyReused, "this Idempotency-Key was used with a different request body"), id), anth)
		return nil, false
	case idemTooLarge:
		s.reject(w, withIdentity(apierr.New(http.StatusConflict, apierr.CodeIdempotencyReused, "this Idempotency-Key's request finished but its response was too large to keep for replay"), id), anth)
		return nil, false
	}
	return ie, true
}

// requestID is the id ServeHTTP gave the request (a new one when the
// handler is called without it, as benchmarks do).
func requestID(w http.ResponseWriter) string {
	if id := w.Header().Get(HeaderRequestID); id != "" {
		return id
	}
	return eventid.NewID()
}

// candidates resolves the route's candidates to their providers, in the
// route's order. Which of them this request may use is the lifecycle's
// rule (lifecycle.Eligible); the adapter says which can serve it.
func (c *call) candidates() []candidate {
	var out []candidate
	for i := range c.route.Candidates {
		cd := &c.route.Candidates[i]
		if p := c.cfg.Provider(cd.Provider); p != nil { // always, once the config loaded
			out = append(out, candidate{Candidate: cd, prov: p})
		}
	}
	return out
}

// run follows the request's life: the shell (services/gateway/shell)
// drives the lifecycle (every rule of reserve, dispatch, retry, fallback,
// reconcile and release is there) and executes the effects it asks for
// through the call (env.go), until the client has its answer.
func (c *call) run() {
	c.lc = lifecycle.New(c.lifecycleConfig(), c.lreq)
	decisions, stop := c.s.rc.Watch(c.reqID)
	defer stop()
	defer func() {
		if c.degBuckets != nil {
			c.s.deg.done(c.degBuckets)
		}
	}()
	defer func() {
		if c.upCancel != nil {
			c.upCancel()
		}
	}()
	c.decisions, c.gone = decisions, c.ctx.Done()
	c.wake = getWakeTimer()
	defer putWakeTimer(c.wake)
	shell.Run(c.lc, c)
}

// request produces the lifecycle's reservation, waiting for the broker's
// ack no longer than ledger_timeout_ms and the request's deadline: the
// wait blocks the request's loop, so with a broker that accepts
// connections and never answers it would otherwise hold the client past
// both (issue 19, D2). The client's going away does not cut it short: the
// lifecycle releases a reservation it stops waiting for.
//
// One context bounded by the earlier of the two: a context and a timer
// fewer per request than nesting the deadline inside the timeout.
func (c *call) request(ev *schemas.Event) error {
	bound := time.Now().Add(time.Duration(c.cfg.LedgerTimeoutMs) * time.Millisecond)
	if dl, ok := c.ctx.Deadline(); ok && dl.Before(bound) {
		bound = dl
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(c.ctx), bound)
	defer cancel()
	return c.s.rc.Request(ctx, stamp(ev))
}

// emergencyOK takes a slot of the emergency cap for attempt. A request
// that spends a cross-scope budget is never admitted by the cap: the cap
// counts requests per second and knows nothing of the budget, so it could
// spend past it for as long as the ledger is away. Such a request is
// admitted locally only by degraded mode, within its share of what the
// scope's lease held (degradedBudgets).
func (c *call) emergencyOK(attempt int32) bool {
	return c.cfg.EmergencyCapPerSec > 0 && c.lc.Awaiting(attempt) && c.ctx.Err() == nil && !c.spendsBudget() &&
		c.s.emCap.take(c.cfg.EmergencyCapPerSec, time.Now().Unix())
}

// spendsBudget reports whether the current target's path names one of the
// configured cross-scope budgets.
func (c *call) spendsBudget() bool {
	doc := ledgerDoc(c.cfg)
	if doc == nil || doc.Budget == nil {
		return false
	}
	t := &c.lreq.Targets[c.lc.Target()]
	for i := range doc.Budget.Budgets {
		if b := &doc.Budget.Budgets[i]; pathNames(t.Path, b.Level, b.Subject) {
			return true
		}
	}
	return false
}

// respond writes the lifecycle's answer: the error contract, or the
// provider's answer held since the dispatch.
func (c *call) respond(e *apierr.Error) {
	if e == nil {
		for k, v := range c.upHeader {
			c.w.Header()[k] = v
		}
		c.setSluiceHeaders(c.w.Header())
		// With its length known the answer leaves in one write at the
		// Flush below (headers and body), not as a chunk followed by the
		// terminating chunk when the handler returns.
		if len(c.upBody) > 0 {
			c.w.Header().Set("Content-Length", strconv.Itoa(len(c.upBody)))
		}
		c.w.WriteHeader(c.upStatus)
		_, _ = c.w.Write(c.upBody)
		c.w.Flush()
		return
	}
	if c.w.wrote {
		return // a stream already started: nothing more can be said
	}
	httperr.Write(c.w, e, c.api == provider.APIMessages)
}

// lifecycleConfig is the part of the gateway config a lifecycle obeys.
func (c *call) lifecycleConfig() lifecycle.Config {
	return lifecycle.Config{AnswerTimeoutMs: c.cfg.LedgerTimeoutMs, LateGrantBoundMs: c.cfg.LateGrantBoundMs(c.adm.Class),
		Emergency: c.cfg.EmergencyCapPerSec > 0, Degraded: c.cfg.Degraded.On()}
}

// lifecycleRequest is what the lifecycle needs to know of the request.
func (c *call) lifecycleRequest() lifecycle.Request {
	req := lifecycle.Request{ID: c.reqID, Node: c.cfg.Node, Tenant: c.id.Tenant, KeyID: c.id.KeyID, Class: c.adm.Class,
		Priority: c.adm.Priority, StartMs: c.start.UnixMilli(), DeadlineMs: c.adm.DeadlineMs, FallbackAllowed: c.adm.Fallback,
		Estimate:  lifecycle.Usage{InputTokens: c.est.InputTokens, CachedInputTokens: c.est.CachedInputTokens, OutputTokens: c.est.OutputTokens},
		Streaming: c.est.Streaming, NeedsTools: len(c.parsed.Request.Tools) > 0, NeedsStructuredOutput: c.parsed.Request.ResponseFormat.Structured(),
		PromptFamily: promptFamily(c.r.Header, &c.parsed.Request), MaxOutputTokens: c.est.ArrivalOutputTokens,
		ClientRetryCount: c.adm.ClientRetryCount}
	for _, cd := range c.cands {
		req.Targets = append(req.Targets, lifecycle.Target{Scope: c.cfg.LedgerScope(cd.prov, c.id.KeyID), Profile: cd.Profile, Provider: cd.prov.Name,
			Kind: cd.prov.Kind, Model: cd.UpstreamModel, Path: path(c.id, cd.Profile, cd.prov),
			InputCostPerMTok: cd.InputCostPerMTok, OutputCostPerMTok: cd.OutputCostPerMTok,
			ContextTokens: cd.ContextTokens, Tools: cd.Tools, StructuredOutput: cd.StructuredOutput,
			Unserved: !c.parsed.CanServe(cd.prov.Kind), Estimate: c.targetEstimate(cd)})
	}
	return req
}

// stamp gives an event the lifecycle built its id (the lifecycle is pure:
// ids are random and time-ordered, so they are the shell's).
func stamp(ev *schemas.Event) *schemas.Event {
	ev.ID = eventid.NewID()
	return ev
}

func path(id *config.Identity, profile string, prov *config.Provider) []schemas.PathLevel {
	p := make([]schemas.PathLevel, 0, 6)
	// The ledger's level words, in its path order (ledger.LevelOrg …), not
	// copies of them: a renamed level cannot leave the gateway behind.
	for _, lv := range [...]schemas.PathLevel{
		{Level: ledger.LevelOrg, ID: id.Org}, {Level: ledger.LevelTenant, ID: id.Tenant}, {Level: ledger.LevelTeam, ID: id.Team},
		{Level: ledger.LevelKey, ID: id.KeyID}, {Level: ledger.LevelProfile, ID: profile}, {Level: ledger.LevelDeployment, ID: prov.Name},
	} {
		if lv.ID != "" {
			p = append(p, lv)
		}
	}
	return p
}

func withIdentity(e *apierr.Error, id *config.Identity) *apierr.Error {
	e.Sluice.Tenant, e.Sluice.KeyID = id.Tenant, id.KeyID
	return e
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

// readBody reads the request body under the body limit. A body that
// declares its Content-Length within the limit (and within
// upstreamSizeHintMax, so that a declared but unsent size cannot pin a
// large buffer) is read into one buffer of that size instead of
// io.ReadAll's growing chunks (issue 25: io.ReadAll makes four
// allocations for the process bench's 956-byte body, grown from 512 bytes
// and copied each time); a chunked body, or a larger one,
// takes io.ReadAll. A size that lies only costs growth: the limit is
// http.MaxBytesReader's either way, and so is the 413.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apierr.Error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	var b []byte
	var err error
	if n := r.ContentLength; n >= 0 && n <= limit && n <= upstreamSizeHintMax {
		b, err = readSized(body, n, math.MaxInt64)
	} else {
		b, err = io.ReadAll(body)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, apierr.New(http.StatusRequestEntityTooLarge, apierr.CodeBodyTooLarge, fmt.Sprintf("request body exceeds the %d-byte limit", limit))
		}
		return nil, apierr.New(http.StatusBadRequest, apierr.CodeInvalidRequest, "cannot read request body")
	}
	return b, nil
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
//
// The keys are canonical (TestSluiceHeadersCanonical), so the values are
// stored as Set would store them, but the three share one backing array:
// one allocation per answer instead of three.
func (c *call) setSluiceHeaders(h http.Header) {
	v := make([]string, 3)
	v[0], v[1], v[2] = c.reqID, strconv.FormatInt(c.lc.QueueMs(), 10), strconv.FormatInt(int64(c.lc.Attempts()), 10)
	h[HeaderRequestID], h[HeaderQueueMs], h[HeaderAttempts] = v[0:1:1], v[1:2:2], v[2:3:3]
}
