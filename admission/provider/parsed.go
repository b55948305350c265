package provider

import (
	"encoding/json"

	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/internal/jsonscan"
	"github.com/sluice-dev/sluice/schemas"
)

// Parsed is one client request as the gateway holds it for its candidates
// and attempts: the API it came to, its body as sent and as the estimator
// parsed it, and what a translation took of the body, kept on first use.
// The gateway asks of every candidate whether it can serve the request
// (CanServe, Unsupported), how its provider counts it (CountedAs), and of
// every attempt its upstream request (NewRequest with Attempt.Parsed); each
// used to decode the body again. Through one Parsed, the translation to
// Anthropic reads the chat body's members that the estimator's scan kept
// (estimate.Request.Members) and runs once per request, whatever the
// number of candidates and attempts; Gemini's builds from the estimator's
// request and those members. A Parsed belongs to one request: it is not
// safe for concurrent use.
type Parsed struct {
	API     API
	Request estimate.Request // parsed from Body, or zero
	Body    []byte

	// claude is the translation to Anthropic Messages, nil until one is
	// asked for; claudeLast the last body made of it (claudeBody).
	claude     *claudeTranslation
	claudeLast claudeBody
}

// claudeBody is a Messages body of the translation, for one model and
// default output.
type claudeBody struct {
	model    string
	max      int64
	body     []byte
	jsonTool bool
}

// CanServe reports whether a provider of kind can answer the request: it
// speaks the API and, for Gemini and Anthropic behind chat completions,
// the request translates.
func (p *Parsed) CanServe(kind schemas.ProviderKind) bool { return p.Unsupported(kind) == "" }

// Unsupported says what keeps a provider of kind from answering the
// request ("" = nothing): the API itself, or for Gemini and Anthropic
// each part of the request that does not translate. It is the text of
// the client's unsupported_api error, so it names the fields.
func (p *Parsed) Unsupported(kind schemas.ProviderKind) string {
	ad := adapterOf(kind)
	switch {
	case !ad.serves(p.API):
		return ad.notServed(kind, p.API)
	case !ad.translated(p.API):
		return ""
	}
	return ad.untranslatable(p)
}

// CountedAs is the request as a provider of kind serving upstreamModel
// counts it, when that is not the client's API (ok false: as the
// client's): a chat completion or a Responses request to Anthropic is the
// Messages request it is translated to, whose max_tokens is the route's
// default output defaultMax when the client set none (see
// ClaudeMaxTokens). The gateway estimates such a candidate on it.
func (p *Parsed) CountedAs(kind Kind, upstreamModel string, defaultMax int64) (estimate.Request, bool) {
	return adapterOf(kind).countedAs(p, upstreamModel, defaultMax)
}

// claudeMessages is the Messages body for upstreamModel and defaultMax
// (see claudeTranslation.body). The candidate's estimate and its attempt
// ask for the same one, so the last is kept, and its bytes are only read
// (the estimator's parse, the upstream request's body).
func (p *Parsed) claudeMessages(upstreamModel string, defaultMax int64) ([]byte, bool, error) {
	if l := p.claudeLast; l.body != nil && l.model == upstreamModel && l.max == defaultMax {
		return l.body, l.jsonTool, nil
	}
	b, jsonTool, err := p.claudeTranslation().body(upstreamModel, defaultMax)
	if err == nil {
		p.claudeLast = claudeBody{model: upstreamModel, max: defaultMax, body: b, jsonTool: jsonTool}
	}
	return b, jsonTool, err
}

// claudeTranslation is the request translated to Anthropic Messages (for
// no model in particular: claudeTranslation.body sets it), made on the
// first call: a chat completion from the estimator's members when it kept
// them, a Responses request from its body.
func (p *Parsed) claudeTranslation() *claudeTranslation {
	if p.claude == nil {
		if p.API == APIResponses {
			p.claude = translateResponsesToClaude(p.Body)
		} else {
			p.claude = translateChatToClaude(p.Body, &p.Request)
		}
	}
	return p.claude
}

// decodeMembers decodes a body's top-level members (estimate.Request.Members)
// into a struct as json.Unmarshal of the body would, without scanning the
// body again: each value alone into the field its key names (names are
// the struct's JSON names, field points at the one named), keys matched
// as encoding/json matches them, in body order, so that a repeated key
// decodes into what the one before left, as Unmarshal does. false: no
// members, or one does not decode; the caller then decodes the body into
// a fresh struct, and Unmarshal's error names the field
// (TestDecodeMembersAsUnmarshal, FuzzDecodeMembers).
func decodeMembers(members []estimate.Member, names []string, field func(name string) any) bool {
	if members == nil {
		return false
	}
	for _, mb := range members {
		name, sure := jsonscan.KeyOf(mb.Key, false, names)
		if !sure {
			return false
		}
		if f := field(name); f != nil && json.Unmarshal(mb.Value, f) != nil {
			return false
		}
	}
	return true
}
