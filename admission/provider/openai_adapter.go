package provider

import (
	"net/http"
	"net/url"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/schemas"
)

// openAI is the adapter of OpenAI and of OpenAI-compatible providers: every
// OpenAI-shaped API, passed through with the client's body
// (passthroughBody), a bearer credential, x-ratelimit-* headers, usage and
// streams read as OpenAI writes them.
type openAI struct{}

func init() { register(openAI{}, schemas.ProviderOpenAI, schemas.ProviderOpenAICompatible) }

func (openAI) serves(a API) bool             { return a != APIMessages }
func (openAI) translated(API) bool           { return false }
func (openAI) untranslatable(*Parsed) string { return "" }

func (openAI) fields() config.KindFields { return config.KindFields{} }

func (openAI) notServed(kind Kind, a API) string {
	return "a provider of kind " + string(kind) + " does not speak " + a.Path()
}

func (openAI) countedAs(*Parsed, string, int64) (estimate.Request, bool) {
	return estimate.Request{}, false
}

func (openAI) build(p *config.Provider, a Attempt, base string) (built, error) {
	return passthroughBody(base+openAIOp(a.API), a, a.UpstreamModel)
}

func (openAI) headers(p *config.Provider, a Attempt) [3]header {
	if p.APIKey() == "" {
		return [3]header{}
	}
	return [3]header{{"Authorization", p.BearerAuth()}} // "Bearer " + key, built once
}

func (openAI) rateLimits(h http.Header, now time.Time) []schemas.Observation {
	return parseRateLimits(openAIRateLimitKeys, h, now, durationReset)
}

func (openAI) usage(body []byte) (Usage, bool) {
	u, ok := usageField[openAIUsage](body, "usage")
	if !ok || u == nil {
		return Usage{}, false
	}
	return u.normalise()
}

func (openAI) feed(s *StreamUsage, event, data []byte) {
	if isResponsesEvent(event, data) {
		s.feedResponses(data)
		return
	}
	s.feedOpenAI(data)
}

func (openAI) answer(Exchange, []byte, string, string) ([]byte, bool) { return nil, false }

func (openAI) translator(Exchange, string, string, bool, *StreamUsage) streamTranslator { return nil }

// azure is the adapter of Azure OpenAI: OpenAI's, but for the URL (the
// deployment in the path and the api-version in the query; the Responses
// API on the v1 surface, with the deployment as the body's model) and the
// api-key credential.
type azure struct{ openAI }

func init() { register(azure{}, schemas.ProviderAzure) }

// fields: the deployment and api-version of build's URL.
func (azure) fields() config.KindFields {
	return config.KindFields{APIVersion: true, Deployment: true}
}

func (azure) build(p *config.Provider, a Attempt, base string) (built, error) {
	if a.API == APIResponses {
		// Azure serves the Responses API only on its v1 surface, with the
		// deployment in the body's model (no deployment in the path).
		model := a.UpstreamModel
		if p.Deployment != "" {
			model = p.Deployment
		}
		return passthroughBody(base+"/openai/v1/responses", a, model)
	}
	u := base + "/openai/deployments/" + url.PathEscape(p.Deployment) + openAIOp(a.API) + "?api-version=" + url.QueryEscape(p.APIVersion)
	return passthroughBody(u, a, a.UpstreamModel)
}

func (azure) headers(p *config.Provider, a Attempt) [3]header {
	key := p.APIKey()
	if key == "" {
		return [3]header{}
	}
	return [3]header{{"Api-Key", key}}
}

// durationReset reads an OpenAI-style reset (a Go-style duration; bare
// numbers are seconds).
func durationReset(s string, _ time.Time) (int64, bool) { return ParseDurationMs(s) }
