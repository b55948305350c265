package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/estimate"
)

func TestPromptFamily(t *testing.T) {
	sys := func(s string) estimate.Message {
		return estimate.Message{Role: "system", Parts: []estimate.Part{{Type: estimate.PartText, Text: s}}}
	}
	user := func(s string) estimate.Message {
		return estimate.Message{Role: "user", Parts: []estimate.Part{{Type: estimate.PartText, Text: s}}}
	}
	tool := estimate.Tool{Type: "function", Name: "lookup", Parameters: []byte(`{"type":"object"}`)}
	a := &estimate.Request{Messages: []estimate.Message{sys("You are support."), user("hi")}, Tools: []estimate.Tool{tool}}
	b := &estimate.Request{Messages: []estimate.Message{sys("You are support."), user("something else entirely")}, Tools: []estimate.Tool{tool}}
	c := &estimate.Request{Messages: []estimate.Message{sys("You are support."), user("hi")}}
	d := &estimate.Request{System: []estimate.Part{{Type: estimate.PartText, Text: "You are support."}}, Tools: []estimate.Tool{tool}}
	none := &estimate.Request{Messages: []estimate.Message{user("hi")}}
	h := http.Header{}
	fa, fb, fc := promptFamily(h, a), promptFamily(h, b), promptFamily(h, c)
	if !strings.HasPrefix(fa, "pf-") || len(fa) != 15 {
		t.Fatalf("family %q", fa)
	}
	if fa != fb {
		t.Errorf("user turns changed the family: %s vs %s", fa, fb)
	}
	if fa == fc {
		t.Error("tools do not change the family")
	}
	if fd := promptFamily(h, d); fd == "" || fd == fc {
		t.Errorf("anthropic system + tools: %q", fd)
	}
	if f := promptFamily(h, none); f != "" {
		t.Errorf("no system prompt, no tools: %q", f)
	}
	h.Set(HeaderPromptFamily, "checkout-agent")
	if f := promptFamily(h, a); f != "checkout-agent" {
		t.Errorf("header ignored: %q", f)
	}
	h.Set(HeaderPromptFamily, strings.Repeat("x", 100))
	if f := promptFamily(h, a); len(f) != promptFamilyBytesMax {
		t.Errorf("header not bounded: %d bytes", len(f))
	}
}
