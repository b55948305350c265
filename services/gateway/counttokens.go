package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/apierr/httperr"
	"github.com/sluice-dev/sluice/admission/estimate"
)

// handleCountTokens answers Anthropic's POST /v1/messages/count_tokens
// with the gateway's own pre-flight estimate of the request's input
// tokens: no upstream call, no reservation, and the key's entitlements
// (model allowlists) apply as on a call. For Claude the estimator is an
// approximation (cl100k_base × 1.15; admission/estimate/README.md says why
// and how far off it is), so the answer is what Sluice will reserve, not
// Anthropic's exact count.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg.Load()
	fail := func(e *apierr.Error) {
		s.m.count(e.Code)
		httperr.Write(w, e, true)
	}
	id, e := s.identify(cfg, r)
	if e != nil {
		fail(e)
		return
	}
	body, e := readBody(w, r, cfg.BodyLimitBytes)
	if e != nil {
		fail(e)
		return
	}
	// count_tokens takes a Messages request without max_tokens, which the
	// Messages parser requires: give it one that does not change the
	// input count.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		fail(apierr.New(http.StatusBadRequest, apierr.CodeInvalidJSON, "request body is not a JSON object"))
		return
	}
	if _, ok := fields["max_tokens"]; !ok {
		fields["max_tokens"] = json.RawMessage("1")
		body, _ = json.Marshal(fields)
	}
	req, err := estimate.ParseAnthropicMessages(body)
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
	// The allowlist holds here as on the call itself: a count of a model
	// the key may not call would tell it what the route is for nothing.
	if e := modelAllowed(id, req.Model); e != nil {
		fail(e)
		return
	}
	est := s.est.Estimate(req, 0)
	s.m.count("count_tokens")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		InputTokens int64 `json:"input_tokens"`
	}{est.InputTokens})
}
