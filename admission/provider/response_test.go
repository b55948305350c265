package provider

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

func TestParseAnswer(t *testing.T) {
	tests := []struct {
		file       string
		kind       Kind
		translated bool
		input      int64
	}{
		{"openai_chat_200.http", schemas.ProviderOpenAI, false, 0},
		{"anthropic_messages_200.http", schemas.ProviderAnthropic, false, 0},
		{"gemini_200.http", schemas.ProviderGemini, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			_, body := loadResponse(t, tc.file)
			a := ParseAnswer(tc.kind, body, "public-model", "r1")
			want, _ := ParseUsage(tc.kind, body)
			if a.Usage != want || a.Usage.InputTokens == 0 {
				t.Errorf("usage %+v, want %+v (non-zero)", a.Usage, want)
			}
			if a.Translated != tc.translated {
				t.Fatalf("translated %v", a.Translated)
			}
			if !tc.translated {
				if string(a.Body) != string(body) {
					t.Errorf("a passthrough body was changed")
				}
				return
			}
			var cc struct {
				ID, Object, Model string
				Choices           []struct {
					Message      struct{ Role, Content string }
					FinishReason string `json:"finish_reason"`
				}
				Usage struct {
					PromptTokens int64 `json:"prompt_tokens"`
				}
			}
			if err := json.Unmarshal(a.Body, &cc); err != nil {
				t.Fatal(err)
			}
			if cc.ID != "chatcmpl-r1" || cc.Object != "chat.completion" || cc.Model != "public-model" || len(cc.Choices) != 1 ||
				cc.Choices[0].Message.Role != "assistant" || cc.Choices[0].Message.Content == "" || cc.Choices[0].FinishReason == "" || cc.Usage.PromptTokens == 0 {
				t.Errorf("translation %s", a.Body)
			}
		})
	}
	if a := ParseAnswer(schemas.ProviderGemini, []byte("not json"), "m", "r"); a.Translated || string(a.Body) != "not json" {
		t.Errorf("an unparsable Gemini body must pass as it came: %+v", a)
	}
}

// TestStream: what the client gets of each provider stream, and that the
// usage is counted from every event, withheld or not.
func TestStream(t *testing.T) {
	tests := []struct {
		file   string
		kind   Kind
		forced bool
		usage  bool // the client asked for include_usage
		// what the client's stream must (and must not) contain
		has, hasNot []string
	}{
		{"openai_stream_include_usage.sse", schemas.ProviderOpenAI, true, false, []string{`"delta"`}, []string{`"choices":[]`}},
		{"openai_stream_include_usage.sse", schemas.ProviderOpenAI, false, true, []string{`"choices":[]`}, nil},
		{"anthropic_stream.sse", schemas.ProviderAnthropic, false, false, []string{"message_start", "message_stop"}, nil},
		{"gemini_stream.sse", schemas.ProviderGemini, false, true, []string{"chat.completion.chunk", `"role":"assistant"`, `"finish_reason":"`, `"prompt_tokens"`, "data: [DONE]"}, []string{"candidates"}},
		{"gemini_stream.sse", schemas.ProviderGemini, false, false, []string{"data: [DONE]"}, []string{`"prompt_tokens"`}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			s := NewStream(tc.kind, tc.forced, "public-model", "r1", tc.usage)
			ref := NewStreamUsage(tc.kind)
			var out strings.Builder
			for _, ev := range loadSSE(t, tc.file) {
				raw := "data: " + string(ev.data) + "\n\n"
				if ev.event != nil {
					raw = "event: " + string(ev.event) + "\n" + raw
				}
				out.Write(s.Event(ev.event, ev.data, []byte(raw)))
				ref.Feed(ev.event, ev.data)
			}
			out.Write(s.Tail())
			got, partial := s.Usage()
			want, wantPartial := ref.Usage()
			if got != want || partial != wantPartial || !s.Finished() {
				t.Errorf("usage %+v partial %v finished %v, want %+v partial %v", got, partial, s.Finished(), want, wantPartial)
			}
			for _, h := range tc.has {
				if !strings.Contains(out.String(), h) {
					t.Errorf("client stream lacks %s:\n%s", h, out.String())
				}
			}
			for _, h := range tc.hasNot {
				if strings.Contains(out.String(), h) {
					t.Errorf("client stream has %s:\n%s", h, out.String())
				}
			}
		})
	}
}

// BenchmarkParseUsage reads the usage of a recorded chat answer (the
// gateway does it for every non-streaming answer).
func BenchmarkParseUsage(b *testing.B) {
	_, body := loadResponse(b, "openai_chat_200.http")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseUsage(schemas.ProviderOpenAI, body); !ok {
			b.Fatal("no usage")
		}
	}
}
