package sim

import (
	"context"
	"net/http"
)

// OpenAI's Responses API (POST /v1/responses; Azure on its v1 surface,
// POST /azure/openai/v1/responses with the deployment as the model): input
// as a string or items, instructions, max_output_tokens, tools and
// text.format like chat; the answer is a response object, or with
// stream: true the Responses SSE events (response.created … response.
// completed, each with its sequence_number). Usage always comes with the
// final response, reasoning tokens in output_tokens_details.

func (s *Server) openAIResponses(provider string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := decodeBody(r)
		if err != nil {
			s.writeBadRequest(w, provider, err.Error())
			return
		}
		ec := errCtx{provider: provider, operation: "Responses_Create", apiVer: "v1"}
		ec.model, _ = body["model"].(string)
		if ec.model == "" {
			s.writeBadRequest(w, provider, "you must provide a model parameter")
			return
		}
		entries := int64(1)
		switch in := body["input"].(type) {
		case string:
		case []any:
			entries = int64(len(in))
		case nil:
			if _, ok := body["instructions"].(string); !ok {
				s.writeBadRequest(w, provider, "Missing required parameter: 'input'.")
				return
			}
		default:
			s.writeBadRequest(w, provider, "Invalid type for 'input': expected a string or an array of input items.")
			return
		}
		var maxTokens int64
		if v, present := body["max_output_tokens"]; present && v != nil {
			n, ok := num(v)
			if !ok || n < 1 {
				s.writeBadRequest(w, provider, "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 1.")
				return
			}
			maxTokens = n
		}
		stream, _ := body["stream"].(bool)
		textBytes := stringBytes(body["input"]) + stringBytes(body["instructions"]) + stringBytes(body["tools"]) + stringBytes(body["text"])
		t, rj := s.admit(r, call{provider: provider, model: ec.model, input: s.estimateInput(textBytes, entries), maxTokens: maxTokens, stream: stream})
		if rj != nil {
			s.writeRejection(w, ec, rj)
			return
		}
		h := w.Header()
		s.setRateHeaders(h, provider, t.rv)
		surfaceOf(provider).requestIDs(h, t.id)
		rs := &responseStream{s: s, t: t, body: body, a: answerFor(body, ec.model, t.output, t.finish), id: "resp_sim" + t.id, model: ec.model, maxTokens: maxTokens}
		if stream {
			rs.stream(w, r)
			return
		}
		total := rs.a.tokens
		if err := s.sleep(r.Context(), s.cfg.Latency.TimeToFirstToken.D()+s.perToken(total)); err != nil {
			s.finish(t, total, true)
			return
		}
		writeJSON(w, http.StatusOK, rs.response(rs.status(), rs.output(), total, rs.a.reasoning))
		s.finish(t, total, false)
	}
}

// responseStream builds one response and its events.
type responseStream struct {
	s         *Server
	t         *ticket
	body      map[string]any
	a         answer
	id, model string
	maxTokens int64
	seq       int64
	// The stream's writer and the output tokens sent so far (stream).
	out  *sse
	sent int64
}

func (rs *responseStream) status() string {
	if rs.a.truncated {
		return "incomplete"
	}
	return "completed"
}

func (rs *responseStream) reasoningItem() map[string]any {
	return map[string]any{"id": "rs_sim" + rs.t.id, "type": "reasoning", "summary": []any{}}
}

func (rs *responseStream) messageItem(text, status string) map[string]any {
	content := []any{}
	if status != "in_progress" {
		content = []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}}
	}
	return map[string]any{"id": "msg_sim" + rs.t.id, "type": "message", "status": status, "role": "assistant", "content": content}
}

func (rs *responseStream) toolItem(args, status string) map[string]any {
	return map[string]any{"id": "fc_sim" + rs.t.id, "type": "function_call", "status": status, "call_id": "call_sim" + rs.t.id,
		"name": rs.a.tool.name, "arguments": args}
}

