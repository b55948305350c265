package gateway

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/admission/estimate"
	"github.com/sluice-dev/sluice/admission/provider"
)

// EstimateReport is what `sluice estimate < request.json` prints.
type EstimateReport struct {
	Format            estimate.Format `json:"format"`
	Model             string          `json:"model"`
	InputTokens       int64           `json:"input_tokens"`
	CachedInputTokens int64           `json:"cached_input_tokens"`
	OutputTokens      int64           `json:"output_tokens"`
	MaxTokens         int64           `json:"max_tokens"`
	Streaming         bool            `json:"streaming"`
	Encoding          string          `json:"encoding"`
	Approximate       bool            `json:"approximate"`
}

// EstimateBody estimates a request body the way the gateway does. apiName is
// "chat", "messages", "embeddings", "responses", "completions" or "" to
// guess from the body: a "prompt" field means completions, an
// "input" field means embeddings, a claude model means messages, anything
// else chat. routeP95 is the route's p95 output (0: unknown).
func EstimateBody(est *estimate.Estimator, body []byte, apiName string, routeP95 int64) (EstimateReport, error) {
	if apiName == "" {
		switch {
		case bytes.Contains(body, []byte(`"prompt"`)) && !bytes.Contains(body, []byte(`"messages"`)):
			apiName = "completions"
		case bytes.Contains(body, []byte(`"input"`)) && !bytes.Contains(body, []byte(`"messages"`)):
			apiName = "embeddings"
		case bytes.Contains(bytes.ToLower(body), []byte("claude")):
			apiName = "messages"
		default:
			apiName = "chat"
		}
	}
	var a provider.API
	switch strings.ToLower(apiName) {
	case "chat":
		a = provider.APIChat
	case "embeddings":
		a = provider.APIEmbeddings
	case "messages":
		a = provider.APIMessages
	case "responses":
		a = provider.APIResponses
	case "completions":
		a = provider.APICompletions
	default:
		return EstimateReport{}, fmt.Errorf("unknown api %q (chat, messages, embeddings, responses, completions)", apiName)
	}
	req, err := parse(a, body)
	if err != nil {
		return EstimateReport{}, fmt.Errorf("%s request: %w", a, err)
	}
	e := est.Estimate(req, routeP95)
	if a == provider.APIEmbeddings {
		e.OutputTokens = 0
	}
	return EstimateReport{Format: req.Format, Model: req.Model, InputTokens: e.InputTokens, CachedInputTokens: e.CachedInputTokens,
		OutputTokens: e.OutputTokens, MaxTokens: e.MaxTokens, Streaming: e.Streaming, Encoding: e.Encoding, Approximate: e.Approximate}, nil
}
