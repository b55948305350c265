package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/services/dev"
)

// TestViewKeysFollowTheConfig: the view's key lookup follows its gateway
// config file: a key disabled there stops opening its tenant's view, and a
// broken file keeps the keys in force.
func TestViewKeysFollowTheConfig(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/examples/dev-three-tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	good := strings.ReplaceAll(string(raw), dev.SimURLPlaceholder, "http://127.0.0.1:1")
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(good)
	k := &viewKeys{path: path, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := k.load(); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"sk-sluice-dev-web": "web", "sk-sluice-dev-agent": "agents", "sk-nope": ""} {
		if got, ok := k.lookup(key); got != want || ok != (want != "") {
			t.Errorf("lookup(%s) = %q %v, want %q", key, got, ok, want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.watch(ctx, 10*time.Millisecond)

	// Disable web's key (the file changes size, so the change is seen
	// whatever the file system's mtime granularity).
	write(strings.Replace(good, "team: frontend, class: interactive}", "team: frontend, class: interactive, disabled: true}", 1))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := k.lookup("sk-sluice-dev-web"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the disabled key still opens its view")
		}
	}
	// A broken file keeps the keys in force.
	write("tenants: [")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if fi := k.seen.Load(); fi != nil && (*fi).Size() == int64(len("tenants: [")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the broken file was never looked at")
		}
	}
	if got, ok := k.lookup("sk-sluice-dev-agent"); !ok || got != "agents" {
		t.Errorf("after a broken file: %q %v, want the keys in force", got, ok)
	}
}
