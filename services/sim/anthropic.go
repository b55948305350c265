package sim

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// Anthropic Messages API: a text answer, or a tool_use when the request
// offers tools (anthropic_tools.go), non-streaming or as SSE events.

func (s *Server) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	ec := errCtx{provider: Anthropic, id: "0"}
	body, err := decodeBody(r)
	if err != nil {
		s.writeBadRequest(w, Anthropic, err.Error())
		return
	}
	ec.model, _ = body["model"].(string)
	if ec.model == "" {
		s.writeBadRequest(w, Anthropic, "model: Field required")
		return
	}
	maxTokens, ok := num(body["max_tokens"])
	if !ok || maxTokens < 1 {
		s.writeBadRequest(w, Anthropic, "max_tokens: Field required (integer >= 1)")
		return
	}
	msgs, _ := body["messages"].([]any)
	if len(msgs) == 0 {
		s.writeBadRequest(w, Anthropic, "messages: Field required (non-empty array)")
		return
	}
	if p := checkAnthropicRequest(body); p != "" {
		s.writeBadRequest(w, Anthropic, p)
		return
	}
	stream, _ := body["stream"].(bool)
	p := s.anthropicTokens(ec.model, body)
	t, rj := s.admit(r, call{
		provider: Anthropic, model: ec.model, input: p.total, cacheKey: p.prefixKey, cacheSize: p.prefix,
		maxTokens: maxTokens, stream: stream,
	})
	if rj != nil {
		s.writeRejection(w, ec, rj)
		return
	}
	ec.id = t.id
	h := w.Header()
	s.setRateHeaders(h, Anthropic, t.rv)
	h.Set("request-id", "req_sim_"+t.id)
	m := anthropicMessage{s: s, t: t, a: anthropicAnswer(body, t.output, t.finish), id: "msg_sim" + t.id, model: ec.model}
	if stream {
		m.stream(w, r)
	} else {
		m.write(w, r)
	}
}

// anthropicMessage writes one admitted Messages answer: a text block or a
// tool_use block, as one message or as its SSE events.
type anthropicMessage struct {
	s         *Server
	t         *ticket
	a         answer
	id, model string
}

func (m *anthropicMessage) stopReason() string {
	switch {
	case m.a.tool != nil:
		return "tool_use"
	case m.a.truncated:
		return "max_tokens"
	}
	return "end_turn"
}

func (m *anthropicMessage) usage(out int64) map[string]any {
	return map[string]any{
		"input_tokens":                m.t.c.input,
		"cache_creation_input_tokens": m.t.c.cacheWrit,
		"cache_read_input_tokens":     m.t.c.cacheRead,
		"output_tokens":               out,
	}
}

func (m *anthropicMessage) toolID() string { return "toolu_sim" + m.t.id }

func (m *anthropicMessage) write(w http.ResponseWriter, r *http.Request) {
	if err := m.s.sleep(r.Context(), m.s.cfg.Latency.TimeToFirstToken.D()+m.s.perToken(m.a.tokens)); err != nil {
		m.s.finish(m.t, m.a.tokens, true)
		return
	}
	block := map[string]any{"type": "text", "text": m.a.text}
	if m.a.tool != nil {
		block = map[string]any{"type": "tool_use", "id": m.toolID(), "name": m.a.tool.name, "input": json.RawMessage(m.a.tool.arguments)}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": m.id, "type": "message", "role": "assistant", "model": m.model,
		"content": []any{block}, "stop_reason": m.stopReason(), "stop_sequence": nil,
		"usage": m.usage(m.a.tokens),
	})
	m.s.finish(m.t, m.a.tokens, false)
}

