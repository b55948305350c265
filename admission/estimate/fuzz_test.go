package estimate

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

var fuzzEstimator = New(Options{})

func fuzzParser(f *testing.F, parse func([]byte) (Request, error), seeds []string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parse(body)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || re.Code == "" || re.Message == "" {
				t.Fatalf("error %v is not a well-formed *RequestError", err)
			}
			return
		}
		est := fuzzEstimator.Estimate(req, 100)
		if est.InputTokens < 0 || est.OutputTokens < 0 {
			t.Fatalf("negative estimate %+v", est)
		}
	})
}

func FuzzParseOpenAIChat(f *testing.F) { fuzzParser(f, ParseOpenAIChat, chatSeeds) }

var chatSeeds = []string{
	`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"gpt-4o-mini","messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"high"}}]}],"max_completion_tokens":10,"n":2,"stream":true,"stream_options":{"include_usage":true}}`,
	`{"model":"gpt-4.1","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"}}}}`,
	`{"model":"claude-x","messages":[{"role":"user","name":"bob","content":"hi"}],"max_tokens":-1}`,
	`{"model":1}`, `[]`, `{`, ``,
}

// FuzzParseOpenAIChatFast: both fast paths (the one-scan path and the
// two-pass encoding/json one) take only bodies the level-by-level parser
// accepts, with its result.
func FuzzParseOpenAIChatFast(f *testing.F) {
	for _, s := range chatSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"a","name":"x"}],"messages":[{"role":"user","content":"b"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \"q\" \n"},null]}`))
	f.Add([]byte("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"))
	f.Add([]byte(`{"MODEL":"m","Messages":[{"ROLE":"user","content":"a","Content":null,"refusal":"r"}],"max_tokens":null,"n":2,"stream":false,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"model":"m","m\u0065ssages":[{"role":"user","content":"a"}]}`))
	f.Add([]byte(`{"model":"m\u00e9","messages":[{"role":"user","content":[{"type":"text","text":"a"}],"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}],"tools":[{"type":"function","function":{"name":"f"}}]}`))
	// Repeated keys decode into what the last one left (unmarshalInto).
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"a","tool_calls":[{}],"tool_calls":null}],"stream":true,"stream_options":{"include_usage":true},"stream_options":{},"n":2,"n":null,"max_tokens":5,"max_tokens":7}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range []struct {
			name  string
			parse func([]byte) (Request, bool)
		}{{"scan", parseOpenAIChatScan}, {"fast", parseOpenAIChatFast}} {
			fast, ok := p.parse(body)
			if !ok {
				continue
			}
			slow, err := parseOpenAIChat(body)
			if err != nil {
				t.Fatalf("%s path took a body the slow path refuses (%v): %q", p.name, err, body)
			}
			if p.name == "scan" {
				checkMembers(t, body, fast.Members)
			}
			fast.Members = nil // the one-scan path's alone: checked above
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%s and slow paths differ on %q:\n%s %+v\nslow %+v", p.name, body, p.name, fast, slow)
			}
		}
	})
}

func FuzzParseAnthropicMessages(f *testing.F) {
	fuzzParser(f, ParseAnthropicMessages, []string{
		`{"model":"claude-sonnet-4-20250514","max_tokens":1024,"messages":[{"role":"user","content":"Hello"}]}`,
		`{"model":"claude-3-5-haiku-latest","max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]}]}],"tools":[{"name":"t","input_schema":{"type":"object"}}],"stream":true}`,
		`{"model":"claude","max_tokens":0,"messages":[]}`,
	})
}

func FuzzParseEmbeddings(f *testing.F) {
	fuzzParser(f, ParseEmbeddings, []string{
		`{"model":"text-embedding-3-small","input":"hello"}`,
		`{"model":"text-embedding-3-small","input":["a","b"]}`,
		`{"model":"text-embedding-ada-002","input":[1,2,3]}`,
		`{"model":"text-embedding-ada-002","input":[[1,2],[3]]}`,
		`{"model":"x","input":[-1]}`,
	})
}

func FuzzParseOpenAIResponses(f *testing.F) {
	fuzzParser(f, ParseOpenAIResponses, []string{
		`{"model":"gpt-4o","input":"hi"}`,
		`{"model":"o4-mini","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"1"},{"type":"reasoning","summary":[{"type":"summary_text","text":"r"}]},{"type":"item_reference","id":"i"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}},{"type":"web_search"}],"text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}}},"max_output_tokens":64,"stream":true}`,
		`{"model":"gpt-4o","input":[{"content":"x"}],"max_output_tokens":0}`,
		`{"model":"gpt-4o","input":7}`,
	})
}

func FuzzParseOpenAICompletions(f *testing.F) {
	fuzzParser(f, ParseOpenAICompletions, []string{
		`{"model":"gpt-3.5-turbo-instruct","prompt":"Say this is a test"}`,
		`{"model":"gpt-3.5-turbo-instruct","prompt":["a","b"],"suffix":"z","max_tokens":7,"n":2,"best_of":3,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"davinci-002","prompt":[[1,2],[3]]}`,
		`{"model":"davinci-002","prompt":[1,-2],"n":3,"best_of":2}`,
	})
}

// checkMembers: the members the one-scan path kept are the body's, as
// encoding/json decodes the body into a map of raw members (the last of a
// repeated key wins): what a provider request rebuilt from them holds.
func checkMembers(t *testing.T, body []byte, members []Member) {
	t.Helper()
	var want map[string]json.RawMessage
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatalf("scan path took a body encoding/json refuses (%v): %q", err, body)
	}
	got := map[string]json.RawMessage{}
	for _, m := range members {
		if bytes.IndexByte(m.Key, '\\') >= 0 {
			t.Fatalf("member key %q holds an escape", m.Key)
		}
		got[string(m.Key)] = m.Value
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("members of %q:\n got %q\nwant %q", body, got, want)
	}
}
