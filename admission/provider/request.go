package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/internal/jsonscan"
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

// Serves reports whether a provider of kind can answer this API: OpenAI-shaped
// requests (chat, embeddings, responses, completions) go to OpenAI, Azure
// and OpenAI-compatible providers, and chat also to Gemini and Anthropic,
// translated, and responses to Anthropic, translated; Anthropic messages
// only to Anthropic. Other bodies are passed through, so no other
// translation is attempted.
func (a API) Serves(kind schemas.ProviderKind) bool { return adapterOf(kind).serves(a) }

// Translated reports whether API a reaches a provider of kind by
// translation (chat completions to Gemini or Anthropic, the Responses API
// to Anthropic) rather than with the client's body.
func (a API) Translated(kind schemas.ProviderKind) bool { return adapterOf(kind).translated(a) }

// Attempt is what one upstream attempt is built from.
type Attempt struct {
	API API
	// Request is the client's request as parsed, Body as it was sent.
	Request estimate.Request
	Body    []byte
	// Parsed, when set, is the request the attempt is of, in place of
	// API, Request and Body: what a translation took of the body is kept
	// there for the request's other attempts and candidates (see Parsed).
	Parsed *Parsed
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
	if a.Parsed != nil {
		a.API, a.Request, a.Body = a.Parsed.API, a.Parsed.Request, a.Parsed.Body
	} else {
		a.Parsed = &Parsed{API: a.API, Request: a.Request, Body: a.Body}
	}
	ad := adapterOf(p.Kind)
	x = Exchange{Kind: p.Kind, API: a.API}
	b, err := ad.build(p, a, strings.TrimRight(p.BaseURL, "/"))
	if err != nil {
		return nil, x, err
	}
	x.ForcedUsage, x.jsonTool = b.forcedUsage, b.jsonTool
	up, err = http.NewRequestWithContext(ctx, http.MethodPost, b.url, bytes.NewReader(b.body))
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
	if a.Request.Stream {
		set("Accept", "text/event-stream")
	}
	for _, h := range ad.headers(p, a) {
		if h.key != "" {
			set(h.key, h.value)
		}
	}
	return up, x, nil
}

// passthroughBody is the request of an attempt that sends the client's
// body to u: only its model replaced by model when it differs and, for a
// chat or legacy completions stream whose client did not ask for
// stream_options.include_usage, that option set (forcedUsage; the
// Responses API always reports a stream's usage, in response.completed).
func passthroughBody(u string, a Attempt, model string) (built, error) {
	b := built{url: u, body: a.Body}
	set := map[string]any{}
	if model != a.Request.Model {
		set["model"] = model
	}
	if (a.API == APIChat || a.API == APICompletions) && a.Request.Stream && !a.Request.IncludeUsage {
		b.forcedUsage = true
		set["stream_options"] = streamOptionsWithUsage(a.Body, a.Request.Members)
	}
	if len(set) > 0 {
		body, err := setFields(a.Body, a.Request.Members, set)
		if err != nil {
			return built{}, err
		}
		b.body = body
	}
	return b, nil
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
// proved body is an object; members, when the parser kept them
// (estimate.Request.Members), are its top-level members, and the object
// is rebuilt from them instead of decoding body again, to the same map
// (the last of a repeated key wins) and so the same bytes.
func setFields(body []byte, members []estimate.Member, set map[string]any) ([]byte, error) {
	var m map[string]json.RawMessage
	if members != nil {
		m = make(map[string]json.RawMessage, len(members)+len(set))
		for _, mb := range members {
			m[string(mb.Key)] = mb.Value
		}
	} else if err := json.Unmarshal(body, &m); err != nil {
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
// include_usage set, keeping any other option the client gave. From
// members (estimate.Request.Members), when the parser kept them, it
// decodes only the stream_options members, matched and merged as
// decoding the body into the struct would: the key folding ASCII case, a
// repeated member's keys added to the map the one before left, null
// emptying it.
func streamOptionsWithUsage(body []byte, members []estimate.Member) map[string]json.RawMessage {
	var top struct {
		StreamOptions map[string]json.RawMessage `json:"stream_options"`
	}
	if members != nil {
		for _, mb := range members {
			if match, _ := jsonscan.KeyIs(mb.Key, false, "stream_options"); match {
				_ = json.Unmarshal(mb.Value, &top.StreamOptions)
			}
		}
	} else {
		_ = json.Unmarshal(body, &top)
	}
	if top.StreamOptions == nil {
		top.StreamOptions = map[string]json.RawMessage{}
	}
	top.StreamOptions["include_usage"] = json.RawMessage("true")
	return top.StreamOptions
}
