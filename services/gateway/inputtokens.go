package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/apierr/httperr"
	"github.com/sluice-dev/sluice/admission/estimate"
)

// handleResponsesInputTokens answers OpenAI's POST
// /v1/responses/input_tokens (client.responses.input_tokens.count) with
// the gateway's own pre-flight estimate of a Responses request's input:
// no upstream call, no reservation. For OpenAI models the count is the
// tiktoken encoding's plus the per-message framing (admission/estimate
// README); it is what Sluice reserves, within a few tokens of OpenAI's.
func (s *Server) handleResponsesInputTokens(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg.Load()
	fail := func(e *apierr.Error) {
		s.m.count(e.Code)
		httperr.Write(w, e, false)
	}
	if _, e := s.identify(cfg, r); e != nil {
		fail(e)
		return
	}
	body, e := readBody(w, r, cfg.BodyLimitBytes)
	if e != nil {
		fail(e)
		return
	}
	req, err := estimate.ParseOpenAIResponses(body)
	if err != nil {
		fail(requestError(err))
		return
	}
	if cfg.Route(req.Model) == nil {
		e := apierr.New(http.StatusNotFound, apierr.CodeModelNotFound, fmt.Sprintf("the model %q does not exist or is not routed by this gateway", req.Model))
		e.Param = "model"
		fail(e)
		return
	}
	est := s.est.Estimate(req, 0)
	s.m.count("input_tokens")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		Object      string `json:"object"`
		InputTokens int64  `json:"input_tokens"`
	}{"response.input_tokens", est.InputTokens})
}
