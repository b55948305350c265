package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// TestConfigHistory: three changes published to an embedded broker (the
// second refused by the ledger) are listed oldest first with source, actor
// and reason, each diffed against the last installed document.
func TestConfigHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := testenv.Kfake(t, ctx, "histtest.", 2)
	brokers, names := k.Brokers, k.Names
	changes := []schemas.ConfigChanged{
		{Source: "deploy/examples/sluice.yaml", Actor: "alice", Reason: "first install",
			Ledger: []byte(`{"scopes":[{"name":"s","buckets":[{"level":"key","id":"*","dimension":"requests","capacity":600}]}]}`)},
		{Source: "admin API", Actor: "bob", Ledger: []byte(`{"scopes":[]}`)},
		{Source: "calibration", Actor: "carol", Reason: "weekly calibration",
			Ledger: []byte(`{"scopes":[{"name":"s","buckets":[{"level":"key","id":"*","dimension":"requests","capacity":300}]}]}`)},
	}
	for _, cc := range changes {
		if err := ledgerd.PublishConfigChange(ctx, brokers, names, cc); err != nil {
			t.Fatal(err)
		}
	}
	hist, err := ledgerd.ConfigHistory(ctx, brokers, names, 1)
	if err != nil {
		t.Fatal(err)
	}
	entries := configHistory(hist)
	if len(entries) != 3 {
		t.Fatalf("%d entries, want 3: %+v", len(entries), entries)
	}
	for i, e := range entries {
		if e.Actor != changes[i].Actor || e.Source != changes[i].Source || e.Reason != changes[i].Reason || e.Version == "" {
			t.Errorf("entry %d: %+v, published %+v", i, e, changes[i])
		}
	}
	if entries[1].Refused == "" || entries[0].Refused != "" || entries[2].Refused != "" {
		t.Errorf("refused: %q %q %q; want only the second", entries[0].Refused, entries[1].Refused, entries[2].Refused)
	}
	// The third is diffed against the first (the second changed nothing).
	if d := entries[2].Diff; len(d) != 1 || d[0].String() != "~ scopes[s].buckets[key:*:requests].capacity: 600 → 300" {
		t.Errorf("third diff: %v", d)
	}
	var out bytes.Buffer
	printConfigHistory(&out, entries)
	for _, want := range []string{"actor alice", `reason "first install"`, "refused by the ledger", "actor carol",
		"~ scopes[s].buckets[key:*:requests].capacity: 600 → 300", "+ scopes: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("history output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestConfigHistoryShowsAdminChanges: an admin change that leaves the
// ledger document as it was (pause, rotate, revoke, resume, key create)
// says what it did instead of "(no change)".
func TestConfigHistoryShowsAdminChanges(t *testing.T) {
	doc := []byte(`{"scopes":[{"name":"s","buckets":[{"level":"key","id":"*","dimension":"requests","capacity":600}]}]}`)
	var hist []ledgerd.ConfigEntry
	kinds := []string{"", "key.pause tenant=web key=web-app", "key.rotate tenant=web key=web-app",
		"key.revoke tenant=web key=web-app", "tenant.resume tenant=web", "key.create tenant=web key=k2"}
	for i, ch := range kinds {
		hist = append(hist, ledgerd.ConfigEntry{Offset: int64(i), LogTimeMs: int64(i) * 1000,
			Change: schemas.ConfigChanged{ConfigVersion: "v", Source: "admin API", Actor: "op", Change: ch, Ledger: doc}})
	}
	entries := configHistory(hist)
	for i, e := range entries {
		if e.Change != kinds[i] {
			t.Errorf("entry %d: change %q, want %q", i, e.Change, kinds[i])
		}
	}
	var out bytes.Buffer
	printConfigHistory(&out, entries[1:])
	if strings.Contains(out.String(), "(no change)") {
		t.Errorf("admin changes shown as no change:\n%s", out.String())
	}
	for _, want := range kinds[1:] {
		if !strings.Contains(out.String(), "admin: "+want) {
			t.Errorf("history output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestLoadPatchedResolvesTheDevPlaceholder: a patched dev config (its
// provider URLs are ${SIM_URL}/…) validates as `sluice dev` loads it.
func TestLoadPatchedResolvesTheDevPlaceholder(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/examples/dev-three-tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadPatched(raw); err != nil {
		t.Fatalf("dev config: %v", err)
	}
}
