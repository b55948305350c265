package schemas

import "strconv"

// A hand-written encoder for the events of the request path, the mirror of
// fastdecode.go: encoding/json spent about 6 µs reflecting over each event
// the gateway produces (five per request), 8 % of a busy gateway's CPU. It
// writes exactly the bytes json.Marshal writes — the same field order, the
// same omitempty rules — for the payloads it knows and strings that need no
// escaping (printable ASCII without `"`, `\`, `<`, `>`, `&`). On anything
// else it gives up and Append falls back to encoding/json, so every event
// encodes as before: TestFastEncodeCoversEveryField fills every field of
// every payload it takes and compares, so a field added to a payload
// without a line here fails it, and FuzzFastEncodeMatchesJSON compares
// random events.

// fastEnc appends one encoded event to b; ok turns false when a string
// needs escaping or a payload has no fast form.
type fastEnc struct {
	b  []byte
	ok bool
}

// appendFast appends e's encoding and reports whether it could; when it
// could not, dst's contents past its length are garbage.
func appendFast(dst []byte, e *Event) ([]byte, bool) {
	w := fastEnc{b: dst, ok: true}
	start := len(dst)
	w.b = append(w.b, '{')
	w.int("v", int64(e.V))
	w.str("type", string(e.Type))
	w.str("id", e.ID)
	w.int("produced_at_ms", e.ProducedAtMs)
	w.strOmit("request_id", e.RequestID)
	w.intOmit("attempt", int64(e.Attempt))
	w.strOmit("node", e.Node)
	w.strOmit("scope", e.Scope)
	w.strOmit("tenant", e.Tenant)
	w.strOmit("key_id", e.KeyID)
	w.strOmit("route", e.Route)
	w.strOmit("class", e.Class)
	// Validate has checked that exactly the payload of e.Type is set.
	switch {
	case e.ReserveRequested != nil:
		w.key("reserve_requested")
		w.reserveRequested(e.ReserveRequested)
	case e.Decision != nil:
		w.key("decision")
		w.decision(e.Decision)
	case e.Dispatched != nil:
		w.key("dispatched")
		w.dispatched(e.Dispatched)
	case e.Reconciled != nil:
		w.key("reconciled")
		w.reconciled(e.Reconciled)
	case e.ProviderRejected != nil:
		w.key("provider_rejected")
		w.providerRejected(e.ProviderRejected)
	case e.ProviderObserved != nil:
		w.key("provider_observed")
		w.providerObserved(e.ProviderObserved)
	case e.RetryRequested != nil:
		w.key("retry_requested")
		w.retryRequested(e.RetryRequested)
	case e.Released != nil:
		w.key("released")
		w.released(e.Released)
	case e.Outcome != nil:
		w.key("outcome")
		w.outcome(e.Outcome)
	case e.Tick != nil:
		w.key("tick")
		w.b = append(w.b, '{')
		w.strOmit("reason", e.Tick.Reason)
		w.b = append(w.b, '}')
	case e.Heartbeat != nil:
		w.key("heartbeat")
		w.b = append(w.b, '{', '}')
	default: // ConfigChanged, Snapshot: rare, and byte slices
		return dst[:start], false
	}
	w.b = append(w.b, '}')
	if !w.ok {
		return dst[:start], false
	}
	return w.b, true
}

