package provider

import "testing"

// benchResponses is benchChat's conversation as a Responses API body.
var benchResponses = []byte(`{"model":"m","max_output_tokens":256,"instructions":"You are a weather bot. Be brief.",
"input":[{"role":"user","content":"What is the weather in Oslo and in Bergen tomorrow?"},
{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Oslo\",\"days\":1}"},
{"type":"function_call_output","call_id":"call_1","output":"{\"high\":4,\"sky\":\"snow\"}"}],
"tools":[{"type":"function","name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}]}`)

// benchGeminiChat is a chat Gemini translates (text only, sampling
// parameters and a stop).
var benchGeminiChat = []byte(`{"model":"m","max_tokens":256,"temperature":0.5,"top_p":0.9,"stop":["END"],"messages":[{"role":"system","content":"You are a weather bot. Be brief."},
{"role":"user","content":"What is the weather in Oslo and in Bergen tomorrow?"},
{"role":"assistant","content":"Snow in Oslo, rain in Bergen."},
{"role":"user","content":"And the day after?"}]}`)

// BenchmarkTranslatedCall is what the gateway does with one translated
// request for a route of one candidate and one attempt, from the body to
// the upstream request: the estimator's parse, CanServe (the lifecycle's
// Unserved), CountedAs (the candidate's estimate) and NewRequest.
func BenchmarkTranslatedCall(b *testing.B) {
	cfg := testProviders(b)
	for _, bc := range []struct {
		name, provider string
		api            API
		body           []byte
	}{
		{"claude-chat", "an", APIChat, benchChat},
		{"claude-responses", "an", APIResponses, benchResponses},
		{"gemini-chat", "ge", APIChat, benchGeminiChat},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := cfg.Provider(bc.provider)
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				translatedCall(b, p, bc.api, bc.body)
			}
		})
	}
}
