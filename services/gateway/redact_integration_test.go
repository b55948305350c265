//go:build integration

package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/dev"
	"github.com/sluice-dev/sluice/services/sim"
)

// Keys of no shape provider.ScrubMessage knows (32 letters and digits, no
// sk- prefix, not hex): only the literal redaction catches them.
const (
	echoProviderKey = "Q7wErTy2UiOp9AsDfGh3JkLzXcVbNm4q"
	echoClientKey   = "cliKey42ForTenantAlphaQQrrSS77tt"
)

// TestProviderEchoedKeyRedactedRealBroker is issue 19's D4 on the real
// broker: the provider quotes the key the gateway sent it in every 429.
// Neither the client's answer nor any ProviderRejected record on the
// requests topic may hold it; both must show that something was redacted
// (so the echo really happened).
func TestProviderEchoedKeyRedactedRealBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	brokers := bus.SplitBrokers(testenv.KafkaBrokers(t))
	names := bus.NamesWithPrefix(fmt.Sprintf("test%d.redact.", time.Now().UnixNano()))
	t.Setenv("SLUICE_TEST_ECHO_PROVIDER_KEY", echoProviderKey)

	sc := sim.DefaultConfig()
	sc.Storms = []sim.Storm{{Kind: "429", Provider: sim.OpenAI, EchoKey: true, RetryAfter: sim.Duration(200 * time.Millisecond)}}
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: brokers, Topics: names, APIKey: echoClientKey, Sim: &sc,
		Config: func(simURL string) (*config.Config, error) { return echoConfig(simURL) }})
	if err != nil {
		t.Fatalf("dev stack on the real broker: %v", err)
	}
	defer st.Close()

	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.GatewayURL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+echoClientKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Sluice-Deadline-Ms", "3000")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	reqID := resp.Header.Get("X-Sluice-Request-Id")
	t.Logf("client answer %d: %s", resp.StatusCode, raw)
	if resp.StatusCode < 400 || reqID == "" {
		t.Fatalf("want a refusal with a request id, got %d %q: %s", resp.StatusCode, reqID, raw)
	}
	checkNoKey(t, "client answer", string(raw))
	if !strings.Contains(string(raw), "[REDACTED]") {
		t.Errorf("client answer shows no redaction, so the echo never reached it: %s", raw)
	}

	// Every ProviderRejected of the request on the (new, test-only)
	// requests topic, read from its start up to its end.
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second, kgo.ConsumeTopics(names.Requests),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rejected []schemas.ProviderRejected
	for len(rejected) == 0 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			checkNoKey(t, "requests record", string(r.Value))
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.RequestID == reqID && ev.ProviderRejected != nil {
				rejected = append(rejected, *ev.ProviderRejected)
			}
		})
	}
	if len(rejected) == 0 {
		t.Fatalf("no ProviderRejected for %s on %s", reqID, names.Requests)
	}
	for _, pr := range rejected {
		if !strings.Contains(pr.Message, "[REDACTED]") {
			t.Errorf("ProviderRejected message %q shows no redaction", pr.Message)
		}
	}
	t.Logf("%d ProviderRejected, first message %q", len(rejected), rejected[0].Message)
}

func checkNoKey(t *testing.T, where, s string) {
	t.Helper()
	for _, k := range []string{echoProviderKey, echoClientKey} {
		if strings.Contains(s, k) {
			t.Errorf("%s holds the key %s: %s", where, k, s)
		}
	}
}

// echoConfig is the dev config with one provider whose key comes from the
// environment (the simulator accepts any).
func echoConfig(simURL string) (*config.Config, error) {
	led, err := json.Marshal(ledger.DefaultDevConfig())
	if err != nil {
		return nil, err
	}
	return config.Load(strings.NewReader(fmt.Sprintf(`node: gw-redact
providers:
  - {name: sim-openai, kind: openai, scope: sim-openai, base_url: %s/openai/v1, api_key_env: SLUICE_TEST_ECHO_PROVIDER_KEY}
routes:
  - {model: gpt-4o-mini, provider: sim-openai, profile: gpt-4o-mini}
tenants:
  - id: demo
    keys:
      - {id: demo-key, sha256: %s, class: interactive}
ledger: %s
`, simURL, config.HashKey(echoClientKey), led)))
}
