package lifecycle

// Which route candidates a request may use (DESIGN.md §1: fallback is a
// policy decision, only to routes that keep the request's contract). The
// route's contract itself — residency, cost ceilings, a minimum context
// window, tools, structured output — is checked once, when the config is
// loaded (config.Contract.Violations refuses a candidate that breaks it),
// so every target a lifecycle is given keeps it. What only this very
// request can tell is decided here.

// Eligible lists the indexes of req.Targets the request may use, in the
// order it uses them. The first target that can serve the request is its
// primary, whatever else it offers. After it come, only when the client
// allows fallback, the targets that can serve the request and fit it
// (Request.Fits). An empty list means no target speaks the request's API:
// the shell refuses the request before its life starts.
func Eligible(req *Request) []int {
	var out []int
	for i := range req.Targets {
		t := &req.Targets[i]
		if t.Unserved {
			continue
		}
		if len(out) > 0 && (!req.FallbackAllowed || !req.Fits(t)) {
			continue
		}
		out = append(out, i)
	}
	return out
}

// Fits reports whether fallback target t can serve this very request: the
// estimated input and output fit its context window (0: unknown, not
// checked), it offers tools if the request has tools, and structured output
// if the request asks for it.
func (r *Request) Fits(t *Target) bool {
	if e := r.EstimateOn(t); t.ContextTokens > 0 && e.InputTokens+e.OutputTokens > t.ContextTokens {
		return false
	}
	if r.NeedsTools && !t.Tools {
		return false
	}
	if r.NeedsStructuredOutput && !t.StructuredOutput {
		return false
	}
	return true
}
