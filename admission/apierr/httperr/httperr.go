// Package httperr writes an apierr.Error as an HTTP answer: the OpenAI
// envelope, or Anthropic's on /v1/messages, with the retry headers the
// official SDKs obey. It is apart from apierr so that apierr, which the
// pure lifecycle uses to build its refusals, does not reach net/http.
package httperr

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sluice-dev/sluice/admission/apierr"
)

// Write sends e in the OpenAI envelope, or Anthropic's when anthropic is
// true, with Retry-After when the refusal says when to come back.
func Write(w http.ResponseWriter, e *apierr.Error, anthropic bool) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.Final() || e.Sluice.RetryAfterMs > apierr.RetryAfterPatienceMs {
		h.Set("x-should-retry", "false")
	}
	if e.Sluice.RetryAfterMs > 0 {
		h.Set("Retry-After", strconv.FormatInt((e.Sluice.RetryAfterMs+999)/1000, 10))
		h.Set("retry-after-ms", strconv.FormatInt(e.Sluice.RetryAfterMs, 10))
	}
	// Every answer names its request: an error before the request had
	// its lifecycle takes the id the gateway gave the HTTP request (on a
	// copy: the caller's error may outlive this answer).
	if e.Sluice.RequestID == "" {
		c := *e
		c.Sluice.RequestID = h.Get(apierr.HeaderRequestID)
		e = &c
	}
	if e.Sluice.RequestID != "" {
		h.Set(apierr.HeaderRequestID, e.Sluice.RequestID)
	}
	w.WriteHeader(e.Status)
	var body any
	if anthropic {
		body = struct {
			Type  string `json:"type"`
			Error any    `json:"error"`
		}{"error", struct {
			Type    string        `json:"type"`
			Message string        `json:"message"`
			Param   string        `json:"param,omitempty"`
			Code    string        `json:"code"`
			Sluice  apierr.Sluice `json:"sluice"`
		}{anthropicType(e.Status), e.Message, e.Param, e.Code, e.Sluice}}
	} else {
		body = struct {
			Error *apierr.Error `json:"error"`
		}{e}
	}
	_ = json.NewEncoder(w).Encode(body)
}

func anthropicType(status int) string {
	switch status {
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503, 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}
