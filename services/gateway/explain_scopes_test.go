package gateway

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
)

// TestExplainSearchesTheUnsplitScopeToo: a tenant's GET
// /v1/sluice/requests/{id} on a scope split over 3 partitions asks the
// explainer for the provider scope as well as its sub-scopes, so that the
// explainer searches every sub-scope the config history split it into
// and the scope itself (ledgerd.ExplainScopes): a request decided before
// the split, in the scope's own partition, is found, as the CLI finds it.
// It passed only the current sub-scopes.
func TestExplainSearchesTheUnsplitScopeToo(t *testing.T) {
	cfg := mustLoad(t, strings.Replace(splitYAML(), strings.Repeat("0", 64), config.HashKey("sk-k"), 1))
	var got []string
	s := New(cfg, nil, nil, WithExplainer(func(_ context.Context, _ string, scopes []string) (*ledger.Explanation, error) {
		got = scopes
		return nil, ErrNoRequest
	}))
	req := httptest.NewRequest("GET", "/v1/sluice/requests/r1", nil)
	req.Header.Set("Authorization", "Bearer sk-k")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != 404 {
		t.Errorf("status %d: %s, want 404 (the explainer found nothing)", rec.Code, rec.Body)
	}
	if want := []string{"s", "s#0", "s#1", "s#2"}; !slices.Equal(got, want) {
		t.Errorf("the explainer was asked for scopes %v, want %v", got, want)
	}
}
