//go:build integration

package sdktest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/dev"
	"github.com/sluice-dev/sluice/services/sim"
)

const (
	demoKey    = "sk-sdk-demo"
	limitedKey = "sk-sdk-limited"
	// Keys of test_sdk_errors.py: one per identity refusal, and one whose
	// Sluice quota is one request per day.
	disabledKey = "sk-sdk-disabled"
	pausedKey   = "sk-sdk-paused"
	quotaKey    = "sk-sdk-quota"
	burstKey    = "sk-sdk-burst" // one request per 2 s
	// A batch tenant's key entitled to batch at priority 0 and two models,
	// and a key that expired.
	batchKey   = "sk-sdk-batch"
	expiredKey = "sk-sdk-expired"
)

// TestOfficialSDKs starts the dev stack on the real broker and runs
// test_sdk.py with the SDKs pinned in requirements.txt (setup.sh installs
// them when the venv is missing or stale).
func TestOfficialSDKs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	setup, err := exec.CommandContext(ctx, "bash", "setup.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("sdktest/setup.sh: %v\n%s", err, setup)
	}
	lines := strings.Split(strings.TrimSpace(string(setup)), "\n")
	python := lines[len(lines)-1]

	names := bus.NamesWithPrefix(fmt.Sprintf("test%d.", time.Now().UnixNano()))
	simCfg := sdkSim()
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: bus.SplitBrokers(testenv.KafkaBrokers(t)), Topics: names,
		APIKey: demoKey, Config: sdkConfig, Sim: &simCfg})
	if err != nil {
		t.Fatalf("dev stack on the real broker: %v", err)
	}
	defer st.Close()

	pytest := func(t *testing.T, file string, args ...string) {
		abs, _ := filepath.Abs(file)
		args = append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"}, append(args, abs)...)
		cmd := exec.CommandContext(ctx, python, args...)
		cmd.Env = append(os.Environ(), "SLUICE_BASE_URL="+st.GatewayURL, "SLUICE_API_KEY="+demoKey, "SLUICE_LIMITED_KEY="+limitedKey,
			"SLUICE_DISABLED_KEY="+disabledKey, "SLUICE_PAUSED_KEY="+pausedKey, "SLUICE_QUOTA_KEY="+quotaKey, "SLUICE_BURST_KEY="+burstKey,
			"SLUICE_BATCH_KEY="+batchKey, "SLUICE_EXPIRED_KEY="+expiredKey,
			"SLUICE_SIM_URL="+st.SimURL, "OPENAI_LOG=", "ANTHROPIC_LOG=")
		out, err := cmd.CombinedOutput()
		t.Logf("pytest %s:\n%s", file, out)
		if err != nil {
			t.Fatalf("SDK tests failed: %v", err)
		}
	}
	t.Run("api", func(t *testing.T) { pytest(t, "test_sdk.py") })
	// The Responses API, legacy completions, n choices, tool calls and
	// structured output.
	t.Run("surface", func(t *testing.T) { pytest(t, "test_sdk_surface.py") })
	// Chat completions to Claude, translated to Anthropic Messages: plain,
	// streamed, tools, structured output and the refusals.
	t.Run("claude", func(t *testing.T) { pytest(t, "test_sdk_claude.py") })
	// Provider errors that can never succeed, at the SDKs' default retry
	// settings: one attempt each (-s prints the count and the time taken).
	t.Run("final errors", func(t *testing.T) { pytest(t, "test_sdk_final.py", "-s") })
	// Every error code the stack can be made to answer, through both SDKs
	// at their defaults: attempts and wall time (-s prints the table,
	// docs/gateway.md keeps it).
	t.Run("error table", func(t *testing.T) { pytest(t, "test_sdk_errors.py", "-s") })
}

