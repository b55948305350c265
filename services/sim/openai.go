package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// OpenAI and Azure OpenAI chat completions, embeddings and models.

// openAISurface is what the OpenAI-shaped dialects (OpenAI's, and
// Azure's, which embeds it) do differently in the handlers they share:
// where a request names its model, and the request ids of an answer.
type openAISurface interface {
	// scopeURL reads what the URL says of the request into ec before the
	// body is read; false: it wrote the refusal.
	scopeURL(s *Server, w http.ResponseWriter, r *http.Request, ec *errCtx) bool
	// scopeBody reads what the body says into ec; false: it wrote the
	// refusal.
	scopeBody(s *Server, w http.ResponseWriter, body map[string]any, ec *errCtx) bool
	// requestIDs sets the request-id headers of the answer to call id.
	requestIDs(h http.Header, id string)
}

// surfaceOf is provider's openAISurface (its dialect embeds
// openAIDialect; the handlers that ask are registered only by those).
func surfaceOf(provider string) openAISurface { return dialectOf(provider).(openAISurface) }

func (s *Server) openAIScope(w http.ResponseWriter, r *http.Request, provider, op string) (ec errCtx, body map[string]any, ok bool) {
	ec = errCtx{provider: provider, operation: op}
	sf := surfaceOf(provider)
	if !sf.scopeURL(s, w, r, &ec) {
		return ec, nil, false
	}
	body, err := decodeBody(r)
	if err != nil {
		s.writeBadRequest(w, provider, err.Error())
		return ec, nil, false
	}
	if !sf.scopeBody(s, w, body, &ec) {
		return ec, nil, false
	}
	return ec, body, true
}

func (s *Server) openAIChat(provider string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ec, body, ok := s.openAIScope(w, r, provider, "ChatCompletions_Create")
		if !ok {
			return
		}
		msgs, _ := body["messages"].([]any)
		if len(msgs) == 0 {
			s.writeBadRequest(w, provider, "'messages' is a required property and must be a non-empty array")
			return
		}
		var maxTokens int64
		for _, k := range []string{"max_completion_tokens", "max_tokens"} {
			if v, present := body[k]; present && v != nil {
				n, ok := num(v)
				if !ok || n < 1 {
					s.writeBadRequest(w, provider, fmt.Sprintf("Invalid '%s': integer below minimum value. Expected a value >= 1.", k))
					return
				}
				maxTokens = n
				break
			}
		}
		stream, _ := body["stream"].(bool)
		includeUsage := false
		if so, ok := body["stream_options"].(map[string]any); ok {
			includeUsage, _ = so["include_usage"].(bool)
		}
		textBytes := stringBytes(body["messages"]) + stringBytes(body["tools"]) + stringBytes(body["functions"]) + stringBytes(body["response_format"])
		n := choicesN(body)
		c := call{
			provider: provider, model: ec.model, input: s.estimateInput(textBytes, int64(len(msgs))),
			maxTokens: maxTokens, choices: n, stream: stream,
		}
		t, rj := s.admit(r, c)
		if rj != nil {
			s.writeRejection(w, ec, rj)
			return
		}
		h := w.Header()
		s.setRateHeaders(h, provider, t.rv)
		surfaceOf(provider).requestIDs(h, t.id)
		a := answerFor(body, ec.model, t.output, t.finish)
		ch := chatCompletion{s: s, t: t, a: a, n: n, id: "chatcmpl-sim" + t.id, model: ec.model, created: t.rv.now.Unix(), includeUsage: includeUsage}
		if stream {
			ch.stream(w, r)
		} else {
			ch.write(w, r)
		}
	}
}

// openAIEmbeddings answers POST /embeddings: one vector per input, each
// derived from its text (embedding), so that the same input always gets
// the same vector; usage counts the input tokens.
func (s *Server) openAIEmbeddings(provider string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ec, body, ok := s.openAIScope(w, r, provider, "Embeddings_Create")
		if !ok {
			return
		}
		inputs, total, ok := embeddingInputs(body["input"])
		if !ok {
			s.writeBadRequest(w, provider, "'input' is a required property (string, array of strings, or token arrays)")
			return
		}
		dims := int64(16)
		if v, ok := num(body["dimensions"]); ok && v > 0 && v <= 4096 {
			dims = v
		}
		b64 := body["encoding_format"] == "base64"
		t, rj := s.admit(r, call{provider: provider, model: ec.model, input: total, embedding: true})
		if rj != nil {
			s.writeRejection(w, ec, rj)
			return
		}
		h := w.Header()
		s.setRateHeaders(h, provider, t.rv)
		h.Set("x-request-id", "req_sim_"+t.id)
		if err := s.sleep(r.Context(), s.cfg.Latency.TimeToFirstToken.D()); err != nil {
			s.finish(t, 0, true)
			return
		}
		data := make([]any, 0, len(inputs))
		for i, in := range inputs {
			data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": embeddingValue(in, int(dims), b64)})
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "list", "data": data, "model": ec.model,
			"usage": map[string]any{"prompt_tokens": total, "total_tokens": total},
		})
		s.finish(t, 0, false)
	}
}

