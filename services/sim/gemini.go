package sim

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Gemini generateContent / streamGenerateContent.

func (s *Server) geminiGenerate(w http.ResponseWriter, r *http.Request) {
	model, method, _ := strings.Cut(r.PathValue("call"), ":")
	if model == "" || (method != "generateContent" && method != "streamGenerateContent") {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
			"code": 404, "message": "Method not found: " + r.PathValue("call"), "status": "NOT_FOUND",
		}})
		return
	}
	ec := errCtx{provider: Gemini, model: model}
	body, err := decodeBody(r)
	if err != nil {
		s.writeBadRequest(w, Gemini, "Invalid JSON payload received. "+err.Error())
		return
	}
	contents, _ := body["contents"].([]any)
	if len(contents) == 0 {
		s.writeBadRequest(w, Gemini, "* GenerateContentRequest.contents: contents is not specified")
		return
	}
	var maxTokens int64
	if gc, ok := body["generationConfig"].(map[string]any); ok {
		if v, present := gc["maxOutputTokens"]; present {
			n, ok := num(v)
			if !ok || n < 1 {
				s.writeBadRequest(w, Gemini, "* GenerateContentRequest.generation_config.max_output_tokens: must be a positive integer")
				return
			}
			maxTokens = n
		}
	}
	stream := method == "streamGenerateContent"
	textBytes := stringBytes(body["contents"]) + stringBytes(body["systemInstruction"]) + stringBytes(body["tools"])
	t, rj := s.admit(r, call{
		provider: Gemini, model: model, input: s.estimateInput(textBytes, int64(len(contents))),
		maxTokens: maxTokens, stream: stream,
	})
	if rj != nil {
		s.writeRejection(w, ec, rj)
		return
	}
	finish := "STOP"
	if t.finish {
		finish = "MAX_TOKENS"
	}
	respID := "sim-" + t.id
	resp := func(text string, out int64, fin string) map[string]any {
		cand := map[string]any{"content": map[string]any{"parts": []any{map[string]any{"text": text}}, "role": "model"}, "index": 0}
		if fin != "" {
			cand["finishReason"] = fin
		}
		return map[string]any{
			"candidates": []any{cand},
			"usageMetadata": map[string]any{
				"promptTokenCount": t.c.input, "candidatesTokenCount": out, "totalTokenCount": t.c.input + out,
			},
			"modelVersion": model,
			"responseId":   respID,
		}
	}
	ctx := r.Context()
	if !stream {
		if err := s.sleep(ctx, s.cfg.Latency.TimeToFirstToken.D()+s.perToken(t.output)); err != nil {
			s.finish(t, t.output, true)
			return
		}
		writeJSON(w, http.StatusOK, resp(outputText(0, t.output), t.output, finish))
		s.finish(t, t.output, false)
		return
	}

	// ?alt=sse → server-sent events; otherwise a streamed JSON array.
	useSSE := r.URL.Query().Get("alt") == "sse"
	var out *sse
	if useSSE {
		out = newSSE(w)
	} else {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		f, _ := w.(http.Flusher)
		out = &sse{w: w, f: f}
	}
	var sent int64
	fail := func() { s.finish(t, sent, true) }
	if err := s.sleep(ctx, s.cfg.Latency.TimeToFirstToken.D()); err != nil {
		fail()
		return
	}
	parts := chunks(t.output, s.cfg.StreamChunkTokens)
	if len(parts) == 0 {
		parts = []int64{0}
	}
	for i, k := range parts {
		if i > 0 {
			if err := s.sleep(ctx, s.perToken(k)); err != nil {
				fail()
				return
			}
		}
		fin := ""
		if i == len(parts)-1 {
			fin = finish
		}
		msg := resp(outputText(sent, k), sent+k, fin)
		var err error
		if useSSE {
			err = out.data(msg)
		} else {
			b, _ := json.Marshal(msg)
			prefix := ",\r\n"
			if i == 0 {
				prefix = "["
			}
			err = out.raw(prefix + string(b))
		}
		if err != nil {
			fail()
			return
		}
		sent += k
	}
	if !useSSE && out.raw("]") != nil {
		fail()
		return
	}
	s.finish(t, sent, false)
}
