package provider

import (
	"net/http"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/schemas"
)

// adapter is everything one provider kind does differently: which APIs it
// answers and how, the request of an attempt, and the reading of what comes
// back (rate-limit headers, usage, the answer and the stream). The exported
// functions of the package (API.Serves, Unsupported, NewRequest,
// ParseRateLimitHeaders, ParseUsage, Exchange.Answer, Exchange.NewStream,
// StreamUsage.Feed) look the kind's adapter up in adapters and hold no
// branch on the kind themselves, so that a provider is added as one file
// that registers its adapter (README.md, "Adding a provider").
//
// Every method takes and returns values, not pointers into the caller's
// frame, so that calling through the interface allocates nothing more than
// the switch on the kind it replaced; the one pointer, *Parsed, is the
// request's, made once (the gateway's call holds it).
type adapter interface {
	// serves: the kind answers API a; translated: by translation of the
	// client's body rather than with it (translated implies serves).
	serves(a API) bool
	translated(a API) bool
	// notServed is the client's error text when !serves(a) (kind: the
	// provider's, which adapters share).
	notServed(kind Kind, a API) string
	// fields are the provider fields build and headers read beyond every
	// kind's, which the configuration then requires or fills
	// (config.RegisterKind).
	fields() config.KindFields
	// untranslatable says what of the request a translation does not carry
	// ("" = nothing); it is asked only when translated(p.API).
	untranslatable(p *Parsed) string

	// countedAs is the request as the provider counts it, when that is
	// not the client's (ok false: the client's, or it does not translate).
	countedAs(p *Parsed, upstreamModel string, defaultMax int64) (req estimate.Request, ok bool)

	// build is the URL and body of an attempt (a.Parsed is set: what a
	// translation takes of the body is kept there); base is the
	// provider's base_url without its trailing slash.
	build(p *config.Provider, a Attempt, base string) (built, error)
	// headers are the credential and other headers of an attempt besides
	// Content-Type and Accept (a zero header is not set).
	headers(p *config.Provider, a Attempt) [3]header

	// rateLimits reads a response's rate-limit headers (see
	// ParseRateLimitHeaders).
	rateLimits(h http.Header, now time.Time) []schemas.Observation
	// usage reads a non-streaming body whose first byte is '{' (see
	// ParseUsage).
	usage(body []byte) (Usage, bool)
	// feed gives one SSE event, its data trimmed, to a stream's usage.
	feed(s *StreamUsage, event, data []byte)
	// answer translates a 2xx non-streaming body for the client (ok false:
	// the body goes as it came).
	answer(x Exchange, body []byte, model, id string) (b []byte, ok bool)
	// translator is the translation of a 2xx stream for the client (nil:
	// passthrough); u is the stream's usage, fed before each event.
	translator(x Exchange, model, id string, includeUsage bool, u *StreamUsage) streamTranslator
}

// built is an attempt's request as an adapter builds it.
type built struct {
	url  string
	body []byte
	// forcedUsage, jsonTool: see Exchange.
	forcedUsage, jsonTool bool
}

// header is one request header, its key canonical ("" = none).
type header struct{ key, value string }

// streamTranslator turns a provider's stream into the client's.
type streamTranslator interface {
	// translate is what the client gets of one event (nil: nothing).
	translate(event, data []byte) []byte
	// tail is what the client gets after a stream that ended cleanly.
	tail() []byte
}

// adapters holds the adapter of every provider kind. Each adapter's file
// registers it (register, from an init), so that adding a provider is its
// kind in schemas.ProviderKinds and one new file; TestAdaptersCoverEveryKind
// checks that every kind has one.
var adapters = map[Kind]adapter{}

// register makes a the adapter of kinds. A kind registered twice, or one
// the configuration does not admit (not in schemas.ProviderKinds), is a
// programming error and panics at start.
func register(a adapter, kinds ...Kind) {
	for _, k := range kinds {
		if !slices.Contains(schemas.ProviderKinds, k) {
			panic("provider: adapter registered for kind " + string(k) + ", which is not in schemas.ProviderKinds")
		}
		if _, dup := adapters[k]; dup {
			panic("provider: two adapters registered for kind " + string(k))
		}
		adapters[k] = a
		config.RegisterKind(k, a.fields())
	}
}

// adapterOf is the adapter of kind. The configuration admits only the
// kinds of schemas.ProviderKinds; any other (the zero Exchange's "") is
// spoken like OpenAI.
func adapterOf(kind Kind) adapter {
	if a, ok := adapters[kind]; ok {
		return a
	}
	return openAI{}
}
