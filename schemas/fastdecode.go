package schemas

// A hand-written decoder for the events Sluice writes itself, which is most
// of what `sluice whatif`, replay and catch-up read: encoding/json spends
// most of their time validating, reflecting and allocating. It takes only
// the canonical form — keys spelled exactly as the schema names them, each
// at most once; plain ASCII strings without escapes; integers without
// fraction or exponent that fit their field; no nulls — and only the event
// types on the request path. On anything else it gives up and Decode falls
// back to encoding/json, so every event decodes exactly as before (a
// differential fuzz target, FuzzFastDecodeMatchesJSON, checks it).

// fastDec is a cursor over one encoded event.
type fastDec struct {
	b []byte
	i int
}

// decodeFast decodes b into e (which must be zero) and reports whether it
// could; when it could not, e holds garbage and the caller starts over.
func decodeFast(b []byte, e *Event) bool {
	d := fastDec{b: b}
	if !d.envelope(e) {
		return false
	}
	d.ws()
	return d.i == len(d.b)
}

func (d *fastDec) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// lit consumes the byte c (after whitespace), if it is next.
func (d *fastDec) lit(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// raw returns the contents of a string that is plain ASCII without escapes
// or control characters: its bytes are then exactly the decoded string.
func (d *fastDec) raw() ([]byte, bool) {
	d.ws()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			s := d.b[d.i+1 : j]
			d.i = j + 1
			return s, true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

func (d *fastDec) str(dst *string) bool {
	s, ok := d.raw()
	*dst = string(s)
	return ok
}

// int64 reads an integer of at most 18 digits (so it cannot overflow) in
// JSON's grammar, and refuses a fraction or an exponent.
func (d *fastDec) int64(dst *int64) bool {
	d.ws()
	j, neg := d.i, false
	if j < len(d.b) && d.b[j] == '-' {
		neg = true
		j++
	}
	start := j
	var n int64
	for ; j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9'; j++ {
		if j-start == 18 {
			return false
		}
		n = n*10 + int64(d.b[j]-'0')
	}
	if j == start || (d.b[start] == '0' && j-start > 1) {
		return false
	}
	if j < len(d.b) && (d.b[j] == '.' || d.b[j] == 'e' || d.b[j] == 'E') {
		return false
	}
	d.i = j
	if neg {
		n = -n
	}
	*dst = n
	return true
}

func (d *fastDec) int32(dst *int32) bool {
	var n int64
	if !d.int64(&n) || n < -1<<31 || n > 1<<31-1 {
		return false
	}
	*dst = int32(n)
	return true
}

func (d *fastDec) bool(dst *bool) bool {
	d.ws()
	switch {
	case len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "true":
		*dst = true
		d.i += 4
	case len(d.b)-d.i >= 5 && string(d.b[d.i:d.i+5]) == "false":
		*dst = false
		d.i += 5
	default:
		return false
	}
	return true
}

// object walks the members of an object, calling field for each with its
// index in names (-1 when unknown, which gives up); a key seen twice gives
// up too (encoding/json would merge the two values).
func (d *fastDec) object(names []string, field func(i int) bool) bool {
	if !d.lit('{') {
		return false
	}
	if d.lit('}') {
		return true
	}
	var seen uint64
	for {
		k, ok := d.raw()
		if !ok || !d.lit(':') {
			return false
		}
		i := indexKey(names, k)
		if i < 0 || seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		if !field(i) {
			return false
		}
		if d.lit(',') {
			continue
		}
		return d.lit('}')
	}
}

func indexKey(names []string, k []byte) int {
	for i, n := range names {
		if n == string(k) {
			return i
		}
	}
	return -1
}

var envelopeKeys = []string{"v", "type", "id", "produced_at_ms", "request_id", "attempt", "node", "scope", "tenant", "key_id",
	"route", "class", "reserve_requested", "decision", "dispatched", "reconciled", "provider_rejected", "released", "outcome",
	"tick", "heartbeat", "retry_requested"}

func (d *fastDec) envelope(e *Event) bool {
	return d.object(envelopeKeys, func(i int) bool {
		switch i {
		case 0:
			var v int64
			if !d.int64(&v) || v != int64(int(v)) {
				return false
			}
			e.V = int(v)
			return true
		case 1:
			s, ok := d.raw()
			e.Type = typeOf(s)
			return ok
		case 2:
			return d.str(&e.ID)
		case 3:
			return d.int64(&e.ProducedAtMs)
		case 4:
			return d.str(&e.RequestID)
		case 5:
			return d.int32(&e.Attempt)
		case 6:
			return d.str(&e.Node)
		case 7:
			return d.str(&e.Scope)
		case 8:
			return d.str(&e.Tenant)
		case 9:
			return d.str(&e.KeyID)
		case 10:
			return d.str(&e.Route)
		case 11:
			return d.str(&e.Class)
		case 12:
			e.ReserveRequested = new(ReserveRequested)
			return d.reserve(e.ReserveRequested)
		case 13:
			e.Decision = new(Decision)
			return d.decision(e.Decision)
		case 14:
			e.Dispatched = new(Dispatched)
			return d.dispatched(e.Dispatched)
		case 15:
			e.Reconciled = new(Reconciled)
			return d.reconciled(e.Reconciled)
		case 16:
			e.ProviderRejected = new(ProviderRejected)
			return d.providerRejected(e.ProviderRejected)
		case 17:
			e.Released = new(Released)
			return d.released(e.Released)
		case 18:
			e.Outcome = new(Outcome)
			return d.outcome(e.Outcome)
		case 19:
			e.Tick = new(Tick)
			return d.object([]string{"reason"}, func(int) bool { return d.str(&e.Tick.Reason) })
		case 20:
			e.Heartbeat = new(Heartbeat)
			return d.object(nil, nil)
		case 21:
			e.RetryRequested = new(RetryRequested)
			return d.retry(e.RetryRequested)
		}
		return false
	})
}

// typeOf returns the Type spelled s, without allocating for known ones.
func typeOf(s []byte) Type {
	for _, t := range Types {
		if string(t) == string(s) {
			return t
		}
	}
	return Type(s)
}

func strAs[T ~string](d *fastDec, dst *T) bool {
	s, ok := d.raw()
	*dst = T(s)
	return ok
}

var reserveKeys = []string{"path", "input_tokens", "cached_input_tokens", "output_tokens", "spend_micros", "max_output_tokens",
	"streaming", "priority", "max_wait_ms", "deadline_ms", "max_attempts", "fallback_allowed", "idempotency_key",
	"emergency_admitted", "prompt_family", "client_retry_count", "degraded", "service_prior_ms"}

var pathLevelKeys = []string{"level", "id"}

func (d *fastDec) reserve(r *ReserveRequested) bool {
	return d.object(reserveKeys, func(i int) bool {
		switch i {
		case 0:
			return d.path(&r.Path)
		case 1:
			return d.int64(&r.InputTokens)
		case 2:
			return d.int64(&r.CachedInputTokens)
		case 3:
			return d.int64(&r.OutputTokens)
		case 4:
			return d.int64(&r.SpendMicros)
		case 5:
			return d.int64(&r.MaxOutputTokens)
		case 6:
			return d.bool(&r.Streaming)
		case 7:
			return d.int32(&r.Priority)
		case 8:
			return d.int64(&r.MaxWaitMs)
		case 9:
			return d.int64(&r.DeadlineMs)
		case 10:
			return d.int32(&r.MaxAttempts)
		case 11:
			return d.bool(&r.FallbackAllowed)
		case 12:
			return d.str(&r.IdempotencyKey)
		case 13:
			return d.bool(&r.EmergencyAdmitted)
		case 14:
			return d.str(&r.PromptFamily)
		case 15:
			return d.int32(&r.ClientRetryCount)
		case 16:
			return d.bool(&r.Degraded)
		case 17:
			return d.int64(&r.ServicePriorMs)
		}
		return false
	})
}

// path reads an array of path levels; [] is an empty, non-nil slice, as
// encoding/json makes it.
func (d *fastDec) path(dst *[]PathLevel) bool {
	if !d.lit('[') {
		return false
	}
	p := make([]PathLevel, 0, 4)
	if !d.lit(']') {
		for {
			var l PathLevel
			if !d.object(pathLevelKeys, func(i int) bool {
				if i == 0 {
					return d.str(&l.Level)
				}
				return d.str(&l.ID)
			}) {
				return false
			}
			p = append(p, l)
			if d.lit(',') {
				continue
			}
			if !d.lit(']') {
				return false
			}
			break
		}
	}
	*dst = p
	return true
}

var decisionKeys = []string{"status", "reason", "limit_path", "limit_dimension", "needed", "available", "retry_after_ms",
	"borrowed", "gateway_decision", "fallback_allowed", "retry_class", "input_partition", "input_offset", "log_time_ms",
	"hold_ttl_ms", "send_at_ms", "shadow"}

var shadowKeys = []string{"limited", "reason", "limit_path", "limit_dimension", "needed", "available", "buckets"}

func (d *fastDec) decision(r *Decision) bool {
	return d.object(decisionKeys, func(i int) bool {
		switch i {
		case 0:
			return strAs(d, &r.Status)
		case 1:
			return strAs(d, &r.Reason)
		case 2:
			return d.str(&r.LimitPath)
		case 3:
			return strAs(d, &r.LimitDimension)
		case 4:
			return d.int64(&r.Needed)
		case 5:
			return d.int64(&r.Available)
		case 6:
			return d.int64(&r.RetryAfterMs)
		case 7:
			return d.bool(&r.Borrowed)
		case 8:
			return strAs(d, &r.GatewayDecision)
		case 9:
			return d.bool(&r.FallbackAllowed)
		case 10:
			return strAs(d, &r.RetryClass)
		case 11:
			return d.int32(&r.InputPartition)
		case 12:
			return d.int64(&r.InputOffset)
		case 13:
			return d.int64(&r.LogTimeMs)
		case 14:
			return d.int64(&r.HoldTTLMs)
		case 15:
			return d.int64(&r.SendAtMs)
		case 16:
			s := new(ShadowVerdict)
			r.Shadow = s
			return d.object(shadowKeys, func(i int) bool {
				switch i {
				case 0:
					return d.bool(&s.Limited)
				case 1:
					return strAs(d, &s.Reason)
				case 2:
					return d.str(&s.LimitPath)
				case 3:
					return strAs(d, &s.LimitDimension)
				case 4:
					return d.int64(&s.Needed)
				case 5:
					return d.int64(&s.Available)
				case 6:
					return d.int32(&s.Buckets)
				}
				return false
			})
		}
		return false
	})
}

var dispatchedKeys = []string{"provider", "deployment", "model", "queue_ms", "fallback"}

func (d *fastDec) dispatched(r *Dispatched) bool {
	return d.object(dispatchedKeys, func(i int) bool {
		switch i {
		case 0:
			return strAs(d, &r.Provider)
		case 1:
			return d.str(&r.Deployment)
		case 2:
			return d.str(&r.Model)
		case 3:
			return d.int64(&r.QueueMs)
		case 4:
			return d.bool(&r.Fallback)
		}
		return false
	})
}

var reconciledKeys = []string{"input_tokens", "cached_input_tokens", "output_tokens", "spend_micros", "http_status",
	"first_byte_ms", "total_ms", "streaming", "partial", "estimated_input_tokens", "estimated_output_tokens"}

func (d *fastDec) reconciled(r *Reconciled) bool {
	return d.object(reconciledKeys, func(i int) bool {
		switch i {
		case 0:
			return d.int64(&r.InputTokens)
		case 1:
			return d.int64(&r.CachedInputTokens)
		case 2:
			return d.int64(&r.OutputTokens)
		case 3:
			return d.int64(&r.SpendMicros)
		case 4:
			return d.int32(&r.HTTPStatus)
		case 5:
			return d.int64(&r.FirstByteMs)
		case 6:
			return d.int64(&r.TotalMs)
		case 7:
			return d.bool(&r.Streaming)
		case 8:
			return d.bool(&r.Partial)
		case 9:
			return d.int64(&r.EstimatedInputTokens)
		case 10:
			return d.int64(&r.EstimatedOutputTokens)
		}
		return false
	})
}

var rejectedKeys = []string{"http_status", "kind", "limiter", "retry_after_ms", "provider_request_id", "deployment", "message"}

func (d *fastDec) providerRejected(r *ProviderRejected) bool {
	return d.object(rejectedKeys, func(i int) bool {
		switch i {
		case 0:
			return d.int32(&r.HTTPStatus)
		case 1:
			return strAs(d, &r.Kind)
		case 2:
			return strAs(d, &r.Limiter)
		case 3:
			return d.int64(&r.RetryAfterMs)
		case 4:
			return d.str(&r.ProviderRequestID)
		case 5:
			return d.str(&r.Deployment)
		case 6:
			return d.str(&r.Message)
		}
		return false
	})
}

var releasedKeys = []string{"reason", "input_tokens", "output_tokens"}

func (d *fastDec) released(r *Released) bool {
	return d.object(releasedKeys, func(i int) bool {
		switch i {
		case 0:
			return strAs(d, &r.Reason)
		case 1:
			return d.int64(&r.InputTokens)
		case 2:
			return d.int64(&r.OutputTokens)
		}
		return false
	})
}

var outcomeKeys = []string{"status", "http_status", "attempts", "queue_ms", "total_ms", "error_code", "gateway_decision",
	"input_tokens", "output_tokens"}

func (d *fastDec) outcome(r *Outcome) bool {
	return d.object(outcomeKeys, func(i int) bool {
		switch i {
		case 0:
			return strAs(d, &r.Status)
		case 1:
			return d.int32(&r.HTTPStatus)
		case 2:
			return d.int32(&r.Attempts)
		case 3:
			return d.int64(&r.QueueMs)
		case 4:
			return d.int64(&r.TotalMs)
		case 5:
			return d.str(&r.ErrorCode)
		case 6:
			return strAs(d, &r.GatewayDecision)
		case 7:
			return d.int64(&r.InputTokens)
		case 8:
			return d.int64(&r.OutputTokens)
		}
		return false
	})
}

var retryKeys = []string{"previous_attempt", "reason", "retry_after_ms"}

func (d *fastDec) retry(r *RetryRequested) bool {
	return d.object(retryKeys, func(i int) bool {
		switch i {
		case 0:
			return d.int32(&r.PreviousAttempt)
		case 1:
			return strAs(d, &r.Reason)
		case 2:
			return d.int64(&r.RetryAfterMs)
		}
		return false
	})
}
