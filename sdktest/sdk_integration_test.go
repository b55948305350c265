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
)

const (
	demoKey    = "sk-sdk-demo"
	limitedKey = "sk-sdk-limited"
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
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: bus.SplitBrokers(testenv.KafkaBrokers(t)), Topics: names,
		APIKey: demoKey, Config: sdkConfig})
	if err != nil {
		t.Fatalf("dev stack on the real broker: %v", err)
	}
	defer st.Close()

	abs, _ := filepath.Abs("test_sdk.py")
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning", abs)
	cmd.Env = append(os.Environ(), "SLUICE_BASE_URL="+st.GatewayURL, "SLUICE_API_KEY="+demoKey, "SLUICE_LIMITED_KEY="+limitedKey,
		"OPENAI_LOG=", "ANTHROPIC_LOG=")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("SDK tests failed: %v", err)
	}
}

// sdkConfig is the dev config plus a key whose budget is one request per
// hour, to provoke a local 429.
func sdkConfig(simURL string) (*config.Config, error) {
	lc := ledger.DefaultDevConfig()
	lc.Scopes[0].Buckets = []ledger.BucketConfig{
		{Level: ledger.LevelKey, ID: "*", Dimension: schemas.DimRequests, Capacity: 10_000, PeriodMs: 60_000},
		{Level: ledger.LevelKey, ID: "limited-key", Dimension: schemas.DimRequests, Capacity: 1, PeriodMs: 3_600_000, WindowMs: 3_600_000},
	}
	c := lc.Scopes[0]
	c.Name = "sim-anthropic"
	lc.Scopes = append(lc.Scopes, c)
	led, err := json.Marshal(lc)
	if err != nil {
		return nil, err
	}
	y := fmt.Sprintf(`node: gw-sdk
providers:
  - {name: sim-openai, kind: openai, scope: sim-openai, base_url: %[1]s/openai/v1}
  - {name: sim-anthropic, kind: anthropic, scope: sim-anthropic, base_url: %[1]s/anthropic/v1}
routes:
  - {model: gpt-4o-mini, provider: sim-openai}
  - {model: text-embedding-3-small, provider: sim-openai}
  - {model: claude-sonnet-4-5, provider: sim-anthropic}
tenants:
  - id: demo
    keys:
      - {id: demo-key, sha256: %[2]s}
      - {id: limited-key, sha256: %[3]s}
ledger: %[4]s
`, simURL, config.HashKey(demoKey), config.HashKey(limitedKey), led)
	return config.Load(strings.NewReader(y))
}
