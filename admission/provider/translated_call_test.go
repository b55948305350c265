package provider

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
)

// translatedCall is one request through the provider calls the gateway
// makes (BenchmarkTranslatedCall).
func translatedCall(b *testing.B, p *config.Provider, a API, body []byte) {
	req, err := parseFor(a, string(body))
	if err != nil {
		b.Fatal(err)
	}
	if !CanServe(a, p.Kind, req, body) {
		b.Fatal("not served")
	}
	CountedAs(a, p.Kind, body, "claude-sonnet-4-5", 0)
	if _, _, err := NewRequest(context.Background(), p, Attempt{API: a, Request: req, Body: body, UpstreamModel: "claude-sonnet-4-5"}); err != nil {
		b.Fatal(err)
	}
}
