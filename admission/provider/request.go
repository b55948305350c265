package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/schemas"
)

// API is the client-facing shape of a request.
type API int

// APIs the gateway serves.
const (
	APIChat        API = iota // POST /v1/chat/completions (OpenAI)
	APIEmbeddings             // POST /v1/embeddings (OpenAI)
	APIMessages               // POST /v1/messages (Anthropic)
	APIResponses              // POST /v1/responses (OpenAI Responses API)
	APICompletions            // POST /v1/completions (OpenAI legacy completions)
)

func (a API) String() string {
	switch a {
	case APIChat:
		return "chat"
	case APIEmbeddings:
		return "embeddings"
	case APIResponses:
		return "responses"
	case APICompletions:
		return "completions"
	}
	return "messages"
}

// Path is the API's client-facing path.
func (a API) Path() string {
	switch a {
	case APIChat:
		return "/v1/chat/completions"
	case APIEmbeddings:
		return "/v1/embeddings"
	case APIResponses:
		return "/v1/responses"
	case APICompletions:
		return "/v1/completions"
	}
	return "/v1/messages"
}

// Serves reports whether a provider kind can answer this API: OpenAI-shaped
// requests (chat, embeddings, responses, completions) go to OpenAI, Azure
// and OpenAI-compatible providers, and chat also to Gemini and Anthropic,
// translated; Anthropic messages only to Anthropic. Other bodies are
// passed through, so no other translation is attempted.
func (a API) Serves(kind schemas.ProviderKind) bool {
	switch a {
	case APIChat:
		return true
	case APIResponses:
		return kind != schemas.ProviderGemini
	case APIEmbeddings, APICompletions:
		return kind == schemas.ProviderOpenAI || kind == schemas.ProviderAzure || kind == schemas.ProviderOpenAICompatible
	}
	return kind == schemas.ProviderAnthropic
}

// Translated reports whether API a reaches a provider of kind by
// translation (chat completions to Gemini or Anthropic, the Responses API
// to Anthropic) rather than with the client's body.
func (a API) Translated(kind schemas.ProviderKind) bool {
	switch kind {
	case schemas.ProviderGemini:
		return a == APIChat
	case schemas.ProviderAnthropic:
		return a == APIChat || a == APIResponses
	}
	return false
}

// CanServe reports whether a provider of kind can answer req (sent as
// body) to API a: it speaks the API and, for Gemini and Anthropic behind
// chat completions, the request translates.
func CanServe(a API, kind schemas.ProviderKind, req estimate.Request, body []byte) bool {
	return Unsupported(a, kind, req, body) == ""
}

// Unsupported says what keeps a provider of kind from answering req (sent
// as body) to API a ("" = nothing): the API itself, or for Gemini and
// Anthropic each part of the request that does not translate. It is the
// text of the client's unsupported_api error, so it names the fields.
func Unsupported(a API, kind schemas.ProviderKind, req estimate.Request, body []byte) string {
	if !a.Serves(kind) {
		switch kind {
		case schemas.ProviderGemini:
			return "a gemini provider is reached only through POST /v1/chat/completions (translated to generateContent); " + a.Path() + " is not translated"
		case schemas.ProviderAnthropic:
			return "an anthropic provider is reached through POST /v1/messages, or POST /v1/chat/completions and POST /v1/responses (translated to Messages); " + a.Path() + " is not translated"
		}
		return "a provider of kind " + string(kind) + " does not speak " + a.Path()
	}
	if !a.Translated(kind) {
		return ""
	}
	if kind == schemas.ProviderGemini {
		if why := GeminiUntranslatable(req); len(why) > 0 {
			return "the translation to Gemini generateContent does not support " + strings.Join(why, "; ")
		}
		return ""
	}
	why := ClaudeUntranslatable(body)
	if a == APIResponses {
		why = ClaudeResponsesUntranslatable(body)
	}
	if len(why) > 0 {
		return "the translation to Anthropic Messages does not support " + strings.Join(why, "; ")
	}
	return ""
}

// Attempt is what one upstream attempt is built from.
type Attempt struct {
	API API
	// Request is the client's request as parsed, Body as it was sent.
	Request estimate.Request
	Body    []byte
	// UpstreamModel is the candidate's model name at the provider.
	UpstreamModel string
	// AnthropicBeta is the client's anthropic-beta header, forwarded to
	// Anthropic providers ("" = none).
	AnthropicBeta string
	// DefaultMaxTokens is the route's default output reservation
	// (default_max_output_tokens), the max_tokens a chat completion
	// translated to Anthropic Messages is sent with when the client set
	// none (0: 4096; see ClaudeMaxTokens).
	DefaultMaxTokens int64
}

