package sim

import (
	"net/http"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// Provider styles served by the simulator: the provider kinds of the
// gateway (schemas.ProviderKinds) that it has a dialect of
// (openai_compatible is OpenAI's). They are also the keys of
// Config.Providers, the "provider" label of metrics and the keys of
// /sim/stats.
const (
	OpenAI    = string(schemas.ProviderOpenAI)
	Azure     = string(schemas.ProviderAzure)
	Anthropic = string(schemas.ProviderAnthropic)
	Gemini    = string(schemas.ProviderGemini)
)

// dialect is everything the simulator says differently for one provider
// kind: the endpoints it serves, its rate-limit and retry headers, and its
// refusal and bad-request bodies. The limits, storms, token counts and
// answers around them are shared. A provider is added to the simulator as
// one dialect (in the file of its handlers) and one line of dialects.
type dialect interface {
	// routes registers the provider's endpoints on m.
	routes(s *Server, m *http.ServeMux)
	// rateHeaders sets the rate-limit headers of rv (on a success, or a
	// 429 with headers).
	rateHeaders(h http.Header, rv rateView)
	// retryAfter sets the wait headers of a refusal.
	retryAfter(h http.Header, wait time.Duration)
	// rejection writes a 429 or 503 body (overload: the refusal is an
	// overload, not a rate limit).
	rejection(s *Server, w http.ResponseWriter, ec errCtx, rj *rejection, overload bool)
	// badRequest writes a 400 body.
	badRequest(w http.ResponseWriter, msg string)
}

// dialects registers the dialect of every provider style, in the order
// the simulator lists them, with base, where it serves the provider's API:
// the path of a gateway provider's base_url after the simulator's URL
// (BasePath).
var dialects = []struct {
	name, base string
	dialect
}{
	{OpenAI, "/openai/v1", openAIDialect{}},
	{Azure, "/azure", azureDialect{}},
	{Anthropic, "/anthropic/v1", anthropicDialect{}},
	{Gemini, "/gemini/v1beta", geminiDialect{}},
}

// BasePath is where the simulator serves the API of provider kind: the
// path of a gateway provider's base_url after the simulator's URL
// (openai_compatible: OpenAI's). ok false: the simulator does not speak
// it (TestBasePathOfEveryKind).
func BasePath(kind schemas.ProviderKind) (path string, ok bool) {
	if kind == schemas.ProviderOpenAICompatible {
		kind = schemas.ProviderOpenAI
	}
	for _, d := range dialects {
		if d.name == string(kind) {
			return d.base, true
		}
	}
	return "", false
}

// providerNames are the names of dialects, in order.
var providerNames = func() []string {
	out := make([]string, len(dialects))
	for i, d := range dialects {
		out[i] = d.name
	}
	return out
}()

// dialectOf is the dialect of provider (nil: the simulator does not speak
// it; the configuration admits only those it speaks).
func dialectOf(provider string) dialect {
	for _, d := range dialects {
		if d.name == provider {
			return d.dialect
		}
	}
	return nil
}

// knownProvider reports whether the simulator speaks provider.
func knownProvider(provider string) bool { return dialectOf(provider) != nil }

// providerList is "a, b, c or d" of the provider names.
func providerList() string {
	n := len(providerNames)
	return strings.Join(providerNames[:n-1], ", ") + " or " + providerNames[n-1]
}
