package gateway

import (
	"context"
	"io"
	"net/http"
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

// answerHeaders are the provider headers a non-streaming answer passes on
// to the client, canonical once here: Header.Get and Set canonicalise the
// name on every call, allocating for names written in lower case.
var answerHeaders = []string{"Content-Type", http.CanonicalHeaderKey("x-request-id"), http.CanonicalHeaderKey("request-id"),
	http.CanonicalHeaderKey("openai-processing-ms")}

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
	up, ex, err := provider.NewRequest(ctx, p, provider.Attempt{Parsed: &c.parsed,
		UpstreamModel: cand.UpstreamModel, AnthropicBeta: c.r.Header.Get("anthropic-beta"), DefaultMaxTokens: c.route.DefaultMaxOutputTokens})
	if err != nil {
		return done(lifecycle.Upstream{BuildError: err.Error()})
	}
	sent := time.Now()
	resp, err := c.s.upstream.Do(up)
	if err != nil {
		c.s.m.byKey.attempts.get(attemptKey{provider: p.Name}).Inc()
		return done(lifecycle.Upstream{Failure: c.cancelReason()})
	}
	c.s.m.byKey.attempts.get(attemptKey{provider: p.Name, status: resp.StatusCode}).Inc()
	now := time.Now()
	obs := provider.ParseRateLimitHeaders(p.Kind, resp.Header, now)
	if resp.StatusCode >= 400 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, upstreamErrorMax))
		resp.Body.Close()
		rej, _ := provider.ParseRejection(p.Kind, resp.StatusCode, resp.Header, body, now, provider.SecretsOf(c.cfg, clientKey(c.r)))
		return done(lifecycle.Upstream{Status: resp.StatusCode, Rejection: rej, Observations: obs, TotalMs: time.Since(sent).Milliseconds()})
	}
	if c.parsed.Request.Stream {
		c.upResp, c.upCand, c.upSent, c.upEx = resp, cand, sent, ex
		return lifecycle.Input{Kind: lifecycle.StreamStarted, Attempt: attempt, Upstream: lifecycle.Upstream{Status: resp.StatusCode, Observations: obs}}
	}
	defer resp.Body.Close()
	body, err := readUpstream(resp.Body, resp.ContentLength, upstreamBodyMax)
	firstByteMs := time.Since(sent).Milliseconds()
	if err != nil {
		return done(lifecycle.Upstream{Failure: c.cancelReason(), Observations: obs})
	}
	ans := ex.Answer(body, c.parsed.Request.Model, c.reqID)
	if ans.Translated {
		resp.Header.Set("Content-Type", "application/json")
	}
	c.upHeader = make(http.Header, len(answerHeaders)+4) // and respond's own
	for _, h := range answerHeaders {
		if v := resp.Header[h]; len(v) > 0 && v[0] != "" {
			c.upHeader[h] = v[:1:1] // Get's value, as Set would store it
		}
	}
	c.upStatus, c.upBody = resp.StatusCode, ans.Body
	return done(lifecycle.Upstream{Status: resp.StatusCode, Observations: obs, FirstByteMs: firstByteMs, TotalMs: time.Since(sent).Milliseconds(),
		Usage: lifecycle.Usage{InputTokens: ans.Usage.InputTokens, CachedInputTokens: ans.Usage.CachedInputTokens, OutputTokens: ans.Usage.OutputTokens}})
}

// readUpstream is io.ReadAll(io.LimitReader(r, limit)) into one buffer
// sized from the answer's Content-Length (size, -1 when unknown) when it
// is small, so that a typical answer is read with one allocation instead
// of ReadAll's growing chunks and the LimitReader. A size that lies only
// costs growth; the limit is the limit either way.
func readUpstream(r io.Reader, size, limit int64) ([]byte, error) {
	if size < 0 || size > upstreamSizeHintMax {
		return io.ReadAll(io.LimitReader(r, limit))
	}
	return readSized(r, size, limit)
}

// readSized reads r to EOF, or to limit bytes, into a buffer of size
// (+1 for the read that sees EOF), growing it only when r holds more.
func readSized(r io.Reader, size, limit int64) ([]byte, error) {
	b := make([]byte, 0, min(size, limit)+1) // +1: room for the read that sees EOF
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		room := b[len(b):cap(b)]
		if left := limit - int64(len(b)); int64(len(room)) > left {
			room = room[:left]
		}
		if len(room) == 0 {
			return b, nil
		}
		n, err := r.Read(room)
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// upstreamSizeHintMax bounds the buffer readUpstream sizes from an
// answer's Content-Length before any byte has arrived.
const upstreamSizeHintMax = 1 << 20

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