// embeddingInputs reads the input field as OpenAI accepts it: a string, an
// array of strings, one token array or an array of token arrays. It
// returns one entry per embedding to return and the input tokens (a
// text's at four bytes to a token, at least one; a token array's its
// length); ok is false for no input or an element of another type.
func embeddingInputs(input any) (inputs []string, total int64, ok bool) {
	bad := false
	addText := func(x string) {
		inputs = append(inputs, x)
		total += max(1, ceilDiv4(int64(len(x))))
	}
	switch in := input.(type) {
	case string:
		addText(in)
	case []any:
		if len(in) > 0 {
			if _, isNum := in[0].(float64); isNum { // one pre-tokenized input
				inputs, total = []string{fmt.Sprint(in)}, int64(len(in))
				break
			}
		}
		for _, e := range in {
			switch x := e.(type) {
			case string:
				addText(x)
			case []any:
				inputs = append(inputs, fmt.Sprint(x))
				total += int64(len(x))
			default:
				bad = true
			}
		}
	}
	return inputs, total, len(inputs) > 0 && !bad
}

// embeddingValue is one input's vector of dims floats, or with b64 its
// little-endian float32 bytes in base64, as encoding_format "base64"
// asks.
func embeddingValue(in string, dims int, b64 bool) any {
	vec := embedding(in, dims)
	if !b64 {
		return vec
	}
	buf := make([]byte, 4*len(vec))
	for j, f := range vec {
		binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(buf)
}

// embedding is a deterministic unit vector derived from the text.
func embedding(text string, dims int) []float32 {
	h := fnv.New64a()
	h.Write([]byte(text))
	x := h.Sum64()
	v := make([]float32, dims)
	var norm float64
	for i := range v {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		f := float64(x%2000)/1000 - 1
		v[i] = float32(f)
		norm += f * f
	}
	if norm > 0 {
		n := float32(math.Sqrt(norm))
		for i := range v {
			v[i] /= n
		}
	}
	return v
}

func (s *Server) openAIModels(w http.ResponseWriter, r *http.Request) {
	models := s.cfg.Providers[OpenAI].Models
	data := make([]any, 0, len(models))
	created := s.start.Unix()
	for _, m := range models {
		data = append(data, map[string]any{"id": m, "object": "model", "created": created, "owned_by": "system"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// sse writes server-sent events and flushes after each.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (e *sse) raw(s string) error {
	if _, err := e.w.Write([]byte(s)); err != nil {
		return err
	}
	if e.f != nil {
		e.f.Flush()
	}
	return nil
}

func (e *sse) data(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.raw("data: " + string(b) + "\n\n")
}

func (e *sse) event(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.raw("event: " + name + "\ndata: " + string(b) + "\n\n")
}

// openAIDialect is OpenAI's: chat completions, embeddings, the Responses
// API, legacy completions and models under /openai/v1 (and /v1),
// x-ratelimit-* headers with Go-style duration resets, OpenAI's error
// object.
type openAIDialect struct{}

func init() { registerDialect(schemas.ProviderOpenAI, "/openai/v1", openAIDialect{}) }

func (openAIDialect) overloadStatus() int { return http.StatusServiceUnavailable }

func (openAIDialect) promptCache() bool { return false }

// scopeURL: OpenAI's URL names no model.
func (openAIDialect) scopeURL(*Server, http.ResponseWriter, *http.Request, *errCtx) bool { return true }

// scopeBody: the model is the body's, which OpenAI requires.
func (openAIDialect) scopeBody(s *Server, w http.ResponseWriter, body map[string]any, ec *errCtx) bool {
	ec.model, _ = body["model"].(string)
	if ec.model == "" {
		s.writeBadRequest(w, ec.provider, "you must provide a model parameter")
		return false
	}
	return true
}

func (openAIDialect) requestIDs(h http.Header, id string) { h.Set("x-request-id", "req_sim_"+id) }

func (openAIDialect) routes(s *Server, m *http.ServeMux) {
	for _, prefix := range []string{"/openai/v1", "/v1"} {
		m.HandleFunc("POST "+prefix+"/chat/completions", s.openAIChat(OpenAI))
		m.HandleFunc("POST "+prefix+"/embeddings", s.openAIEmbeddings(OpenAI))
		m.HandleFunc("POST "+prefix+"/responses", s.openAIResponses(OpenAI))
		m.HandleFunc("POST "+prefix+"/completions", s.openAICompletions(OpenAI))
		m.HandleFunc("GET "+prefix+"/models", s.openAIModels)
	}
}

func (openAIDialect) rateHeaders(h http.Header, rv rateView) {
	if v := rv.req; v != nil {
		h.Set("x-ratelimit-limit-requests", itoa(v.limit))
		h.Set("x-ratelimit-remaining-requests", itoa(v.remaining))
		h.Set("x-ratelimit-reset-requests", openAIDuration(v.reset))
	}
	if v := rv.tok; v != nil {
		h.Set("x-ratelimit-limit-tokens", itoa(v.limit))
		h.Set("x-ratelimit-remaining-tokens", itoa(v.remaining))
		h.Set("x-ratelimit-reset-tokens", openAIDuration(v.reset))
	}
}

func (openAIDialect) retryAfter(h http.Header, wait time.Duration) {
	h.Set("retry-after", retryAfterSeconds(wait))
}

func (openAIDialect) rejection(_ *Server, w http.ResponseWriter, ec errCtx, rj *rejection, overload bool) {
	if overload {
		writeJSON(w, rj.status, openAIError(rj.echoed("The server is overloaded or not ready yet."), "server_error", nil))
		return
	}
	msg, typ := openAILimitMessage(ec.model, rj)
	code := "rate_limit_exceeded"
	writeJSON(w, rj.status, openAIError(rj.echoed(msg), typ, &code))
}

func (openAIDialect) badRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, openAIError(msg, "invalid_request_error", nil))
}

// azureDialect is Azure OpenAI's: OpenAI's endpoints under
// /azure/openai/deployments/{deployment} (the Responses API on the v1
// surface), remaining-only rate-limit headers, retry-after-ms, and Azure's
// error object.
type azureDialect struct{ openAIDialect }

func init() { registerDialect(schemas.ProviderAzure, "/azure", azureDialect{}) }

// scopeURL: the api-version query parameter, without which Azure answers
// 404, and the model is the deployment of the path.
func (azureDialect) scopeURL(s *Server, w http.ResponseWriter, r *http.Request, ec *errCtx) bool {
	ec.apiVer = r.URL.Query().Get("api-version")
	if ec.apiVer == "" {
		s.badRequest(ec.provider)
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"code": "404", "message": "Resource not found"}})
		return false
	}
	ec.model = r.PathValue("deployment")
	return true
}

