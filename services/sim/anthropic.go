package sim

import (
	"net/http"
)

// Anthropic Messages API.

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
	stop := "end_turn"
	if t.finish {
		stop = "max_tokens"
	}
	id := "msg_sim" + t.id
	usage := func(out int64) map[string]any {
		return map[string]any{
			"input_tokens":                t.c.input,
			"cache_creation_input_tokens": t.c.cacheWrit,
			"cache_read_input_tokens":     t.c.cacheRead,
			"output_tokens":               out,
		}
	}
	ctx := r.Context()
	if !stream {
		if err := s.sleep(ctx, s.cfg.Latency.TimeToFirstToken.D()+s.perToken(t.output)); err != nil {
			s.finish(t, t.output, true)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": ec.model,
			"content":     []any{map[string]any{"type": "text", "text": outputText(0, t.output)}},
			"stop_reason": stop, "stop_sequence": nil,
			"usage": usage(t.output),
		})
		s.finish(t, t.output, false)
		return
	}

	ev := newSSE(w)
	var sent int64
	fail := func() { s.finish(t, sent, true) }
	startUsage := usage(1)
	if ev.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": ec.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
	}}) != nil {
		fail()
		return
	}
	if err := s.sleep(ctx, s.cfg.Latency.TimeToFirstToken.D()); err != nil {
		fail()
		return
	}
	if ev.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "text", "text": ""}}) != nil ||
		ev.event("ping", map[string]any{"type": "ping"}) != nil {
		fail()
		return
	}
	for _, k := range chunks(t.output, s.cfg.StreamChunkTokens) {
		if sent > 0 {
			if err := s.sleep(ctx, s.perToken(k)); err != nil {
				fail()
				return
			}
		}
		if ev.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": outputText(sent, k)}}) != nil {
			fail()
			return
		}
		sent += k
	}
	if ev.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) != nil ||
		ev.event("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": sent}}) != nil ||
		ev.event("message_stop", map[string]any{"type": "message_stop"}) != nil {
		fail()
		return
	}
	s.finish(t, sent, false)
}
