package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/provider"
	"github.com/sluice-dev/sluice/schemas"
)

// Bounds on what the gateway reads from a provider.
const (
	upstreamBodyMax  = 64 << 20 // a non-streaming response
	upstreamErrorMax = 1 << 20  // an error body
)

// upstreamRequest builds the provider request for one attempt: the
// provider's URL and authentication, and the client's body with only the
// model replaced (and, for OpenAI-style streams, usage reporting forced on
// so that the reconcile is exact). Gemini receives a translated body.
func (c *call) upstreamRequest(ctx context.Context, cand candidate) (*http.Request, bool, error) {
	p := cand.prov
	base := strings.TrimRight(p.BaseURL, "/")
	body := c.body
	forcedUsage := false
	var u string
	switch {
	case p.Kind == schemas.ProviderGemini:
		b, err := geminiRequest(c.req, body)
		if err != nil {
			return nil, false, err
		}
		body = b
		method := ":generateContent"
		if c.req.Stream {
			method = ":streamGenerateContent?alt=sse"
		}
		u = base + "/models/" + url.PathEscape(cand.UpstreamModel) + method
	case p.Kind == schemas.ProviderAnthropic:
		u = base + "/messages"
	case p.Kind == schemas.ProviderAzure:
		op := "/chat/completions"
		if c.api == apiEmbeddings {
			op = "/embeddings"
		}
		u = base + "/openai/deployments/" + url.PathEscape(p.Deployment) + op + "?api-version=" + url.QueryEscape(p.APIVersion)
	default:
		op := "/chat/completions"
		if c.api == apiEmbeddings {
			op = "/embeddings"
		}
		u = base + op
	}
	if p.Kind != schemas.ProviderGemini {
		set := map[string]any{}
		if cand.UpstreamModel != c.req.Model {
			set["model"] = cand.UpstreamModel
		}
		if c.api == apiChat && c.req.Stream && !c.req.IncludeUsage {
			forcedUsage = true
			set["stream_options"] = streamOptionsWithUsage(body)
		}
		if len(set) > 0 {
			b, err := setFields(body, set)
			if err != nil {
				return nil, false, err
			}
			body = b
		}
	}
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		// The URL holds no credential (keys travel in headers), but name
		// the provider rather than echo it anyway.
		return nil, false, fmt.Errorf("build request for provider %s: invalid base_url", p.Name)
	}
	up.Header.Set("Content-Type", "application/json")
	if c.req.Stream {
		up.Header.Set("Accept", "text/event-stream")
	}
	key := p.APIKey()
	switch p.Kind {
	case schemas.ProviderAzure:
		if key != "" {
			up.Header.Set("api-key", key)
		}
	case schemas.ProviderAnthropic:
		if key != "" {
			up.Header.Set("x-api-key", key)
		}
		up.Header.Set("anthropic-version", p.APIVersion)
		if v := c.r.Header.Get("anthropic-beta"); v != "" {
			up.Header.Set("anthropic-beta", v)
		}
	case schemas.ProviderGemini:
		if key != "" {
			up.Header.Set("x-goog-api-key", key)
		}
	default:
		if key != "" {
			up.Header.Set("Authorization", "Bearer "+key)
		}
	}
	return up, forcedUsage, nil
}

// setFields replaces top-level fields of a JSON object. The parsers already
// proved body is an object.
func setFields(body []byte, set map[string]any) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("rewrite request body: %w", err)
	}
	for k, v := range set {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("rewrite request body field %s: %w", k, err)
		}
		m[k] = b
	}
	return json.Marshal(m)
}

// streamOptionsWithUsage returns the request's stream_options with
// include_usage set, keeping any other option the client gave.
func streamOptionsWithUsage(body []byte) map[string]json.RawMessage {
	var top struct {
		StreamOptions map[string]json.RawMessage `json:"stream_options"`
	}
	_ = json.Unmarshal(body, &top)
	if top.StreamOptions == nil {
		top.StreamOptions = map[string]json.RawMessage{}
	}
	top.StreamOptions["include_usage"] = json.RawMessage("true")
	return top.StreamOptions
}

