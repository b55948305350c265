package provider

import (
	"bytes"
	"encoding/json"
)

// Answer is a provider's successful non-streaming answer as the adapter
// reads it.
type Answer struct {
	// Usage is the provider's reported usage (zero when it reported none).
	Usage Usage
	// Body is what the client gets: the provider's body, or for Gemini its
	// translation to chat.completion.
	Body []byte
	// Translated: Body is a translation, whose Content-Type is
	// application/json whatever the provider's was.
	Translated bool
}

// ParseAnswer reads a successful answer of a provider of kind to the
// client's model; id is the logical request id (the translated answer's
// "chatcmpl-" id). A Gemini body that does not parse is passed as it came.
func ParseAnswer(kind Kind, body []byte, model, id string) Answer {
	return untranslated(kind).Answer(body, model, id)
}

// untranslated is the exchange of a request that the request side did not
// translate, as ParseAnswer and NewStream read it: its API is Messages,
// which no adapter translates (Gemini's, which speaks only by
// translation, translates every answer).
func untranslated(kind Kind) Exchange { return Exchange{Kind: kind, API: APIMessages} }

// Exchange is how one attempt's request was built, which says how to read
// what comes back: NewRequest returns it, Answer and NewStream read the
// answer with it. The zero value is a passthrough exchange with an OpenAI
// provider.
type Exchange struct {
	Kind Kind
	API  API
	// ForcedUsage: the adapter set stream_options.include_usage on an
	// OpenAI-style stream (see NewStream).
	ForcedUsage bool
	// jsonTool: the Anthropic translation sent response_format as a
	// forced tool, whose input is the answer's content.
	jsonTool bool
}

// Answer is ParseAnswer for the exchange: the Anthropic message of a
// chat completion is translated to chat.completion (a body that does not
// parse is passed as it came).
func (x Exchange) Answer(body []byte, model, id string) Answer {
	usage, _ := ParseUsage(x.Kind, body)
	a := Answer{Usage: usage, Body: body}
	if b, ok := adapterOf(x.Kind).answer(x, body, model, id); ok {
		a.Body, a.Translated = b, true
	}
	return a
}

// NewStream is NewStream for the exchange: an Anthropic stream answering
// a chat completion is translated to chat.completion.chunk events.
func (x Exchange) NewStream(model, id string, includeUsage bool) *Stream {
	s := &Stream{usage: NewStreamUsage(x.Kind), forcedUsage: x.ForcedUsage}
	s.tr = adapterOf(x.Kind).translator(x, model, id, includeUsage, s.usage)
	return s
}

// Stream is one streamed answer seen through the adapter: it counts the
// usage of every SSE event and says what of it the client gets. The shell
// reads and writes the SSE bytes; the zero value is not usable, create one
// with NewStream. A Stream is not safe for concurrent use.
type Stream struct {
	usage *StreamUsage
	// tr is the translation of the stream for the client (nil:
	// passthrough): Gemini and Anthropic behind chat to chat chunks,
	// Anthropic behind the Responses API to the Responses events.
	tr          streamTranslator
	forcedUsage bool
}

// NewStream returns the adapter of a stream from a provider of kind
// answering req (whose model the client named); forcedUsage is
// NewRequest's: the adapter set stream_options.include_usage, so the
// usage-only chunk it brings is counted and then withheld, and the client
// sees exactly the stream it asked for. id is the logical request id.
func NewStream(kind Kind, forcedUsage bool, model, id string, includeUsage bool) *Stream {
	x := untranslated(kind)
	x.ForcedUsage = forcedUsage
	return x.NewStream(model, id, includeUsage)
}

// Event takes one SSE event — its event name, its data and its bytes as
// received — and returns what the client gets of it (nil: nothing). Feed
// every event, also once the client is gone: the reconcile counts what the
// provider sent.
func (s *Stream) Event(event, data, raw []byte) []byte {
	if len(data) > 0 || len(event) > 0 {
		s.usage.Feed(event, data)
	}
	switch {
	case s.tr != nil:
		return s.tr.translate(event, data)
	case s.forcedUsage && isUsageOnlyChunk(data):
		return nil
	}
	return raw
}

// Tail is what the client gets after a stream that ended cleanly (the
// closing chunks of a Gemini translation; nil for a passthrough, and for
// Anthropic, whose message_stop brings them).
func (s *Stream) Tail() []byte {
	if s.tr == nil {
		return nil
	}
	return s.tr.tail()
}

// Usage is StreamUsage.Usage of the events so far.
func (s *Stream) Usage() (Usage, bool) { return s.usage.Usage() }

// Finished is StreamUsage.Finished: the provider ended the stream cleanly.
func (s *Stream) Finished() bool { return s.usage.Finished() }

// isUsageOnlyChunk recognises OpenAI's final usage chunk: "choices": []
// and a non-null usage.
func isUsageOnlyChunk(data []byte) bool {
	if !bytes.Contains(data, []byte(`"usage"`)) {
		return false
	}
	var ch struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	if json.Unmarshal(data, &ch) != nil {
		return false
	}
	return ch.Choices != nil && len(ch.Choices) == 0 && len(ch.Usage) > 0 && string(ch.Usage) != "null"
}