// output is the finished response's output items.
func (rs *responseStream) output() []any {
	var out []any
	if rs.a.reasoning > 0 {
		out = append(out, rs.reasoningItem())
	}
	if rs.a.tool != nil {
		return append(out, rs.toolItem(rs.a.tool.arguments, "completed"))
	}
	return append(out, rs.messageItem(rs.a.text, rs.status()))
}

// response is the response object in a state: in_progress (no output, no
// usage), completed or incomplete.
func (rs *responseStream) response(status string, output []any, out, reasoning int64) map[string]any {
	b := rs.body
	tools, _ := b["tools"].([]any)
	if tools == nil {
		tools = []any{}
	}
	choice := b["tool_choice"]
	if choice == nil {
		choice = "auto"
	}
	text := b["text"]
	if text == nil {
		text = map[string]any{"format": map[string]any{"type": "text"}}
	}
	resp := map[string]any{
		"id": rs.id, "object": "response", "created_at": rs.t.rv.now.Unix(), "status": status,
		"error": nil, "incomplete_details": nil, "instructions": b["instructions"], "model": rs.model,
		"output": output, "parallel_tool_calls": true, "temperature": 1.0, "top_p": 1.0,
		"tool_choice": choice, "tools": tools, "text": text, "truncation": "disabled",
		"previous_response_id": nil, "reasoning": b["reasoning"], "store": false, "metadata": map[string]any{}, "usage": nil,
	}
	if rs.maxTokens > 0 {
		resp["max_output_tokens"] = rs.maxTokens
	}
	if status == "incomplete" {
		resp["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
	}
	if status != "in_progress" {
		in := rs.t.c.input
		resp["completed_at"] = rs.t.rv.now.Unix()
		resp["usage"] = map[string]any{
			"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": out, "output_tokens_details": map[string]any{"reasoning_tokens": reasoning},
			"total_tokens": in + out,
		}
	}
	return resp
}

// event sends one named event with the next sequence_number.
func (rs *responseStream) event(sse *sse, typ string, fields map[string]any) error {
	fields["type"] = typ
	fields["sequence_number"] = rs.seq
	rs.seq++
	return sse.event(typ, fields)
}

// stream sends response.created, response.in_progress, the reasoning
// item, the message (content part, output_text deltas, done events) or the
// function call (arguments deltas), then response.completed — or
// response.incomplete when the output hit max_output_tokens. A client
// that goes away is charged what was sent.
func (rs *responseStream) stream(w http.ResponseWriter, r *http.Request) {
	s, a := rs.s, rs.a
	ctx := r.Context()
	rs.out = newSSE(w)
	if err := s.sleep(ctx, s.cfg.Latency.TimeToFirstToken.D()); err != nil {
		rs.fail()
		return
	}
	if !rs.send("response.created", map[string]any{"response": rs.response("in_progress", []any{}, 0, 0)}) ||
		!rs.send("response.in_progress", map[string]any{"response": rs.response("in_progress", []any{}, 0, 0)}) {
		return
	}
	idx := int64(0)
	if a.reasoning > 0 {
		if !rs.send("response.output_item.added", map[string]any{"output_index": idx, "item": rs.reasoningItem()}) ||
			!rs.send("response.output_item.done", map[string]any{"output_index": idx, "item": rs.reasoningItem()}) {
			return
		}
		rs.sent += a.reasoning
		idx++
	}
	if a.tool != nil {
		if !rs.streamTool(idx) {
			return
		}
	} else if !rs.streamMessage(ctx, idx) {
		return
	}
	final := "response.completed"
	if rs.status() == "incomplete" {
		final = "response.incomplete"
	}
	if !rs.send(final, map[string]any{"response": rs.response(rs.status(), rs.output(), rs.sent, a.reasoning)}) {
		return
	}
	s.finish(rs.t, rs.sent, false)
}

// fail finishes the ticket as cancelled, charged the tokens sent so far.
func (rs *responseStream) fail() { rs.s.finish(rs.t, rs.sent, true) }

// send sends one event; a failed write (the client is gone) fails the
// stream, and the caller stops (false).
func (rs *responseStream) send(typ string, fields map[string]any) bool {
	if rs.event(rs.out, typ, fields) != nil {
		rs.fail()
		return false
	}
	return true
}

// streamTool streams the function call at output index idx: the item, its
// arguments in deltas of jsonChunkBytes, and the done events. The
// arguments' tokens count as sent once the deltas are out, before the done
// events, as a client that read them has them.
func (rs *responseStream) streamTool(idx int64) bool {
	a := rs.a
	item := rs.toolItem("", "in_progress")
	if !rs.send("response.output_item.added", map[string]any{"output_index": idx, "item": item}) {
		return false
	}
	args := a.tool.arguments
	for off := 0; off < len(args); off += jsonChunkBytes {
		if !rs.send("response.function_call_arguments.delta", map[string]any{"item_id": item["id"], "output_index": idx,
			"delta": args[off:min(off+jsonChunkBytes, len(args))]}) {
			return false
		}
	}
	rs.sent += a.tokens - a.reasoning
	return rs.send("response.function_call_arguments.done", map[string]any{"item_id": item["id"], "output_index": idx, "arguments": args}) &&
		rs.send("response.output_item.done", map[string]any{"output_index": idx, "item": rs.toolItem(args, "completed")})
}

// streamMessage streams the message at output index idx: the item and its
// content part, the text in deltas at the configured pace, and the done
// events. Once they are out, the answer's whole token count counts as
// sent, whatever the deltas added up to (JSON answers too).
func (rs *responseStream) streamMessage(ctx context.Context, idx int64) bool {
	s, a := rs.s, rs.a
	msgID := "msg_sim" + rs.t.id
	part := func(text string) map[string]any {
		return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
	}
	at := map[string]any{"item_id": msgID, "output_index": idx, "content_index": 0}
	with := func(k string, v any) map[string]any {
		m := map[string]any{k: v}
		for kk, vv := range at {
			m[kk] = vv
		}
		return m
	}
	if !rs.send("response.output_item.added", map[string]any{"output_index": idx, "item": rs.messageItem("", "in_progress")}) ||
		!rs.send("response.content_part.added", with("part", part(""))) {
		return false
	}
	pieces, tokens := rs.textPieces()
	for i, p := range pieces {
		if i > 0 {
			if err := s.sleep(ctx, s.perToken(tokens[i])); err != nil {
				rs.fail()
				return false
			}
		}
		d := with("delta", p)
		d["logprobs"] = []any{}
		if !rs.send("response.output_text.delta", d) {
			return false
		}
		rs.sent += tokens[i]
	}
	done := with("text", a.text)
	done["logprobs"] = []any{}
	if !rs.send("response.output_text.done", done) ||
		!rs.send("response.content_part.done", with("part", part(a.text))) ||
		!rs.send("response.output_item.done", map[string]any{"output_index": idx, "item": rs.messageItem(a.text, rs.status())}) {
		return false
	}
	rs.sent = a.tokens // JSON answers: their whole count once done
	return true
}

// textPieces splits the message text into deltas and their tokens:
// filler text in stream_chunk_tokens tokens, JSON in 16-byte pieces.
func (rs *responseStream) textPieces() ([]string, []int64) {
	a := rs.a
	var pieces []string
	var tokens []int64
	if a.filler {
		var off int64
		for _, k := range chunks(a.tokens-a.reasoning, rs.s.cfg.StreamChunkTokens) {
			pieces, tokens = append(pieces, a.text[4*off:4*(off+k)]), append(tokens, k)
			off += k
		}
		return pieces, tokens
	}
	for off := 0; off < len(a.text); off += jsonChunkBytes {
		p := a.text[off:min(off+jsonChunkBytes, len(a.text))]
		pieces, tokens = append(pieces, p), append(tokens, 0)
	}
	return pieces, tokens
}
