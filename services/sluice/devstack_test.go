package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// cleanEnv is this process's environment without the variables `sluice
// dev` prints (and the others a newcomer's shell would not have), so a
// test sees only what the banner gives.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") && !strings.HasPrefix(kv, "OPENAI_") {
			out = append(out, kv)
		}
	}
	return out
}

// startDev runs `sluice dev` with args and returns the NAME=value lines it
// prints (what `set -a; . FILE; set +a` exports) and its comment lines.
func startDev(t *testing.T, args ...string) (env map[string]string, comments []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"dev", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = cleanEnv()
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	env = map[string]string{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			comments = append(comments, l)
			if strings.HasPrefix(l, "# try: ") {
				return env, comments
			}
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	t.Fatalf("sluice dev ended before its try line:\n%s", stderr.String())
	return nil, nil
}

func withEnv(env map[string]string) []string {
	out := cleanEnv()
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// runSluice runs the binary with env and returns stdout; a non-zero exit
// fails the test with stderr.
func runSluice(t *testing.T, env []string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sluice %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestDevStackServesTheOperatorTools is the newcomer's run against `sluice
// dev --config deploy/examples/dev-three-tenants.yaml`: the printed try
// line works as pasted in a shell that has exported nothing, and with only
// the printed lines exported, explain, config history, replay, whatif and
// config apply (of a patch to the dev config itself) work with their
// defaults.
func TestDevStackServesTheOperatorTools(t *testing.T) {
	const example = "../../deploy/examples/dev-three-tenants.yaml"
	env, comments := startDev(t, "--config", example)
	for _, k := range []string{"OPENAI_BASE_URL", "OPENAI_API_KEY", "SLUICE_ADMIN_URL", "SLUICE_ADMIN_TOKEN", "SLUICE_KAFKA_BROKERS", "SLUICE_LEDGER_GROUP"} {
		if env[k] == "" {
			t.Errorf("sluice dev printed no %s= line: %v", k, env)
		}
	}
	// The try line, pasted into a shell that has none of the variables.
	try := strings.TrimPrefix(comments[len(comments)-1], "# try: ")
	sh := exec.Command("sh", "-c", try)
	sh.Env = cleanEnv()
	out, err := sh.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"chat.completion"`) {
		t.Fatalf("try line %q: %v\n%s", try, err, out)
	}

	// A request to explain.
	req, _ := http.NewRequest(http.MethodPost, env["OPENAI_BASE_URL"]+"/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`))
	req.Header.Set("Authorization", "Bearer "+env["OPENAI_API_KEY"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := resp.Header.Get("X-Sluice-Request-Id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("status %d, request id %q: %s", resp.StatusCode, id, body)
	}
	e := withEnv(env)
	if got := runSluice(t, e, "explain", id); !strings.Contains(got, "request "+id) || !strings.Contains(got, "outcome: granted") {
		t.Errorf("explain:\n%s", got)
	}
	if got := runSluice(t, e, "usage"); !strings.Contains(got, "tenant web, key web-app") || !strings.Contains(got, "120 requests/min") ||
		!strings.Contains(got, "2 (burst)") {
		t.Errorf("usage:\n%s", got)
	}
	if got := runSluice(t, e, "usage", "--json"); !strings.Contains(got, `"unit":"requests/min"`) || !strings.Contains(got, `"summary":"`) {
		t.Errorf("usage --json:\n%s", got)
	}
	if got := runSluice(t, e, "config", "history"); !strings.Contains(got, "source sluice dev  actor sluice dev") {
		t.Errorf("config history:\n%s", got)
	}
	// The ledger commits its offsets within its commit interval: replay
	// verifies what is committed, whatif replays it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cmd := exec.Command(bin, "replay", "--verify")
		cmd.Env = e
		got, err := cmd.CombinedOutput()
		if err == nil && !strings.Contains(string(got), "no divergence") {
			t.Fatalf("replay --verify:\n%s", got)
		}
		if err == nil && regexp.MustCompile(`replayed \d+ partitions, [1-9]\d* inputs`).Match(got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replay --verify verified nothing in 30 s: %v\n%s", err, got)
		}
	}
	if got := runSluice(t, e, "whatif", "-q"); !strings.Contains(got, "recorded") || !strings.Contains(got, "0 decisions differ") {
		t.Errorf("whatif:\n%s", got)
	}

	// config apply on a copy of the dev config: ${SIM_URL} stays in the
	// file, and the patched ledger section is published.
	dir := t.TempDir()
	raw, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	cfg, patch := filepath.Join(dir, "dev.yaml"), filepath.Join(dir, "patch.json")
	if err := os.WriteFile(cfg, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(patch, []byte(`{"source":"calibration","buckets":[{"scope":"sim-openai","dimension":"requests","capacity_factor":1.25}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	got := runSluice(t, append(e, "USER=newcomer"), "config", "apply", "--config", cfg, "--reason", "calibrate", "--yes", patch)
	if !strings.Contains(got, "installed") {
		t.Errorf("config apply:\n%s", got)
	}
	if b, _ := os.ReadFile(cfg); !bytes.Contains(b, []byte("${SIM_URL}")) {
		t.Errorf("the patched file lost its ${SIM_URL} placeholder:\n%s", b)
	}
	if got := runSluice(t, e, "config", "history"); !strings.Contains(got, "actor newcomer") || !strings.Contains(got, `reason "calibrate"`) {
		t.Errorf("config history after apply:\n%s", got)
	}
}

// TestExplainShowsAFallbackOnTheDevStack: a batch request that overflows
// its first scope's queue-wait limit falls back to a second scope in
// another partition; `sluice explain` names both attempts and the
// fallback.
func TestExplainShowsAFallbackOnTheDevStack(t *testing.T) {
	const key = "sk-sluice-fallback-test-key"
	a, b := "scope-a", ""
	for i := 0; b == ""; i++ {
		if s := fmt.Sprintf("scope-b%d", i); ledgerd.PartitionOf(s, int(bus.DefaultTopics().RequestPartitions)) !=
			ledgerd.PartitionOf(a, int(bus.DefaultTopics().RequestPartitions)) {
			b = s
		}
	}
	y := fmt.Sprintf(`node: gw-fallback
providers:
  - {name: pa, kind: openai, scope: %[1]s, base_url: "${SIM_URL}/openai/v1"}
  - {name: pb, kind: openai, scope: %[2]s, base_url: "${SIM_URL}/openai/v1"}
routes:
  - model: gpt-4o-mini
    candidates: [{provider: pa}, {provider: pb}]
tenants:
  - id: t
    org: o
    keys:
      - {id: k, sha256: %[3]s, class: batch, fallback_allowed: true}
ledger:
  default_class: batch
  classes:
    - {name: batch, age_offset_ms: 0, max_wait_ms: 1, max_depth: 100, overload: fallback}
  scopes:
    - name: %[1]s
      buckets:
        - {level: tenant, id: t, dimension: requests, capacity: 1, window_ms: 60000}
    - name: %[2]s
      buckets:
        - {level: tenant, id: t, dimension: requests, capacity: 6000}
`, a, b, config.HashKey(key))
	cfg := filepath.Join(t.TempDir(), "fallback.yaml")
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	env, _ := startDev(t, "--config", cfg)
	// The first request takes scope a's quota of one a minute (a window of
	// the whole period, so no pacing interval extends the wait); the second
	// cannot wait 1 ms for the next and falls back to scope b.
	var id string
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest(http.MethodPost, env["OPENAI_BASE_URL"]+"/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		id = resp.Header.Get("X-Sluice-Request-Id")
	}
	got := runSluice(t, withEnv(env), "explain", id)
	t.Logf("sluice explain %s:\n%s", id, got)
	for _, want := range []string{"attempts:", "1. reserved in " + a, "denied", "2. fell back to " + b, "outcome: granted"} {
		if !strings.Contains(got, want) {
			t.Errorf("explain lacks %q:\n%s", want, got)
		}
	}
}
