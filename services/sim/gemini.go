package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// Gemini generateContent / streamGenerateContent.
//
// geminiGenerate takes the steps every simulated provider takes: route,
// read and check the request, admit it against the limits, then answer
// whole or streamed.
func (s *Server) geminiGenerate(w http.ResponseWriter, r *http.Request) {
	model, method, _ := strings.Cut(r.PathValue("call"), ":")
	if model == "" || (method != "generateContent" && method != "streamGenerateContent") {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
			"code": 404, "message": "Method not found: " + r.PathValue("call"), "status": "NOT_FOUND",
		}})
		return
	}
	ec := errCtx{provider: Gemini, model: model}
	c, ok := s.geminiCall(w, r, model, method == "streamGenerateContent")
	if !ok {
		return
	}
	t, rj := s.admit(r, c)
	if rj != nil {
		s.writeRejection(w, ec, rj)
		return
	}
	a := geminiAnswer{t: t, model: model, respID: "sim-" + t.id, finish: "STOP"}
	if t.finish {
		a.finish = "MAX_TOKENS"
	}
	if !c.stream {
		if err := s.sleep(r.Context(), s.cfg.Latency.TimeToFirstToken.D()+s.perToken(t.output)); err != nil {
			s.finish(t, t.output, true)
			return
		}
		writeJSON(w, http.StatusOK, a.message(outputText(0, t.output), t.output, a.finish))
		s.finish(t, t.output, false)
		return
	}
	s.geminiStream(w, r, a)
}

// geminiCall reads and checks a request body as Gemini does, answering 400
// itself (ok false) with Gemini's wording, so that a client sees the
// errors the real API gives; the input is estimated from the contents, the
// system instruction and the tools.
func (s *Server) geminiCall(w http.ResponseWriter, r *http.Request, model string, stream bool) (c call, ok bool) {
	body, err := decodeBody(r)
	if err != nil {
		s.writeBadRequest(w, Gemini, "Invalid JSON payload received. "+err.Error())
		return call{}, false
	}
	contents, _ := body["contents"].([]any)
	if len(contents) == 0 {
		s.writeBadRequest(w, Gemini, "* GenerateContentRequest.contents: contents is not specified")
		return call{}, false
	}
	var maxTokens int64
	if gc, ok := body["generationConfig"].(map[string]any); ok {
		if v, present := gc["maxOutputTokens"]; present {
			n, ok := num(v)
			if !ok || n < 1 {
				s.writeBadRequest(w, Gemini, "* GenerateContentRequest.generation_config.max_output_tokens: must be a positive integer")
				return call{}, false
			}
			maxTokens = n
		}
	}
	textBytes := stringBytes(body["contents"]) + stringBytes(body["systemInstruction"]) + stringBytes(body["tools"])
	return call{
		provider: Gemini, model: model, input: s.estimateInput(textBytes, int64(len(contents))),
		maxTokens: maxTokens, stream: stream,
	}, true
}

// geminiAnswer builds the GenerateContentResponse messages of one admitted
// call: the whole answer, or each chunk of a stream (where usage is
// cumulative and only the last chunk has a finish reason).
type geminiAnswer struct {
	t             *ticket
	model, respID string
	finish        string // STOP, or MAX_TOKENS when the ticket was cut
}

// message is one GenerateContentResponse carrying text, with out output
// tokens so far; fin empty leaves finishReason out.
func (a geminiAnswer) message(text string, out int64, fin string) map[string]any {
	cand := map[string]any{"content": map[string]any{"parts": []any{map[string]any{"text": text}}, "role": "model"}, "index": 0}
	if fin != "" {
		cand["finishReason"] = fin
	}
	return map[string]any{
		"candidates": []any{cand},
		"usageMetadata": map[string]any{
			"promptTokenCount": a.t.c.input, "candidatesTokenCount": out, "totalTokenCount": a.t.c.input + out,
		},
		"modelVersion": a.model,
		"responseId":   a.respID,
	}
}

// geminiStream streams the answer in chunks at the configured pace. A
// client that goes away or a failed write ends the stream, and the ticket
// is finished as cancelled with the tokens sent so far.
func (s *Server) geminiStream(w http.ResponseWriter, r *http.Request, a geminiAnswer) {
	t := a.t
	out := newGeminiStreamWriter(w, r.URL.Query().Get("alt") == "sse")
	var sent int64
	fail := func() { s.finish(t, sent, true) }
	ctx := r.Context()
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
			fin = a.finish
		}
		if out.write(i, a.message(outputText(sent, k), sent+k, fin)) != nil {
			fail()
			return
		}
		sent += k
	}
	if out.end() != nil {
		fail()
		return
	}
	s.finish(t, sent, false)
}

// geminiStreamWriter writes a Gemini stream in the client's chosen form:
// ?alt=sse gives server-sent events, anything else a JSON array streamed
// element by element (the API's default without alt).
type geminiStreamWriter struct {
	out    *sse
	useSSE bool
}

func newGeminiStreamWriter(w http.ResponseWriter, useSSE bool) geminiStreamWriter {
	if useSSE {
		return geminiStreamWriter{out: newSSE(w), useSSE: true}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return geminiStreamWriter{out: &sse{w: w, f: f}}
}

// write sends the i-th message: an event, or an array element after "["
// or ",\r\n" as the real API separates them.
func (g geminiStreamWriter) write(i int, msg map[string]any) error {
	if g.useSSE {
		return g.out.data(msg)
	}
	b, _ := json.Marshal(msg)
	prefix := ",\r\n"
	if i == 0 {
		prefix = "["
	}
	return g.out.raw(prefix + string(b))
}

// end closes the array; events need no end.
func (g geminiStreamWriter) end() error {
	if g.useSSE {
		return nil
	}
	return g.out.raw("]")
}

// geminiDialect is Gemini's: generateContent and streamGenerateContent
// under /gemini/v1beta, no rate-limit or retry headers (the wait is the
// body's RetryInfo), Google's error object.
type geminiDialect struct{}

func init() { registerDialect(schemas.ProviderGemini, "/gemini/v1beta", geminiDialect{}) }

func (geminiDialect) overloadStatus() int { return http.StatusServiceUnavailable }

func (geminiDialect) promptCache() bool { return false }

func (geminiDialect) routes(s *Server, m *http.ServeMux) {
	m.HandleFunc("POST /gemini/v1beta/models/{call}", s.geminiGenerate)
}

// rateHeaders: Gemini documents no rate-limit headers.
func (geminiDialect) rateHeaders(http.Header, rateView) {}

// retryAfter: Gemini's wait is in the body (google.rpc.RetryInfo).
func (geminiDialect) retryAfter(http.Header, time.Duration) {}

func (geminiDialect) rejection(s *Server, w http.ResponseWriter, ec errCtx, rj *rejection, overload bool) {
	if overload {
		writeJSON(w, rj.status, map[string]any{"error": map[string]any{
			"code": rj.status, "message": rj.echoed("The model is overloaded. Please try again later."), "status": "UNAVAILABLE",
		}})
		return
	}
	writeJSON(w, rj.status, s.geminiQuotaError(ec.model, rj))
}

func (geminiDialect) badRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": 400, "message": msg, "status": "INVALID_ARGUMENT"}})
}
