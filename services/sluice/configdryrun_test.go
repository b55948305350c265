package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/analytics/report"
)

// TestConfigApplyDryRun: --dry-run prints the diff and the validation of
// the patched file and changes nothing, with no broker reachable (the
// brokers flag points at a closed port); a patch that cannot apply is an
// error.
func TestConfigApplyDryRun(t *testing.T) {
	src, err := os.ReadFile("../../deploy/examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		patch   report.Patch
		wantOut string
	}{
		{"valid", report.Patch{Source: report.PatchSource, Routes: []report.RoutePatch{{Route: "claude-sonnet-4-5", P95OutputTokens: 1500}}}, "validates"},
		// Refused (input_correction outside the estimator's range).
		{"invalid", report.Patch{Source: report.PatchSource, Routes: []report.RoutePatch{{Route: "claude-sonnet-4-5", InputCorrection: 1000}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "sluice.yaml")
			if err := os.WriteFile(cfg, src, 0o644); err != nil {
				t.Fatal(err)
			}
			pb, _ := json.Marshal(tc.patch)
			pp := filepath.Join(dir, "patch.json")
			if err := os.WriteFile(pp, pb, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.wantOut != "" {
				p, err := report.ParsePatch(pb)
				if err != nil {
					t.Fatal(err)
				}
				fillCredentialEnv(src)
				var out bytes.Buffer
				if err := dryRunApply(&out, cfg, src, p); err != nil || !strings.Contains(out.String(), tc.wantOut) {
					t.Errorf("err %v, output %q; want %q", err, out.String(), tc.wantOut)
				}
			}
			// The whole command: no broker at 127.0.0.1:1, still a dry run.
			if err := runConfig(t.Context(), []string{"apply", "--dry-run", "--config", cfg, "--brokers", "127.0.0.1:1", pp}); (err == nil) != (tc.name == "valid") {
				t.Errorf("runConfig --dry-run: %v", err)
			}
			if after, _ := os.ReadFile(cfg); !bytes.Equal(after, src) {
				t.Error("a dry run changed the gateway file")
			}
		})
	}
}
