package sim

import (
	"context"
	"net/http"
)

// chatCompletion writes one admitted chat completion: n choices of the
// same answer (text, a tool call or structured JSON), as one
// chat.completion or as chat.completion.chunk events.
type chatCompletion struct {
	s            *Server
	t            *ticket
	a            answer
	n            int64
	id, model    string
	created      int64
	includeUsage bool
	// The stream's writer and the output tokens sent so far (stream).
	out  *sse
	sent int64
}

// jsonChunkBytes is how much of a tool call's arguments or a structured
// answer one stream chunk carries.
const jsonChunkBytes = 16

func (c *chatCompletion) finishReason() string {
	switch {
	case c.a.tool != nil:
		return "tool_calls"
	case c.a.truncated:
		return "length"
	}
	return "stop"
}

func (c *chatCompletion) usage(out, reasoning int64) map[string]any {
	in := c.t.c.input
	return map[string]any{
		"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out,
		"prompt_tokens_details":     map[string]any{"cached_tokens": 0, "audio_tokens": 0},
		"completion_tokens_details": map[string]any{"reasoning_tokens": reasoning, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
	}
}

func (c *chatCompletion) toolCalls(args string, withHead bool) []any {
	tc := map[string]any{"index": 0, "function": map[string]any{"arguments": args}}
	if withHead {
		tc["id"], tc["type"] = "call_sim"+c.t.id, "function"
		tc["function"].(map[string]any)["name"] = c.a.tool.name
	}
	return []any{tc}
}

func (c *chatCompletion) write(w http.ResponseWriter, r *http.Request) {
	total := c.a.tokens * c.n
	if err := c.s.sleep(r.Context(), c.s.cfg.Latency.TimeToFirstToken.D()+c.s.perToken(total)); err != nil {
		c.s.finish(c.t, total, true)
		return
	}
	msg := map[string]any{"role": "assistant", "content": c.a.text, "refusal": nil}
	if c.a.tool != nil {
		msg["content"] = nil
		msg["tool_calls"] = []any{map[string]any{"id": "call_sim" + c.t.id, "type": "function",
			"function": map[string]any{"name": c.a.tool.name, "arguments": c.a.tool.arguments}}}
	}
	choices := make([]any, 0, c.n)
	for i := range c.n {
		choices = append(choices, map[string]any{"index": i, "message": msg, "logprobs": nil, "finish_reason": c.finishReason()})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": c.id, "object": "chat.completion", "created": c.created, "model": c.model,
		"system_fingerprint": "fp_sim", "choices": choices, "usage": c.usage(total, c.a.reasoning*c.n),
	})
	c.s.finish(c.t, total, false)
}

func (c *chatCompletion) chunk(index int64, delta map[string]any, fin any) map[string]any {
	m := map[string]any{
		"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
		"system_fingerprint": "fp_sim",
		"choices":            []any{map[string]any{"index": index, "delta": delta, "logprobs": nil, "finish_reason": fin}},
	}
	if c.includeUsage {
		m["usage"] = nil
	}
	return m
}

// stream sends each choice in turn: a role delta, the content (text in
// chunks of stream_chunk_tokens, or the JSON / tool arguments in
// 16-byte pieces), a finish delta; then the usage chunk if asked, and
// [DONE]. A client that goes away is charged what was sent.
func (c *chatCompletion) stream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c.out = newSSE(w)
	var reasoning int64
	if err := c.s.sleep(ctx, c.s.cfg.Latency.TimeToFirstToken.D()); err != nil {
		c.fail()
		return
	}
	for i := range c.n {
		first := map[string]any{"role": "assistant", "content": "", "refusal": nil}
		if c.a.tool != nil {
			first["content"] = nil
			first["tool_calls"] = c.toolCalls("", true)
		}
		if !c.send(c.chunk(i, first, nil)) {
			return
		}
		c.sent += c.a.reasoning
		reasoning += c.a.reasoning
		if c.a.filler {
			if !c.streamFiller(ctx, i) {
				return
			}
		} else if !c.streamJSON(i) {
			return
		}
		if !c.send(c.chunk(i, map[string]any{}, c.finishReason())) {
			return
		}
	}
	if c.includeUsage {
		if !c.send(map[string]any{
			"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
			"system_fingerprint": "fp_sim", "choices": []any{}, "usage": c.usage(c.sent, reasoning),
		}) {
			return
		}
	}
	if c.out.raw("data: [DONE]\n\n") != nil {
		c.fail()
		return
	}
	c.s.finish(c.t, c.sent, false)
}

// fail finishes the ticket as cancelled, charged the tokens sent so far.
func (c *chatCompletion) fail() { c.s.finish(c.t, c.sent, true) }

// send sends one chunk; a failed write (the client is gone) fails the
// stream, and the caller stops (false).
func (c *chatCompletion) send(chunk map[string]any) bool {
	if c.out.data(chunk) != nil {
		c.fail()
		return false
	}
	return true
}

// streamFiller streams choice i's filler text in chunks of
// stream_chunk_tokens tokens at the configured pace, each counted as sent
// once written.
func (c *chatCompletion) streamFiller(ctx context.Context, i int64) bool {
	var off int64
	for _, k := range chunks(c.a.tokens-c.a.reasoning, c.s.cfg.StreamChunkTokens) {
		if off > 0 {
			if err := c.s.sleep(ctx, c.s.perToken(k)); err != nil {
				c.fail()
				return false
			}
		}
		if !c.send(c.chunk(i, map[string]any{"content": c.a.text[4*off : 4*(off+k)]}, nil)) {
			return false
		}
		off += k
		c.sent += k
	}
	return true
}

// streamJSON streams choice i's JSON answer or tool arguments in pieces of
// jsonChunkBytes, without pauses. A client that goes away midway is
// charged the bytes before the failed piece (four to a token); a whole
// answer, its token count.
func (c *chatCompletion) streamJSON(i int64) bool {
	body := c.a.text
	if c.a.tool != nil {
		body = c.a.tool.arguments
	}
	for off := 0; off < len(body); off += jsonChunkBytes {
		piece := body[off:min(off+jsonChunkBytes, len(body))]
		delta := map[string]any{"content": piece}
		if c.a.tool != nil {
			delta = map[string]any{"tool_calls": c.toolCalls(piece, false)}
		}
		if c.out.data(c.chunk(i, delta, nil)) != nil {
			c.sent += ceilDiv4(int64(off))
			c.fail()
			return false
		}
	}
	c.sent += c.a.tokens - c.a.reasoning
	return true
}
