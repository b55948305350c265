package provider

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// benchChat is a 3-turn chat with a tool call, its result and one tool.
var benchChat = []byte(`{"model":"m","max_tokens":256,"messages":[{"role":"system","content":"You are a weather bot. Be brief."},
{"role":"user","content":"What is the weather in Oslo and in Bergen tomorrow?"},
{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\",\"days\":1}"}}]},
{"role":"tool","tool_call_id":"call_1","content":"{\"high\":4,\"sky\":\"snow\"}"}],
"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}}]}`)

// BenchmarkClaudeRequest: one chat body translated to Messages (the
// gateway does it for CanServe, the target's estimate and the request).
func BenchmarkClaudeRequest(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchChat)))
	for b.Loop() {
		if _, _, err := claudeRequestBody(benchChat, "claude-sonnet-4-5", 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaudeStreamDelta: one text_delta event counted and translated
// to a chat.completion.chunk.
func BenchmarkClaudeStreamDelta(b *testing.B) {
	s := Exchange{Kind: schemas.ProviderAnthropic, API: APIChat}.NewStream("claude-sonnet-4-5", "r1", true)
	s.Event([]byte("message_start"), []byte(`{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}`), nil)
	ev, data := []byte("content_block_delta"), []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello there, "}}`)
	b.ReportAllocs()
	for b.Loop() {
		if out := s.Event(ev, data, nil); len(out) == 0 {
			b.Fatal("no chunk")
		}
	}
}
