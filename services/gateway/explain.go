package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/apierr/httperr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
)

// Explainer finds and explains a request of the last day (see
// ledgerd.Explain) among the partitions of the given scopes: the
// providers' scopes, which it expands to every sub-scope the config
// history split them into (ledgerd.ExplainScopes), and the current
// config's sub-scopes (explainScopes). It returns ErrNoRequest when the
// request is not found.
type Explainer func(ctx context.Context, requestID string, scopes []string) (*ledger.Explanation, error)

// ErrNoRequest is what an Explainer returns for a request it cannot find.
var ErrNoRequest = errors.New("no such request")

// errExplainBusy: the gateway is already replaying a partition for an
// explanation.
var errExplainBusy = errors.New("an explanation is being computed")

// WithExplainer serves GET /v1/sluice/requests/{id} with e, one
// explanation at a time (each replays a partition of the log: a tenant
// asking in a loop must not take the gateway's CPU); a request meanwhile
// gets a 429 with Retry-After. Without it the route answers not_found
// (explanations need the ledger's log).
func WithExplainer(e Explainer) Option {
	return func(s *Server) {
		sem := make(chan struct{}, 1)
		s.explain = func(ctx context.Context, id string, scopes []string) (*ledger.Explanation, error) {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
				return e(ctx, id, scopes)
			default:
				return nil, errExplainBusy
			}
		}
	}
}

// handleExplain serves GET /v1/sluice/requests/{id}: the explanation of
// one of the caller's requests, as its tenant may see it (other tenants
// only as aggregates; ledger.Explanation.ForTenant). A request of another
// tenant is answered exactly like one that does not exist, so that the
// answer does not tell whether an id exists.
func (s *Server) handleExplain(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg.Load()
	fail := func(e *apierr.Error) {
		s.m.count(e.Code)
		httperr.Write(w, e, false)
	}
	id, e := s.identify(cfg, r)
	if e != nil {
		fail(e)
		return
	}
	reqID := r.PathValue("id")
	notFound := apierr.New(http.StatusNotFound, apierr.CodeNotFound, fmt.Sprintf("no request %q of this tenant in the last 24 hours", reqID))
	if s.explain == nil {
		fail(apierr.New(http.StatusNotFound, apierr.CodeNotFound, "request explanations are not enabled on this gateway"))
		return
	}
	if reqID == "" || len(reqID) > 512 {
		fail(notFound)
		return
	}
	x, err := s.explain(r.Context(), reqID, explainScopes(cfg))
	switch {
	case errors.Is(err, ErrNoRequest):
		fail(notFound)
		return
	case errors.Is(err, errExplainBusy):
		e := apierr.New(http.StatusTooManyRequests, apierr.CodeRateLimited, "another explanation is being computed; retry in a second")
		e.Sluice.RetryAfterMs = 1000
		fail(e)
		return
	case err != nil:
		s.log.Warn("explain failed", "request_id", reqID, "err", err)
		fail(apierr.New(http.StatusServiceUnavailable, apierr.CodeLedgerUnavailable, "the ledger's log could not be read; try again"))
		return
	case x.Tenant != id.Tenant:
		fail(notFound)
		return
	}
	s.m.count("explain")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(x.ForTenant())
}

// explainScopes is what an explanation searches: the current config's
// ledger scopes (scopes) and the providers' scopes themselves, unsplit,
// so that a request decided before a split (in the scope's own
// partition, or in a sub-scope of an earlier split, which the explainer
// finds in the config history) is found, as the CLI finds it. Only the
// partitions searched widen: the answer is still only ever the caller's
// tenant's request (handleExplain).
func explainScopes(cfg *config.Config) []string {
	out := scopes(cfg)
	for _, p := range cfg.Providers {
		if !slices.Contains(out, p.Scope) {
			out = append(out, p.Scope)
		}
	}
	sort.Strings(out)
	return out
}