// scopeBody: the body's model, if any, is not the deployment's.
func (azureDialect) scopeBody(*Server, http.ResponseWriter, map[string]any, *errCtx) bool {
	return true
}

// requestIDs: Azure's API Management id beside OpenAI's.
func (d azureDialect) requestIDs(h http.Header, id string) {
	d.openAIDialect.requestIDs(h, id)
	h.Set("apim-request-id", "sim-"+id)
}

func (azureDialect) routes(s *Server, m *http.ServeMux) {
	m.HandleFunc("POST /azure/openai/deployments/{deployment}/chat/completions", s.openAIChat(Azure))
	m.HandleFunc("POST /azure/openai/deployments/{deployment}/embeddings", s.openAIEmbeddings(Azure))
	m.HandleFunc("POST /azure/openai/deployments/{deployment}/completions", s.openAICompletions(Azure))
	m.HandleFunc("POST /azure/openai/v1/responses", s.openAIResponses(Azure))
}

func (azureDialect) rateHeaders(h http.Header, rv rateView) {
	if v := rv.req; v != nil {
		h.Set("x-ratelimit-remaining-requests", itoa(v.remaining))
	}
	if v := rv.tok; v != nil {
		h.Set("x-ratelimit-remaining-tokens", itoa(v.remaining))
	}
}

func (azureDialect) retryAfter(h http.Header, wait time.Duration) {
	h.Set("retry-after", retryAfterSeconds(wait))
	h.Set("retry-after-ms", retryAfterMillis(wait))
}

func (azureDialect) rejection(_ *Server, w http.ResponseWriter, ec errCtx, rj *rejection, overload bool) {
	if overload {
		writeJSON(w, rj.status, map[string]any{"error": map[string]any{
			"code": strconv.Itoa(rj.status), "message": rj.echoed("The server is currently overloaded. Please try again later."),
		}})
		return
	}
	kind := "call"
	if rj.deny != nil && rj.deny.dim != DimRequests && rj.deny.dim != DimDaily && rj.deny.dim != DimAcceleration {
		kind = "token"
	}
	msg := fmt.Sprintf("Requests to the %s Operation under Azure OpenAI API version %s have exceeded %s rate limit of your current OpenAI S0 pricing tier. Please retry after %s seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.",
		ec.operation, ec.apiVer, kind, retryAfterSeconds(rj.wait))
	writeJSON(w, rj.status, map[string]any{"error": map[string]any{"code": "429", "message": rj.echoed(msg)}})
}