// dispatch sends one granted attempt upstream and relays the answer.
func (c *call) dispatch(cand candidate, ev *schemas.Event, d schemas.Decision) attemptResult {
	p := cand.prov
	dis := c.envelope(schemas.TypeDispatched, ev, ev.Attempt)
	dis.Dispatched = &schemas.Dispatched{Provider: p.Kind, Deployment: p.Name, Model: cand.UpstreamModel, QueueMs: c.queueMs, Fallback: cand.fallback}
	c.s.background(dis, false)

	ctx, cancel := context.WithTimeout(c.ctx, time.Duration(c.cfg.UpstreamTimeoutMs)*time.Millisecond)
	defer cancel()
	up, forcedUsage, err := c.upstreamRequest(ctx, cand)
	if err != nil {
		c.release(ev, schemas.ReasonError, 0, 0)
		c.fail(apierr.New(http.StatusInternalServerError, apierr.CodeInternal, err.Error()), ev, schemas.GDAdmitted)
		return attemptResult{done: true}
	}
	sent := time.Now()
	resp, err := c.s.upstream.Do(up)
	if err != nil {
		c.s.m.attempts.WithLabelValues(p.Name, "error").Inc()
		c.release(ev, c.cancelReason(), 0, 0)
		c.failTransport(ev, p)
		return attemptResult{done: true}
	}
	defer resp.Body.Close()
	c.s.m.attempts.WithLabelValues(p.Name, strconv.Itoa(resp.StatusCode)).Inc()
	now := time.Now()
	if obs := provider.ParseRateLimitHeaders(provider.Kind(p.Kind), resp.Header, now); len(obs) > 0 {
		po := c.envelope(schemas.TypeProviderObserved, ev, ev.Attempt)
		po.ProviderObserved = &schemas.ProviderObserved{Deployment: p.Name, Observations: obs}
		c.s.background(po, true)
	}
	if resp.StatusCode >= 400 {
		return c.upstreamError(cand, ev, resp, now)
	}
	if c.req.Stream {
		c.stream(cand, ev, resp, sent, forcedUsage)
		return attemptResult{done: true}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, upstreamBodyMax))
	firstByteMs := time.Since(sent).Milliseconds()
	if err != nil {
		c.release(ev, c.cancelReason(), 0, 0)
		c.failTransport(ev, p)
		return attemptResult{done: true}
	}
	usage, _ := provider.ParseUsage(provider.Kind(p.Kind), body)
	if p.Kind == schemas.ProviderGemini {
		if b, err := geminiToOpenAI(body, c.req.Model, c.reqID); err == nil {
			body = b
			resp.Header.Set("Content-Type", "application/json")
		}
	}
	for _, h := range []string{"Content-Type", "x-request-id", "request-id", "openai-processing-ms"} {
		if v := resp.Header.Get(h); v != "" {
			c.w.Header().Set(h, v)
		}
	}
	c.setSluiceHeaders(c.w.Header())
	c.w.WriteHeader(resp.StatusCode)
	_, _ = c.w.Write(body)
	c.w.Flush()
	c.reconcile(cand, ev, usage, int32(resp.StatusCode), firstByteMs, sent, false, false)
	c.outcome(ev, schemas.OutcomeSuccess, int32(resp.StatusCode), "", c.gatewayDecision(d), usage.InputTokens, usage.OutputTokens)
	c.s.m.requests.WithLabelValues("success").Inc()
	return attemptResult{done: true}
}

// gatewayDecision says how the successful request got through.
func (c *call) gatewayDecision(d schemas.Decision) schemas.GatewayDecision {
	if d.GatewayDecision != "" {
		return d.GatewayDecision
	}
	return schemas.GDAdmitted
}

// reconcile reports the attempt's actual usage. Input the provider never
// reported (a cut stream) is taken from the estimate: the prompt was sent.
func (c *call) reconcile(cand candidate, ev *schemas.Event, u provider.Usage, status int32, firstByteMs int64, sent time.Time, streaming, partial bool) {
	in := u.InputTokens
	if in == 0 && partial {
		in = c.est.InputTokens
	}
	rec := c.envelope(schemas.TypeReconciled, ev, ev.Attempt)
	rec.Reconciled = &schemas.Reconciled{
		InputTokens: in, CachedInputTokens: u.CachedInputTokens, OutputTokens: u.OutputTokens,
		SpendMicros: cand.SpendMicros(in, u.OutputTokens), HTTPStatus: status,
		FirstByteMs: firstByteMs, TotalMs: time.Since(sent).Milliseconds(), Streaming: streaming, Partial: partial,
		EstimatedInputTokens: c.est.InputTokens, EstimatedOutputTokens: c.est.OutputTokens,
	}
	c.s.report(rec)
}

