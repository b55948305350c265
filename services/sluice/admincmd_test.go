package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/services/admin"
)

// TestAdminClientFillsVersionAndReason runs `sluice admin` against an admin
// handler: a change without base_version gets the current one, and an
// error answer is an error.
func TestAdminClientFillsVersionAndReason(t *testing.T) {
	file, err := config.Load(strings.NewReader(`providers:
  - {name: p, kind: openai, scope: s, base_url: "http://127.0.0.1:1/v1"}
routes:
  - {model: m, provider: p}
ledger:
  scopes:
    - {name: s, buckets: [{level: deployment, id: p, dimension: requests, capacity: 100}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	store := admin.NewMemStore(admin.Seed(file), nil, nil)
	h, err := admin.NewHandler(store, "cli-test-operator-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	t.Setenv("SLUICE_ADMIN_URL", srv.URL+"/admin/v1")
	t.Setenv("SLUICE_ADMIN_TOKEN", "cli-test-operator-token")
	ctx := context.Background()
	for _, args := range [][]string{
		{"--reason", "onboarding", "--actor", "alice", "POST", "/tenants", `{"id":"shop"}`},
		{"--reason", "incident", "POST", "tenants/shop/pause"},
		{"GET", "/tenants/shop"},
	} {
		if err := runAdmin(ctx, args); err != nil {
			t.Fatalf("sluice admin %v: %v", args, err)
		}
	}
	if st := store.State(); st.Version != 2 || !st.Tenants[0].Paused {
		t.Fatalf("state %+v", st)
	}
	if got := store.Committed[0].Actor; got != "operator:alice" {
		t.Errorf("actor %q", got)
	}
	if err := runAdmin(ctx, []string{"POST", "/tenants", `{"id":"x"}`}); err == nil || !strings.Contains(err.Error(), "--reason") {
		t.Errorf("a change without a reason: %v", err)
	}
	if err := runAdmin(ctx, []string{"--reason", "r", "POST", "/tenants/nope/pause"}); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Errorf("an error answer: %v", err)
	}
}

// TestAdminHelpExitsZero: `sluice admin --help` prints its usage and exits 0
// (kept here, not in main_test.go's list, so the two files change apart).
func TestAdminHelpExitsZero(t *testing.T) {
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "admin", "--help")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sluice admin --help: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "METHOD PATH") {
		t.Fatalf("usage not printed: %s", stderr.String())
	}
}
