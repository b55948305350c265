package provider

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
)

// translatedCall is one request through the provider calls the gateway
// makes, through one Parsed (BenchmarkTranslatedCall).
func translatedCall(b *testing.B, p *config.Provider, a API, body []byte) {
	req, err := parseFor(a, string(body))
	if err != nil {
		b.Fatal(err)
	}
	in := &Parsed{API: a, Request: req, Body: body}
	if !in.CanServe(p.Kind) {
		b.Fatal("not served")
	}
	in.CountedAs(p.Kind, "claude-sonnet-4-5", 0)
	if _, _, err := NewRequest(context.Background(), p, Attempt{Parsed: in, UpstreamModel: "claude-sonnet-4-5"}); err != nil {
		b.Fatal(err)
	}
}