// stream sends message_start, one content block (text deltas in chunks
// of stream_chunk_tokens, or a tool_use's input as input_json_delta
// pieces), message_delta with the stop reason and the output count, and
// message_stop. A client that goes away is charged what was sent.
func (m *anthropicMessage) stream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ev := newSSE(w)
	var sent int64
	fail := func() { m.s.finish(m.t, sent, true) }
	if ev.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": m.id, "type": "message", "role": "assistant", "model": m.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": m.usage(1),
	}}) != nil {
		fail()
		return
	}
	if err := m.s.sleep(ctx, m.s.cfg.Latency.TimeToFirstToken.D()); err != nil {
		fail()
		return
	}
	block := map[string]any{"type": "text", "text": ""}
	if m.a.tool != nil {
		block = map[string]any{"type": "tool_use", "id": m.toolID(), "name": m.a.tool.name, "input": map[string]any{}}
	}
	if ev.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": block}) != nil ||
		ev.event("ping", map[string]any{"type": "ping"}) != nil {
		fail()
		return
	}
	delta := func(d map[string]any) bool {
		return ev.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": d}) == nil
	}
	if m.a.tool != nil {
		args := m.a.tool.arguments
		for off := 0; off < len(args); off += jsonChunkBytes {
			if !delta(map[string]any{"type": "input_json_delta", "partial_json": args[off:min(off+jsonChunkBytes, len(args))]}) {
				sent = ceilDiv4(int64(off))
				fail()
				return
			}
		}
		sent = m.a.tokens
	} else {
		for _, k := range chunks(m.a.tokens, m.s.cfg.StreamChunkTokens) {
			if sent > 0 {
				if err := m.s.sleep(ctx, m.s.perToken(k)); err != nil {
					fail()
					return
				}
			}
			if !delta(map[string]any{"type": "text_delta", "text": outputText(sent, k)}) {
				fail()
				return
			}
			sent += k
		}
	}
	if ev.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) != nil ||
		ev.event("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": m.stopReason(), "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": sent}}) != nil ||
		ev.event("message_stop", map[string]any{"type": "message_stop"}) != nil {
		fail()
		return
	}
	m.s.finish(m.t, sent, false)
}

// anthropicDialect is Anthropic's: the Messages API under /anthropic/v1,
// anthropic-ratelimit-* headers with RFC 3339 resets, Anthropic's error
// object (overloaded_error for an overload).
type anthropicDialect struct{}

func init() { registerDialect(schemas.ProviderAnthropic, "/anthropic/v1", anthropicDialect{}) }

// overloadStatus: 529, Anthropic's overloaded_error.
func (anthropicDialect) overloadStatus() int { return 529 }

// promptCache: a Messages request's cache_control prefix is cached.
func (anthropicDialect) promptCache() bool { return true }

func (anthropicDialect) routes(s *Server, m *http.ServeMux) {
	m.HandleFunc("POST /anthropic/v1/messages", s.anthropicMessages)
}

func (anthropicDialect) rateHeaders(h http.Header, rv rateView) {
	set := func(prefix string, v *dimView) {
		h.Set("anthropic-ratelimit-"+prefix+"-limit", itoa(v.limit))
		h.Set("anthropic-ratelimit-"+prefix+"-remaining", itoa(v.remaining))
		h.Set("anthropic-ratelimit-"+prefix+"-reset", anthropicReset(rv.now, v.reset))
	}
	if rv.req != nil {
		set("requests", rv.req)
	}
	if rv.in != nil {
		set("input-tokens", rv.in)
	}
	if rv.out != nil {
		set("output-tokens", rv.out)
	}
	// anthropic-ratelimit-tokens-* is the most restrictive token limit in
	// effect (least remaining) among total, input and output.
	var most *dimView
	for _, v := range []*dimView{rv.tok, rv.in, rv.out} {
		if v != nil && (most == nil || v.remaining < most.remaining) {
			most = v
		}
	}
	if most != nil {
		set("tokens", most)
	}
}

func (anthropicDialect) retryAfter(h http.Header, wait time.Duration) {
	h.Set("retry-after", retryAfterSeconds(wait))
}

func (anthropicDialect) rejection(_ *Server, w http.ResponseWriter, ec errCtx, rj *rejection, overload bool) {
	if overload {
		writeJSON(w, rj.status, anthropicError("overloaded_error", rj.echoed("Overloaded"), ec.id))
		return
	}
	writeJSON(w, rj.status, anthropicError("rate_limit_error", rj.echoed(anthropicLimitMessage(rj)), ec.id))
}

func (anthropicDialect) badRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, anthropicError("invalid_request_error", msg, "0"))
}
