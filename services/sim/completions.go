package sim

import (
	"net/http"
)

// completionsDefaultMaxTokens is the legacy completions API's max_tokens
// when a request does not set it.
const completionsDefaultMaxTokens = 16

// openAICompletions is the legacy completions API (POST /v1/completions;
// Azure /openai/deployments/{deployment}/completions): prompt as a string,
// strings, token ids or token-id arrays; n choices per prompt (choice
// index = prompt × n + j); max_tokens defaults to 16; stream: true sends
// text_completion chunks, the usage chunk with stream_options.
// include_usage, then [DONE].
func (s *Server) openAICompletions(provider string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ec, body, ok := s.openAIScope(w, r, provider, "Completions_Create")
		if !ok {
			return
		}
		prompts, tokenIDs, textBytes := completionsPrompt(body["prompt"])
		if prompts == 0 {
			s.writeBadRequest(w, provider, "'prompt' is a required property (a string, strings, or token arrays)")
			return
		}
		maxTokens := int64(completionsDefaultMaxTokens)
		if v, present := body["max_tokens"]; present && v != nil {
			n, ok := num(v)
			if !ok || n < 1 {
				s.writeBadRequest(w, provider, "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1.")
				return
			}
			maxTokens = n
		}
		stream, _ := body["stream"].(bool)
		includeUsage := false
		if so, ok := body["stream_options"].(map[string]any); ok {
			includeUsage, _ = so["include_usage"].(bool)
		}
		n := choicesN(body)
		input := ceilDiv4(textBytes) + tokenIDs + s.cfg.PromptOverheadTokens
		t, rj := s.admit(r, call{provider: provider, model: ec.model, input: input, maxTokens: maxTokens, choices: n * prompts, stream: stream})
		if rj != nil {
			s.writeRejection(w, ec, rj)
			return
		}
		h := w.Header()
		s.setRateHeaders(h, provider, t.rv)
		surfaceOf(provider).requestIDs(h, t.id)
		finish := "stop"
		if t.finish {
			finish = "length"
		}
		choices := n * prompts
		id, created := "cmpl-sim"+t.id, t.rv.now.Unix()
		usage := func(out int64) map[string]any {
			return map[string]any{"prompt_tokens": t.c.input, "completion_tokens": out, "total_tokens": t.c.input + out}
		}
		ctx := r.Context()
		if !stream {
			total := t.output * choices
			if err := s.sleep(ctx, s.cfg.Latency.TimeToFirstToken.D()+s.perToken(total)); err != nil {
				s.finish(t, total, true)
				return
			}
			cs := make([]any, 0, choices)
			for i := range choices {
				cs = append(cs, map[string]any{"text": outputText(0, t.output), "index": i, "logprobs": nil, "finish_reason": finish})
			}
			writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "text_completion", "created": created, "model": ec.model,
				"system_fingerprint": "fp_sim", "choices": cs, "usage": usage(total)})
			s.finish(t, total, false)
			return
		}
		s.streamCompletions(w, r, t, ec.model, id, created, choices, finish, includeUsage, usage)
	}
}

// completionsPrompt counts a legacy completion's prompts and their size:
// a string, a token array, or a list of either.
func completionsPrompt(prompt any) (prompts, tokenIDs, textBytes int64) {
	switch p := prompt.(type) {
	case string:
		return 1, 0, int64(len(p))
	case []any:
		if len(p) > 0 {
			if _, isNum := p[0].(float64); isNum {
				return 1, int64(len(p)), 0
			}
		}
		for _, e := range p {
			switch x := e.(type) {
			case string:
				textBytes += int64(len(x))
			case []any:
				tokenIDs += int64(len(x))
			}
		}
		return int64(len(p)), tokenIDs, textBytes
	}
	return 0, 0, 0
}

// streamCompletions streams an admitted legacy completion as server-sent
// events, choice after choice, with the usage chunk when asked for.
func (s *Server) streamCompletions(w http.ResponseWriter, r *http.Request, t *ticket, model, id string, created, choices int64,
	finish string, includeUsage bool, usage func(int64) map[string]any) {
	ctx := r.Context()
	sse := newSSE(w)
	chunk := func(i int64, text string, fin any) map[string]any {
		m := map[string]any{"id": id, "object": "text_completion", "created": created, "model": model, "system_fingerprint": "fp_sim",
			"choices": []any{map[string]any{"text": text, "index": i, "logprobs": nil, "finish_reason": fin}}}
		if includeUsage {
			m["usage"] = nil
		}
		return m
	}
	var sent int64
	fail := func() { s.finish(t, sent, true) }
	if err := s.sleep(ctx, s.cfg.Latency.TimeToFirstToken.D()); err != nil {
		fail()
		return
	}
	for i := range choices {
		var off int64
		for _, k := range chunks(t.output, s.cfg.StreamChunkTokens) {
			if sent > 0 {
				if err := s.sleep(ctx, s.perToken(k)); err != nil {
					fail()
					return
				}
			}
			if sse.data(chunk(i, outputText(off, k), nil)) != nil {
				fail()
				return
			}
			off += k
			sent += k
		}
		if sse.data(chunk(i, "", finish)) != nil {
			fail()
			return
		}
	}
	if includeUsage {
		if sse.data(map[string]any{"id": id, "object": "text_completion", "created": created, "model": model,
			"system_fingerprint": "fp_sim", "choices": []any{}, "usage": usage(sent)}) != nil {
			fail()
			return
		}
	}
	if sse.raw("data: [DONE]\n\n") != nil {
		fail()
		return
	}
	s.finish(t, sent, false)
}
