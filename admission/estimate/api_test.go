package estimate

import (
	"errors"
	"testing"
)

// TestParseResponsesAndCompletions covers the Responses API and legacy
// completions parsers: what they keep for the estimate, and the stable
// error (code and param) of each malformed body.
func TestParseResponsesAndCompletions(t *testing.T) {
	type want struct {
		code, param       string
		msgs, system      int
		tools             int
		maxTokens, n      int64
		stream, structure bool
		inputs            int
		inputTokens       int64
	}
	for _, tc := range []struct {
		name  string
		parse func([]byte) (Request, error)
		body  string
		want  want
	}{
		{"responses string input", ParseOpenAIResponses, `{"model":"gpt-4o","input":"hi","instructions":"be brief","max_output_tokens":50,"stream":true}`,
			want{msgs: 1, system: 1, maxTokens: 50, n: 1, stream: true}},
		{"responses items", ParseOpenAIResponses, `{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"y"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"1"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object"}}}}`,
			want{msgs: 4, tools: 1, n: 1, structure: true}},
		{"responses instructions only", ParseOpenAIResponses, `{"model":"gpt-4o","instructions":"say hi"}`, want{system: 1, n: 1}},
		{"responses no input", ParseOpenAIResponses, `{"model":"gpt-4o"}`, want{code: CodeMissingField, param: "input"}},
		{"responses bad input", ParseOpenAIResponses, `{"model":"gpt-4o","input":3}`, want{code: CodeInvalidType, param: "input"}},
		{"responses item without type or role", ParseOpenAIResponses, `{"model":"gpt-4o","input":[{"content":"x"}]}`, want{code: CodeMissingField, param: "input[0].type"}},
		{"responses bad part", ParseOpenAIResponses, `{"model":"gpt-4o","input":[{"role":"user","content":[7]}]}`, want{code: CodeInvalidType, param: "input[0].content[0]"}},
		{"responses max_output_tokens", ParseOpenAIResponses, `{"model":"gpt-4o","input":"x","max_output_tokens":0}`, want{code: CodeInvalidValue, param: "max_output_tokens"}},
		{"responses schema missing", ParseOpenAIResponses, `{"model":"gpt-4o","input":"x","text":{"format":{"type":"json_schema","name":"s"}}}`, want{code: CodeMissingField, param: "text.format.schema"}},
		{"responses in the background", ParseOpenAIResponses, `{"model":"gpt-4o","input":"x","background":true}`, want{code: CodeInvalidValue, param: "background"}},
		{"responses nameless function", ParseOpenAIResponses, `{"model":"gpt-4o","input":"x","tools":[{"type":"function"}]}`, want{code: CodeMissingField, param: "tools[0].name"}},

		{"completions string", ParseOpenAICompletions, `{"model":"gpt-3.5-turbo-instruct","prompt":"hello"}`,
			want{maxTokens: CompletionsDefaultMaxTokens, n: 1, inputs: 1}},
		{"completions array n best_of", ParseOpenAICompletions, `{"model":"gpt-3.5-turbo-instruct","prompt":["a","b"],"suffix":"z","max_tokens":7,"n":2,"best_of":3,"stream":true}`,
			want{maxTokens: 7, n: 6, stream: true, inputs: 3}},
		{"completions token arrays", ParseOpenAICompletions, `{"model":"davinci-002","prompt":[[1,2],[3]],"n":2}`,
			want{maxTokens: CompletionsDefaultMaxTokens, n: 4, inputTokens: 3}},
		{"completions one token prompt", ParseOpenAICompletions, `{"model":"davinci-002","prompt":[1,2,3]}`,
			want{maxTokens: CompletionsDefaultMaxTokens, n: 1, inputTokens: 3}},
		{"completions no prompt", ParseOpenAICompletions, `{"model":"davinci-002"}`, want{code: CodeMissingField, param: "prompt"}},
		{"completions empty prompt", ParseOpenAICompletions, `{"model":"davinci-002","prompt":[]}`, want{code: CodeInvalidValue, param: "prompt"}},
		{"completions bad token", ParseOpenAICompletions, `{"model":"davinci-002","prompt":[[1,"x"]]}`, want{code: CodeInvalidType, param: "prompt[0][1]"}},
		{"completions best_of below n", ParseOpenAICompletions, `{"model":"davinci-002","prompt":"x","n":3,"best_of":2}`, want{code: CodeInvalidValue, param: "best_of"}},
		{"completions n", ParseOpenAICompletions, `{"model":"davinci-002","prompt":"x","n":0}`, want{code: CodeInvalidValue, param: "n"}},
		{"completions max_tokens", ParseOpenAICompletions, `{"model":"davinci-002","prompt":"x","max_tokens":"many"}`, want{code: CodeInvalidType, param: "max_tokens"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := tc.parse([]byte(tc.body))
			if tc.want.code != "" {
				var re *RequestError
				if !errors.As(err, &re) || re.Code != tc.want.code || re.Param != tc.want.param {
					t.Fatalf("error = %v, want %s (%s)", err, tc.want.code, tc.want.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := want{msgs: len(req.Messages), system: len(req.System), tools: len(req.Tools), maxTokens: req.MaxTokens, n: req.N,
				stream: req.Stream, structure: req.ResponseFormat.Structured(), inputs: len(req.Input), inputTokens: req.InputTokens}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestEstimateCompletionsAndResponses: a legacy prompt has no chat framing,
// and its reservation is max_tokens × the outputs generated; a Responses
// request is counted like the chat request it corresponds to.
func TestEstimateCompletionsAndResponses(t *testing.T) {
	e := New(Options{})
	comp, err := ParseOpenAICompletions([]byte(`{"model":"gpt-3.5-turbo-instruct","prompt":["hello world","hello world"],"max_tokens":10,"n":2}`))
	if err != nil {
		t.Fatal(err)
	}
	est := e.Estimate(comp, 0)
	if est.InputTokens != 4 || est.OutputTokens != 40 {
		t.Fatalf("completions estimate = %+v, want 4 input (2 × 2 tokens, no framing) and 40 output (10 × 2 choices × 2 prompts)", est)
	}
	resp, err := ParseOpenAIResponses([]byte(`{"model":"gpt-4o","instructions":"be brief","input":"hello","max_output_tokens":20}`))
	if err != nil {
		t.Fatal(err)
	}
	chat, err := ParseOpenAIChat([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"max_tokens":20}`))
	if err != nil {
		t.Fatal(err)
	}
	re, ce := e.Estimate(resp, 0), e.Estimate(chat, 0)
	if re.OutputTokens != 20 || re.InputTokens <= ce.InputTokens {
		t.Fatalf("responses estimate %+v, chat %+v: want 20 output and more input (the instructions)", re, ce)
	}
}
