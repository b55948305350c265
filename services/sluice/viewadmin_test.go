package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/services/admin"
	"github.com/sluice-dev/sluice/services/dev"
)

// TestViewKeysAdminPrecedence: the view takes keys as a gateway does — the
// file's until the first admin change, then the admin state's alone (a key
// the file lists but the state lacks or revoked is refused; a key made
// through the admin API opens its tenant's view) — and a file reload
// afterwards does not bring the file's keys back.
func TestViewKeysAdminPrecedence(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/examples/dev-three-tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(raw), dev.SimURLPlaceholder, "http://127.0.0.1:1")), 0o600); err != nil {
		t.Fatal(err)
	}
	k := &viewKeys{path: path, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := k.load(); err != nil {
		t.Fatal(err)
	}
	// Version 0: the file's seed, as the admin store starts from it.
	seed := admin.Seed(k.cur.Load())
	k.applyAdmin(seed)

	// Version 1: web's key kept, agents' key revoked, nightly gone, a new
	// tenant shop with a key only the admin API knows.
	v1 := seed.Clone()
	v1.Version = 1
	var kept []admin.Tenant
	for _, tn := range v1.Tenants {
		switch tn.ID {
		case "agents":
			for i := range tn.Keys {
				tn.Keys[i].Revoked = true
			}
		case "nightly":
			continue
		}
		kept = append(kept, tn)
	}
	v1.Tenants = append(kept, admin.Tenant{ID: "shop", Keys: []admin.Key{{ID: "shop-app", SHA256: strings.ToUpper(config.HashKey("sk-shop"))}}})
	// Version 2: web's key paused (its owner still sees why it is refused).
	v2 := v1.Clone()
	v2.Version = 2
	v2.Tenants[0].Keys[0].Paused = true

	type want map[string]string // key → tenant ("" refused)
	for _, step := range []struct {
		name  string
		apply func()
		want  want
	}{
		{"file only", func() {}, want{"sk-sluice-dev-web": "web", "sk-sluice-dev-agent": "agents", "sk-sluice-dev-batch": "nightly", "sk-shop": ""}},
		{"first admin change", func() { k.applyAdmin(v1) }, want{"sk-sluice-dev-web": "web", "sk-sluice-dev-agent": "", "sk-sluice-dev-batch": "", "sk-shop": "shop"}},
		{"file reloaded", func() {
			if err := k.load(); err != nil {
				t.Fatal(err)
			}
		}, want{"sk-sluice-dev-agent": "", "sk-sluice-dev-batch": "", "sk-shop": "shop"}},
		{"key paused", func() { k.applyAdmin(v2) }, want{"sk-sluice-dev-web": "web", "sk-nope": ""}},
	} {
		step.apply()
		for key, tenant := range step.want {
			if got, ok := k.lookup(key); got != tenant || ok != (tenant != "") {
				t.Errorf("%s: lookup(%s) = %q %v, want %q", step.name, key, got, ok, tenant)
			}
		}
	}
}