// cancelReason names why an attempt ended without an answer.
func (c *call) cancelReason() schemas.Reason {
	switch {
	case c.r.Context().Err() != nil:
		return schemas.ReasonClientDisconnect
	case c.ctx.Err() != nil:
		return schemas.ReasonDeadline
	}
	return schemas.ReasonError
}

// failTransport answers a transport failure (grant already released).
func (c *call) failTransport(ev *schemas.Event, p *config.Provider) {
	switch c.cancelReason() {
	case schemas.ReasonClientDisconnect:
		c.fail(apierr.New(499, apierr.CodeCancelled, "client closed the request"), ev, schemas.GDAdmitted)
	case schemas.ReasonDeadline:
		c.fail(apierr.New(http.StatusGatewayTimeout, apierr.CodeDeadlineExceeded, fmt.Sprintf("the request's %d ms deadline passed while the provider was answering", c.adm.DeadlineMs)), ev, schemas.GDAdmitted)
	default:
		// Never echo the transport error: a proxy URL in it may carry a
		// credential. Name the provider instead.
		e := apierr.New(http.StatusBadGateway, apierr.CodeUpstreamError, "provider "+p.Name+" unreachable or its response was interrupted")
		e.Sluice.Provider = p.Name
		c.fail(e, ev, schemas.GDAdmitted)
	}
}

// upstreamError handles a provider status ≥ 400 before any byte reached
// the client. Capacity refusals (429, 5xx) become ProviderRejected, which
// settles the grant in the ledger and cools the scope; the caller then asks
// the ledger about a retry. Other errors are final: the grant is reconciled
// with no usage and the client gets the error contract with the provider's
// scrubbed message (never its raw body, which may echo a credential).
func (c *call) upstreamError(cand candidate, ev *schemas.Event, resp *http.Response, now time.Time) attemptResult {
	p := cand.prov
	body, _ := io.ReadAll(io.LimitReader(resp.Body, upstreamErrorMax))
	rej, _ := provider.ParseRejection(provider.Kind(p.Kind), resp.StatusCode, resp.Header, body, now)
	rej.Deployment = p.Name
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		pr := c.envelope(schemas.TypeProviderRejected, ev, ev.Attempt)
		pr.ProviderRejected = &rej
		c.s.report(pr)
		return attemptResult{rej: rej, retryClass: rej.Kind.RetryClass()}
	}
	c.reconcile(cand, ev, provider.Usage{}, int32(resp.StatusCode), 0, now, c.req.Stream, false)
	status, code := http.StatusBadGateway, apierr.CodeUpstreamError
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		// The caller's request was at fault: keep the provider's status.
		// A 401/403 is the gateway's own credential: the caller cannot fix it.
		status, code = resp.StatusCode, apierr.CodeUpstreamRequestError
	}
	msg := fmt.Sprintf("provider %s answered HTTP %d", p.Name, resp.StatusCode)
	if rej.Message != "" {
		msg += ": " + rej.Message
	}
	e := apierr.New(status, code, msg)
	e.Sluice.Provider = p.Name
	c.fail(e, ev, schemas.GDAdmitted)
	return attemptResult{done: true}
}

// report sends an event the ledger must see (reconcile, release, provider
// rejection). It is synchronous so that the caller's next request sees the
// capacity returned, and uses a fresh context: the request's is often done.
func (s *Server) report(ev *schemas.Event) {
	s.rc.Send(ev, func(err error) {
		if err != nil {
			s.log.Error("report to ledger failed; the hold will expire by TTL", "type", ev.Type, "request_id", ev.RequestID, "err", err)
		}
	})
}

// background sends an event off the request path: analytics events
// (Dispatched, Outcome) to sluice.telemetry, provider observations (toLedger)
// to sluice.requests. It does not wait for the broker; the producer's buffer
// gives backpressure when Kafka is slow, and a failure is logged and counted.
func (s *Server) background(ev *schemas.Event, toLedger bool) {
	done := func(err error) {
		if err != nil {
			s.m.dropped.Inc()
			s.log.Warn("event lost", "type", ev.Type, "request_id", ev.RequestID, "err", err)
		}
	}
	if toLedger {
		s.rc.Send(ev, done)
	} else {
		s.rc.SendTelemetry(ev, done)
	}
}