// NewRequest builds the provider request for one attempt: the provider's
// URL and authentication, and the client's body with only the model
// replaced (and, for OpenAI-style streams, usage reporting forced on so
// that the reconcile is exact: Exchange.ForcedUsage, see Stream). Gemini,
// and Anthropic behind chat completions, receive a translated body. The
// Exchange reads what comes back. An error never holds the credential or
// the URL.
func NewRequest(ctx context.Context, p *config.Provider, a Attempt) (up *http.Request, x Exchange, err error) {
	base := strings.TrimRight(p.BaseURL, "/")
	body := a.Body
	req := a.Request
	x = Exchange{Kind: p.Kind, API: a.API}
	var u string
	switch {
	case p.Kind == schemas.ProviderGemini:
		b, err := geminiRequest(req, body)
		if err != nil {
			return nil, x, err
		}
		body = b
		method := ":generateContent"
		if req.Stream {
			method = ":streamGenerateContent?alt=sse"
		}
		u = base + "/models/" + url.PathEscape(a.UpstreamModel) + method
	case p.Kind == schemas.ProviderAnthropic && a.API.Translated(p.Kind):
		translate := claudeRequestBody
		if a.API == APIResponses {
			translate = claudeResponsesBody
		}
		b, jsonTool, err := translate(body, a.UpstreamModel, a.DefaultMaxTokens)
		if err != nil {
			return nil, x, err
		}
		body, x.jsonTool = b, jsonTool
		u = base + "/messages"
	case p.Kind == schemas.ProviderAnthropic:
		u = base + "/messages"
	case p.Kind == schemas.ProviderAzure && a.API == APIResponses:
		// Azure serves the Responses API only on its v1 surface, with the
		// deployment in the body's model (no deployment in the path).
		u = base + "/openai/v1/responses"
	case p.Kind == schemas.ProviderAzure:
		u = base + "/openai/deployments/" + url.PathEscape(p.Deployment) + openAIOp(a.API) + "?api-version=" + url.QueryEscape(p.APIVersion)
	default:
		u = base + openAIOp(a.API)
	}
	if !a.API.Translated(p.Kind) {
		set := map[string]any{}
		model := a.UpstreamModel
		if p.Kind == schemas.ProviderAzure && a.API == APIResponses && p.Deployment != "" {
			model = p.Deployment
		}
		if model != req.Model {
			set["model"] = model
		}
		// Chat and legacy completions report a stream's usage only when
		// asked; the Responses API always does (response.completed).
		if (a.API == APIChat || a.API == APICompletions) && req.Stream && !req.IncludeUsage {
			x.ForcedUsage = true
			set["stream_options"] = streamOptionsWithUsage(body)
		}
		if len(set) > 0 {
			b, err := setFields(body, set)
			if err != nil {
				return nil, x, err
			}
			body = b
		}
	}
	up, err = http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		// The URL holds no credential (keys travel in headers), but name
		// the provider rather than echo it anyway.
		return nil, x, fmt.Errorf("build request for provider %s: invalid base_url", p.Name)
	}
	// The values share one backing array (one allocation, not one per
	// header); the keys are canonical, so they are stored as Set would
	// store them (TestNewRequest checks).
	vals := make([]string, 0, 5)
	set := func(k, v string) {
		vals = append(vals, v)
		n := len(vals)
		up.Header[k] = vals[n-1 : n : n]
	}
	set("Content-Type", "application/json")
	if req.Stream {
		set("Accept", "text/event-stream")
	}
	key := p.APIKey()
	switch p.Kind {
	case schemas.ProviderAzure:
		if key != "" {
			set("Api-Key", key)
		}
	case schemas.ProviderAnthropic:
		if key != "" {
			set("X-Api-Key", key)
		}
		set("Anthropic-Version", p.APIVersion)
		if a.AnthropicBeta != "" {
			set("Anthropic-Beta", a.AnthropicBeta)
		}
	case schemas.ProviderGemini:
		if key != "" {
			set("X-Goog-Api-Key", key)
		}
	default:
		if key != "" {
			set("Authorization", p.BearerAuth()) // "Bearer " + key, built once
		}
	}
	return up, x, nil
}

// openAIOp is the path of API a under an OpenAI-style base URL.
func openAIOp(a API) string {
	switch a {
	case APIEmbeddings:
		return "/embeddings"
	case APIResponses:
		return "/responses"
	case APICompletions:
		return "/completions"
	}
	return "/chat/completions"
}

// setFields replaces top-level fields of a JSON object. The parsers already
// proved body is an object.
func setFields(body []byte, set map[string]any) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("rewrite request body: %w", err)
	}
	for k, v := range set {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("rewrite request body field %s: %w", k, err)
		}
		m[k] = b
	}
	return json.Marshal(m)
}

// streamOptionsWithUsage returns the request's stream_options with
// include_usage set, keeping any other option the client gave.
func streamOptionsWithUsage(body []byte) map[string]json.RawMessage {
	var top struct {
		StreamOptions map[string]json.RawMessage `json:"stream_options"`
	}
	_ = json.Unmarshal(body, &top)
	if top.StreamOptions == nil {
		top.StreamOptions = map[string]json.RawMessage{}
	}
	top.StreamOptions["include_usage"] = json.RawMessage("true")
	return top.StreamOptions
}