// sdkSim is the simulator's default config plus two models that allow one
// request per day, so the second gets the provider's per-day 429.
func sdkSim() sim.Config {
	c := sim.DefaultConfig()
	g := c.Providers[sim.Gemini]
	g.ModelLimits = map[string]sim.Limits{"gemini-daily": {RPM: 1000, ITPM: 1_000_000, RPD: 1}}
	c.Providers[sim.Gemini] = g
	a := c.Providers[sim.Anthropic]
	a.ModelLimits = map[string]sim.Limits{"claude-daily": {RPM: 1000, ITPM: 450_000, OTPM: 90_000, RPD: 1}}
	c.Providers[sim.Anthropic] = a
	return c
}

// sdkConfig is the dev config plus a key whose budget is one request per
// hour, to provoke a local 429.
func sdkConfig(simURL string) (*config.Config, error) {
	lc := ledger.DefaultDevConfig()
	lc.Scopes[0].Buckets = []ledger.BucketConfig{
		{Level: ledger.LevelKey, ID: "*", Dimension: schemas.DimRequests, Capacity: 10_000, PeriodMs: 60_000},
		{Level: ledger.LevelKey, ID: "limited-key", Dimension: schemas.DimRequests, Capacity: 1, PeriodMs: 3_600_000, WindowMs: 3_600_000},
		{Level: ledger.LevelKey, ID: "quota-key", Dimension: schemas.DimRequestsPerDay, Capacity: 1},
		{Level: ledger.LevelKey, ID: "burst-key", Dimension: schemas.DimRequests, Capacity: 1, PeriodMs: 2_000, WindowMs: 2_000},
	}
	// The per-day models have scopes of their own: a spent provider quota
	// closes its whole scope in the ledger.
	for _, name := range []string{"sim-anthropic", "sim-gemini-daily", "sim-anthropic-daily"} {
		c := lc.Scopes[0]
		c.Name = name
		lc.Scopes = append(lc.Scopes, c)
	}
	led, err := json.Marshal(lc)
	if err != nil {
		return nil, err
	}
	y := fmt.Sprintf(`node: gw-sdk
providers:
  - {name: sim-openai, kind: openai, scope: sim-openai, base_url: %[1]s/openai/v1}
  - {name: sim-anthropic, kind: anthropic, scope: sim-anthropic, base_url: %[1]s/anthropic/v1}
  - {name: sim-gemini-daily, kind: gemini, scope: sim-gemini-daily, base_url: %[1]s/gemini/v1beta}
  - {name: sim-anthropic-daily, kind: anthropic, scope: sim-anthropic-daily, base_url: %[1]s/anthropic/v1}
routes:
  - {model: gpt-4o-mini, provider: sim-openai}
  - {model: o4-mini, provider: sim-openai}
  - {model: gpt-3.5-turbo-instruct, provider: sim-openai}
  - {model: text-embedding-3-small, provider: sim-openai}
  - {model: claude-sonnet-4-5, provider: sim-anthropic}
  - {model: gemini-daily, provider: sim-gemini-daily}
  - {model: claude-daily, provider: sim-anthropic-daily}
tenants:
  - id: demo
    keys:
      - {id: demo-key, sha256: %[2]s}
      - {id: limited-key, sha256: %[3]s}
      - {id: disabled-key, sha256: %[5]s, disabled: true}
      - {id: paused-key, sha256: %[6]s, paused: true}
      - {id: quota-key, sha256: %[7]s}
      - {id: burst-key, sha256: %[8]s}
  - id: batchco
    allowed_classes: [batch]
    max_priority: 0
    keys:
      - {id: batch-key, sha256: %[9]s, class: batch, allowed_models: [gpt-4o-mini, claude-sonnet-4-5]}
      - {id: expired-key, sha256: %[10]s, class: batch, expires_at: "2026-01-01T00:00:00Z"}
ledger: %[4]s
`, simURL, config.HashKey(demoKey), config.HashKey(limitedKey), led, config.HashKey(disabledKey), config.HashKey(pausedKey), config.HashKey(quotaKey), config.HashKey(burstKey),
		config.HashKey(batchKey), config.HashKey(expiredKey))
	return config.Load(strings.NewReader(y))
}
