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

	"github.com/sluice-dev/sluice/admission/lifecycle"
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

// dispatch sends one granted attempt upstream and returns what came back
// for the lifecycle: an answer (held for Respond), a stream about to start
// (held for Relay), or no answer.
func (c *call) dispatch(cand candidate, attempt int32) lifecycle.Input {
	p := cand.prov
	done := func(u lifecycle.Upstream) lifecycle.Input {
		return lifecycle.Input{Kind: lifecycle.UpstreamDone, Attempt: attempt, Upstream: u}
	}
	ctx, cancel := context.WithTimeout(c.ctx, time.Duration(c.cfg.UpstreamTimeoutMs)*time.Millisecond)
	c.upCancel = cancel
	up, forcedUsage, err := c.upstreamRequest(ctx, cand)
	if err != nil {
		return done(lifecycle.Upstream{BuildError: err.Error()})
	}
	sent := time.Now()
	resp, err := c.s.upstream.Do(up)
	if err != nil {
		c.s.m.attempts.WithLabelValues(p.Name, "error").Inc()
		return done(lifecycle.Upstream{Failure: c.cancelReason()})
	}
	c.s.m.attempts.WithLabelValues(p.Name, strconv.Itoa(resp.StatusCode)).Inc()
	now := time.Now()
	obs := provider.ParseRateLimitHeaders(p.Kind, resp.Header, now)
	if resp.StatusCode >= 400 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, upstreamErrorMax))
		resp.Body.Close()
		rej, _ := provider.ParseRejection(p.Kind, resp.StatusCode, resp.Header, body, now)
		return done(lifecycle.Upstream{Status: resp.StatusCode, Rejection: rej, Observations: obs, TotalMs: time.Since(sent).Milliseconds()})
	}
	if c.req.Stream {
		c.upResp, c.upCand, c.upSent, c.upForced = resp, cand, sent, forcedUsage
		return lifecycle.Input{Kind: lifecycle.StreamStarted, Attempt: attempt, Upstream: lifecycle.Upstream{Status: resp.StatusCode, Observations: obs}}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, upstreamBodyMax))
	firstByteMs := time.Since(sent).Milliseconds()
	if err != nil {
		return done(lifecycle.Upstream{Failure: c.cancelReason(), Observations: obs})
	}
	usage, _ := provider.ParseUsage(p.Kind, body)
	if p.Kind == schemas.ProviderGemini {
		if b, err := geminiToOpenAI(body, c.req.Model, c.reqID); err == nil {
			body = b
			resp.Header.Set("Content-Type", "application/json")
		}
	}
	c.upHeader = http.Header{}
	for _, h := range []string{"Content-Type", "x-request-id", "request-id", "openai-processing-ms"} {
		if v := resp.Header.Get(h); v != "" {
			c.upHeader.Set(h, v)
		}
	}
	c.upStatus, c.upBody = resp.StatusCode, body
	return done(lifecycle.Upstream{Status: resp.StatusCode, Observations: obs, FirstByteMs: firstByteMs, TotalMs: time.Since(sent).Milliseconds(),
		Usage: lifecycle.Usage{InputTokens: usage.InputTokens, CachedInputTokens: usage.CachedInputTokens, OutputTokens: usage.OutputTokens}})
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
