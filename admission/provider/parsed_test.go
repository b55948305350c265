package provider

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/estimate"
)

// decodeSeeds are chat bodies whose members the estimator keeps, and
// some it does not: repeated keys (a struct merged, a slice replaced),
// keys in another case, values of the wrong type, unknown fields.
var decodeSeeds = []string{
	string(benchChat), string(benchGeminiChat),
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0.2,"TEMPERATURE":0.4,"Top_P":0.5,"stop":"a","stop":null}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n"}},"response_format":{"json_schema":{"schema":{"type":"object"}}}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a"}}],"tools":[],"n":1,"store":false}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot","top_p":0.5,"stop":["a"]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":"8","user":"u"}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"messages":[{"role":"assistant","content":"y"}],"logprobs":true,"seed":0,"extra":{}}`,
	`{"model":"m","messages":[{"role":"user","content":"x","name":7}]}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"m\u006fdel":"k"}`,
}

// checkDecodedOnce: from the members the estimator kept, the Claude
// translation, its chat request and Gemini's options are what decoding
// the body again gives.
func checkDecodedOnce(t *testing.T, body []byte) {
	req, err := estimate.ParseOpenAIChat(body)
	if err != nil || req.Members == nil {
		return
	}
	var viaMembers, viaBody chatRequest
	errM := decodeChatRequest(body, req.Members, &viaMembers)
	errB := json.Unmarshal(body, &viaBody)
	if (errM == nil) != (errB == nil) || errM != nil && errM.Error() != errB.Error() {
		t.Fatalf("decode errors %v (members), %v (body)", errM, errB)
	}
	if errB == nil && !reflect.DeepEqual(viaMembers, viaBody) {
		t.Fatalf("chat request from members %+v, from body %+v", viaMembers, viaBody)
	}
	tm, tb := translateChatToClaude(body, &req), translateChatToClaude(body, nil)
	if !reflect.DeepEqual(tm.why, tb.why) || !reflect.DeepEqual(tm.req, tb.req) || tm.jsonTool != tb.jsonTool ||
		tm.clientMax != tb.clientMax || tm.clientModel != tb.clientModel {
		t.Fatalf("translation from members %+v, from body %+v", tm, tb)
	}
	gm, err := geminiRequest(req, body)
	if err != nil {
		t.Fatal(err)
	}
	noMembers := req
	noMembers.Members = nil
	gb, err := geminiRequest(noMembers, body)
	if err != nil {
		t.Fatal(err)
	}
	if string(gm) != string(gb) {
		t.Fatalf("gemini request from members %s, from body %s", gm, gb)
	}
}

// TestDecodeMembersAsUnmarshal: see checkDecodedOnce.
func TestDecodeMembersAsUnmarshal(t *testing.T) {
	kept := 0
	for _, s := range decodeSeeds {
		if req, err := estimate.ParseOpenAIChat([]byte(s)); err == nil && req.Members != nil {
			kept++
		}
		checkDecodedOnce(t, []byte(s))
	}
	if kept < len(decodeSeeds)-3 { // the escaped key, and two the estimator refuses
		t.Fatalf("the estimator kept the members of %d seeds of %d: the test checks little", kept, len(decodeSeeds))
	}
}

// FuzzDecodeMembers: see checkDecodedOnce.
func FuzzDecodeMembers(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecodedOnce(t, body) })
}

// TestParsedTranslatesOnce: through one Parsed, the refusals, the
// estimate's request and every attempt's body are those of the
// functions that translate the body afresh, for each candidate's model
// and default output.
func TestParsedTranslatesOnce(t *testing.T) {
	cfg := testProviders(t)
	an := cfg.Provider("an")
	for _, tc := range []struct {
		api  API
		body []byte
	}{{APIChat, benchChat}, {APIResponses, benchResponses},
		{APIChat, []byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true}`)}} {
		req, err := parseFor(tc.api, string(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		in := &Parsed{API: tc.api, Request: req, Body: tc.body}
		// fresh is a Parsed for each question, without the estimator's
		// members: what the body gives decoded afresh.
		fresh := func() *Parsed { return &Parsed{API: tc.api, Body: tc.body} }
		if got, want := in.Unsupported(an.Kind), fresh().Unsupported(an.Kind); got != want {
			t.Fatalf("unsupported %q, want %q", got, want)
		}
		for _, c := range []struct {
			model string
			max   int64
		}{{"claude-sonnet-4-5", 0}, {"claude-3-haiku-20240307", 8192}, {"", 100}} {
			got, gok := in.CountedAs(an.Kind, c.model, c.max)
			want, wok := fresh().CountedAs(an.Kind, c.model, c.max)
			if gok != wok || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: counted as %+v, want %+v", c.model, got, want)
			}
			translate := claudeRequestBody
			if tc.api == APIResponses {
				translate = claudeResponsesBody
			}
			wantBody, wantTool, wantErr := translate(tc.body, c.model, c.max)
			gotBody, gotTool, gotErr := in.claudeMessages(c.model, c.max)
			if again, _, _ := in.claudeMessages(c.model, c.max); string(again) != string(gotBody) {
				t.Fatalf("%s: body asked again %s, was %s", c.model, again, gotBody)
			}
			if string(gotBody) != string(wantBody) || gotTool != wantTool || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("%s: body %s, want %s", c.model, gotBody, wantBody)
			}
		}
	}
}

// TestClaudeTranslatesTheEstimatorsMessages: a chat completion's
// messages are translated as the estimator parsed them (Parsed.Request),
// not decoded from the body again: a Request whose messages differ from
// the body's is what is sent.
func TestClaudeTranslatesTheEstimatorsMessages(t *testing.T) {
	body := []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"from the body"}]}`)
	req, err := estimate.ParseOpenAIChat(body)
	if err != nil || req.Members == nil {
		t.Fatalf("parse: %v (members %v)", err, req.Members != nil)
	}
	req.Messages = []estimate.Message{{Role: "user", Parts: []estimate.Part{{Type: estimate.PartText, Text: "as parsed"}}}}
	b, _, err := (&Parsed{API: APIChat, Request: req, Body: body}).claudeMessages("claude-sonnet-4-5", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); !strings.Contains(got, `"text":"as parsed"`) || strings.Contains(got, "from the body") {
		t.Errorf("sent %s, want the parsed messages", got)
	}
}
