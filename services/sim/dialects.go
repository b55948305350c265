package sim

import (
	"net/http"
	"slices"
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
// one dialect in the file of its handlers, which registers it
// (registerDialect).
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
	// overloadStatus is the status of a bare overload (an overloaded
	// storm, DialectOverloaded).
	overloadStatus() int
	// promptCache: the provider's handlers simulate a prompt cache (call
	// cacheKey), whose reads ProviderConfig.CountCacheReads counts or not.
	promptCache() bool
}

// dialects holds the dialect of every provider style, in the order of
// schemas.ProviderKinds (the order the simulator lists them), with base,
// where it serves the provider's API: the path of a gateway provider's
// base_url after the simulator's URL (BasePath). Each dialect's file
// registers it (registerDialect, from an init).
var dialects []namedDialect

// namedDialect is a dialect with its provider name and base path.
type namedDialect struct {
	name, base string
	dialect
}

// providerNames are the names of dialects, in order.
var providerNames []string

// registerDialect makes d the dialect of kind, served under base. A kind
// registered twice, or one the gateway does not admit (not in
// schemas.ProviderKinds), is a programming error and panics at start.
func registerDialect(kind schemas.ProviderKind, base string, d dialect) {
	if !slices.Contains(schemas.ProviderKinds, kind) {
		panic("sim: dialect registered for kind " + string(kind) + ", which is not in schemas.ProviderKinds")
	}
	if dialectOf(string(kind)) != nil {
		panic("sim: two dialects registered for kind " + string(kind))
	}
	dialects = append(dialects, namedDialect{string(kind), base, d})
	slices.SortStableFunc(dialects, func(x, y namedDialect) int {
		return slices.Index(schemas.ProviderKinds, schemas.ProviderKind(x.name)) - slices.Index(schemas.ProviderKinds, schemas.ProviderKind(y.name))
	})
	providerNames = providerNames[:0]
	for _, d := range dialects {
		providerNames = append(providerNames, d.name)
	}
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

// ExcludesCacheReads reports whether the simulator's provider, configured
// as pc, leaves prompt-cache reads out of the input it counts against its
// limits: it simulates a prompt cache and pc does not count its reads.
// The load test configures its buckets the same way.
func ExcludesCacheReads(provider string, pc ProviderConfig) bool {
	d := dialectOf(provider)
	return d != nil && d.promptCache() && !pc.CountCacheReads
}

// knownProvider reports whether the simulator speaks provider.
func knownProvider(provider string) bool { return dialectOf(provider) != nil }

// providerList is "a, b, c or d" of the provider names.
func providerList() string {
	n := len(providerNames)
	return strings.Join(providerNames[:n-1], ", ") + " or " + providerNames[n-1]
}
