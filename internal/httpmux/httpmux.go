// Package httpmux answers one question about a net/http.ServeMux that the
// mux itself keeps private: which methods does it route for this path? A
// handler that writes its own error bodies (the OpenAI/Anthropic envelope)
// uses it to answer a wrong method with 405 and an Allow header (RFC 9110
// §15.5.6) rather than 404, from the route table itself, so that no
// hand-kept list of paths can fall behind the routes.
package httpmux

import (
	"net/http"
	"slices"
)

// methods are the methods probed, in the order Allow lists them.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Allowed lists the methods mux routes for r's host and path, other than
// r's own method; empty when mux has no route for the path under any of
// them (a 404). It is meant for the error path: it probes the mux once per
// method.
func Allowed(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range methods {
		if m == r.Method {
			continue
		}
		p := r.Clone(r.Context())
		p.Method = m
		if _, pattern := mux.Handler(p); pattern != "" {
			out = append(out, m)
		}
	}
	return slices.Clip(out)
}
