//go:build integration

// Package alerts holds the test of the alerting rules against a real
// Prometheus (sluice.rules.yml; sluice.test.yml holds the promtool unit
// tests).
package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/services/loadtest"
)

// TestProvider429AlertFiresDuringTheStorm runs the storm scenario on an
// embedded stack while a real Prometheus (Debian's package, installed by
// deploy/local/prometheus.sh) scrapes the gateway's /metrics with the
// project's rules loaded, and waits for SluiceProvider429Spike to fire.
// The scenario runs 75 s instead of 40 s so the rule's `for: 30s` can pass
// while the storm's 429s are still inside its 1-minute rate window; the test
// fails if the alert has not fired when the scenario ends.
func TestProvider429AlertFiresDuringTheStorm(t *testing.T) {
	bin := os.Getenv("SLUICE_PROMETHEUS")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("prometheus"); err != nil {
			t.Fatalf("prometheus not found (run deploy/local/prometheus.sh install, or set SLUICE_PROMETHEUS): %v", err)
		}
	}
	rules, err := filepath.Abs("sluice.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	targets := filepath.Join(dir, "targets.json")
	if err := os.WriteFile(targets, []byte("[]"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The gateway's address is known only once the stack is up: file-based
	// discovery picks it up when Started writes it.
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: sluice-gateway
    file_sd_configs: [{files: [%q], refresh_interval: 1s}]
`, rules, targets)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prom := exec.CommandContext(ctx, bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	promLog, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	prom.Stdout, prom.Stderr = promLog, promLog
	if err := prom.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	defer func() {
		_ = prom.Process.Kill()
		_ = prom.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(promLog.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	}()
	api := "http://" + addr
	waitReady(t, ctx, api)

	sc, err := loadtest.LoadScenario("storm", "../../deploy/scenarios")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := loadtest.Execute(ctx, sc, loadtest.Options{Embedded: true, Duration: 75 * time.Second, Retries: -1, Drain: 10 * time.Second,
			Started: func(metricsURL, _ string) {
				u, _ := url.Parse(metricsURL)
				b, _ := json.Marshal([]map[string]any{{"targets": []string{u.Host}}})
				if err := os.WriteFile(targets, b, 0o644); err != nil {
					t.Errorf("write targets: %v", err)
				}
			}}, io.Discard)
		done <- err
	}()

	var seen string
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("storm scenario: %v", err)
			}
			t.Fatalf("the storm ended and SluiceProvider429Spike never fired; last alerts: %s", seen)
		case <-time.After(time.Second):
		}
		alerts, raw := firing(t, ctx, api)
		seen = raw
		if a, ok := alerts["SluiceProvider429Spike"]; ok {
			t.Logf("SluiceProvider429Spike firing: %s", a)
			cancel() // stops the scenario
			<-done
			return
		}
	}
}

// firing returns the alerts in state firing by name (their labels and
// annotations as JSON), and the raw answer of /api/v1/alerts.
func firing(t *testing.T, ctx context.Context, api string) (map[string]string, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+"/api/v1/alerts", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("prometheus /api/v1/alerts: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Data struct {
			Alerts []struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
				State       string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("prometheus /api/v1/alerts: %v: %s", err, b)
	}
	m := map[string]string{}
	for _, a := range out.Data.Alerts {
		if a.State == "firing" {
			j, _ := json.Marshal(a)
			m[a.Labels["alertname"]] = string(j)
		}
	}
	return m, strings.TrimSpace(string(b))
}

func waitReady(t *testing.T, ctx context.Context, api string) {
	t.Helper()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+"/-/ready", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("prometheus did not become ready: %v", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
