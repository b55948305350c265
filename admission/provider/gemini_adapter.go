package provider

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/schemas"
)

// gemini is the adapter of Gemini: chat completions only, translated to
// generateContent (gemini.go) and the answer and stream back to
// chat.completion; the x-goog-api-key credential, no rate-limit headers,
// usageMetadata.
type gemini struct{}

func init() { register(gemini{}, schemas.ProviderGemini) }

func (gemini) fields() config.KindFields { return config.KindFields{} }

func (gemini) serves(a API) bool     { return a == APIChat }
func (gemini) translated(a API) bool { return a == APIChat }

func (gemini) notServed(_ Kind, a API) string {
	return "a gemini provider is reached only through POST /v1/chat/completions (translated to generateContent); " + a.Path() + " is not translated"
}

func (gemini) untranslatable(p *Parsed) string {
	if why := GeminiUntranslatable(p.Request); len(why) > 0 {
		return "the translation to Gemini generateContent does not support " + strings.Join(why, "; ")
	}
	return ""
}

// countedAs: a Gemini candidate is estimated on the client's chat request.
func (gemini) countedAs(*Parsed, string, int64) (estimate.Request, bool) {
	return estimate.Request{}, false
}

func (gemini) build(p *config.Provider, a Attempt, base string) (built, error) {
	b, err := geminiRequest(a.Request, a.Body)
	if err != nil {
		return built{}, err
	}
	method := ":generateContent"
	if a.Request.Stream {
		method = ":streamGenerateContent?alt=sse"
	}
	return built{url: base + "/models/" + url.PathEscape(a.UpstreamModel) + method, body: b}, nil
}

func (gemini) headers(p *config.Provider, a Attempt) [3]header {
	key := p.APIKey()
	if key == "" {
		return [3]header{}
	}
	return [3]header{{"X-Goog-Api-Key", key}}
}

// rateLimits: Gemini documents no rate-limit headers.
func (gemini) rateLimits(http.Header, time.Time) []schemas.Observation { return nil }

func (gemini) usage(body []byte) (Usage, bool) {
	u, ok := usageField[geminiUsage](body, "usageMetadata")
	if !ok || u == nil {
		return Usage{}, false
	}
	return u.normalise(), true
}

func (gemini) feed(s *StreamUsage, _, data []byte) { s.feedGemini(data) }

func (gemini) answer(_ Exchange, body []byte, model, id string) ([]byte, bool) {
	b, err := GeminiToOpenAI(body, model, id)
	return b, err == nil
}

func (gemini) translator(_ Exchange, model, id string, includeUsage bool, _ *StreamUsage) streamTranslator {
	return NewGeminiStream(model, "chatcmpl-"+id, includeUsage)
}