// key writes an object key, after a comma unless it is the object's first.
func (w *fastEnc) key(k string) {
	if c := w.b[len(w.b)-1]; c != '{' && c != '[' {
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

// plain reports whether json.Marshal writes s as its bytes between quotes.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

func (w *fastEnc) str(k, s string) {
	w.key(k)
	w.value(s)
}

func (w *fastEnc) value(s string) {
	if !plain(s) {
		w.ok = false
		return
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *fastEnc) strOmit(k, s string) {
	if s != "" {
		w.str(k, s)
	}
}

func (w *fastEnc) int(k string, n int64) {
	w.key(k)
	w.b = strconv.AppendInt(w.b, n, 10)
}

func (w *fastEnc) intOmit(k string, n int64) {
	if n != 0 {
		w.int(k, n)
	}
}

func (w *fastEnc) boolOmit(k string, v bool) {
	if v {
		w.key(k)
		w.b = append(w.b, "true"...)
	}
}

func (w *fastEnc) reserveRequested(r *ReserveRequested) {
	w.b = append(w.b, '{')
	w.key("path")
	if r.Path == nil {
		w.b = append(w.b, "null"...)
	} else {
		w.b = append(w.b, '[')
		for i := range r.Path {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.b = append(w.b, '{')
			w.str("level", r.Path[i].Level)
			w.str("id", r.Path[i].ID)
			w.b = append(w.b, '}')
		}
		w.b = append(w.b, ']')
	}
	w.int("input_tokens", r.InputTokens)
	w.int("cached_input_tokens", r.CachedInputTokens)
	w.int("output_tokens", r.OutputTokens)
	w.int("spend_micros", r.SpendMicros)
	w.intOmit("max_output_tokens", r.MaxOutputTokens)
	w.boolOmit("streaming", r.Streaming)
	w.intOmit("priority", int64(r.Priority))
	w.intOmit("max_wait_ms", r.MaxWaitMs)
	w.intOmit("deadline_ms", r.DeadlineMs)
	w.intOmit("max_attempts", int64(r.MaxAttempts))
	w.boolOmit("fallback_allowed", r.FallbackAllowed)
	w.strOmit("idempotency_key", r.IdempotencyKey)
	w.boolOmit("emergency_admitted", r.EmergencyAdmitted)
	w.boolOmit("degraded", r.Degraded)
	w.strOmit("prompt_family", r.PromptFamily)
	w.intOmit("client_retry_count", int64(r.ClientRetryCount))
	w.intOmit("service_prior_ms", r.ServicePriorMs)
	w.b = append(w.b, '}')
}

func (w *fastEnc) decision(d *Decision) {
	w.b = append(w.b, '{')
	w.str("status", string(d.Status))
	w.strOmit("reason", string(d.Reason))
	w.strOmit("limit_path", d.LimitPath)
	w.strOmit("limit_dimension", string(d.LimitDimension))
	w.intOmit("needed", d.Needed)
	w.intOmit("available", d.Available)
	w.intOmit("retry_after_ms", d.RetryAfterMs)
	w.boolOmit("borrowed", d.Borrowed)
	w.str("gateway_decision", string(d.GatewayDecision))
	w.boolOmit("fallback_allowed", d.FallbackAllowed)
	w.strOmit("retry_class", string(d.RetryClass))
	w.int("input_partition", int64(d.InputPartition))
	w.int("input_offset", d.InputOffset)
	w.int("log_time_ms", d.LogTimeMs)
	w.intOmit("hold_ttl_ms", d.HoldTTLMs)
	w.intOmit("send_at_ms", d.SendAtMs)
	if s := d.Shadow; s != nil {
		w.key("shadow")
		w.b = append(w.b, '{')
		w.boolOmit("limited", s.Limited)
		w.strOmit("reason", string(s.Reason))
		w.strOmit("limit_path", s.LimitPath)
		w.strOmit("limit_dimension", string(s.LimitDimension))
		w.intOmit("needed", s.Needed)
		w.intOmit("available", s.Available)
		w.int("buckets", int64(s.Buckets))
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, '}')
}

func (w *fastEnc) dispatched(d *Dispatched) {
	w.b = append(w.b, '{')
	w.str("provider", string(d.Provider))
	w.str("deployment", d.Deployment)
	w.str("model", d.Model)
	w.int("queue_ms", d.QueueMs)
	w.boolOmit("fallback", d.Fallback)
	w.b = append(w.b, '}')
}

func (w *fastEnc) reconciled(r *Reconciled) {
	w.b = append(w.b, '{')
	w.int("input_tokens", r.InputTokens)
	w.int("cached_input_tokens", r.CachedInputTokens)
	w.int("output_tokens", r.OutputTokens)
	w.int("spend_micros", r.SpendMicros)
	w.int("http_status", int64(r.HTTPStatus))
	w.int("first_byte_ms", r.FirstByteMs)
	w.int("total_ms", r.TotalMs)
	w.boolOmit("streaming", r.Streaming)
	w.boolOmit("partial", r.Partial)
	w.int("estimated_input_tokens", r.EstimatedInputTokens)
	w.int("estimated_output_tokens", r.EstimatedOutputTokens)
	w.b = append(w.b, '}')
}

func (w *fastEnc) providerRejected(p *ProviderRejected) {
	w.b = append(w.b, '{')
	w.int("http_status", int64(p.HTTPStatus))
	w.str("kind", string(p.Kind))
	w.strOmit("limiter", string(p.Limiter))
	w.intOmit("retry_after_ms", p.RetryAfterMs)
	w.strOmit("provider_request_id", p.ProviderRequestID)
	w.strOmit("deployment", p.Deployment)
	w.strOmit("message", p.Message)
	w.b = append(w.b, '}')
}

func (w *fastEnc) providerObserved(p *ProviderObserved) {
	w.b = append(w.b, '{')
	w.strOmit("deployment", p.Deployment)
	w.key("observations")
	if p.Observations == nil {
		w.b = append(w.b, "null"...)
	} else {
		w.b = append(w.b, '[')
		for i := range p.Observations {
			o := &p.Observations[i]
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.b = append(w.b, '{')
			w.str("dimension", string(o.Dimension))
			w.intOmit("limit", o.Limit)
			w.int("remaining", o.Remaining)
			w.intOmit("reset_ms", o.ResetMs)
			w.b = append(w.b, '}')
		}
		w.b = append(w.b, ']')
	}
	w.b = append(w.b, '}')
}

func (w *fastEnc) retryRequested(r *RetryRequested) {
	w.b = append(w.b, '{')
	w.int("previous_attempt", int64(r.PreviousAttempt))
	w.str("reason", string(r.Reason))
	w.intOmit("retry_after_ms", r.RetryAfterMs)
	w.b = append(w.b, '}')
}

func (w *fastEnc) released(r *Released) {
	w.b = append(w.b, '{')
	w.str("reason", string(r.Reason))
	w.intOmit("input_tokens", r.InputTokens)
	w.intOmit("output_tokens", r.OutputTokens)
	w.b = append(w.b, '}')
}

func (w *fastEnc) outcome(o *Outcome) {
	w.b = append(w.b, '{')
	w.str("status", string(o.Status))
	w.int("http_status", int64(o.HTTPStatus))
	w.int("attempts", int64(o.Attempts))
	w.int("queue_ms", o.QueueMs)
	w.int("total_ms", o.TotalMs)
	w.strOmit("error_code", o.ErrorCode)
	w.strOmit("gateway_decision", string(o.GatewayDecision))
	w.intOmit("input_tokens", o.InputTokens)
	w.intOmit("output_tokens", o.OutputTokens)
	w.b = append(w.b, '}')
}
