package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/services/dev"
)

// TestAnswersWhileTheBrokerIsFrozen (issue 19, D2): while the broker
// accepts connections and answers no produce (a SIGSTOPped broker), every
// request gets its answer — 503 ledger_unavailable with Retry-After — at
// its deadline or ledger_timeout_ms, whichever is first; none waits for
// the broker. Before, the reserve's produce waited for the broker's ack
// (an idempotent producer does not give up a record it sent), and the
// request hung until the broker came back. Once it thaws, requests are
// served again.
func TestAnswersWhileTheBrokerIsFrozen(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := bus.NamesWithPrefix(fmt.Sprintf("gwfreeze%d.", time.Now().UnixNano()))
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: cluster.ListenAddrs(), Topics: names, APIKey: keyDemo,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Config: func(u string) (*config.Config, error) {
			return config.Load(strings.NewReader(testYAML(u, "", "", "ledger_timeout_ms: 600")))
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := &stack{Stack: st, names: names}
	const body = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	if resp, b := s.do(t, "POST", "/v1/chat/completions", keyDemo, body); resp.StatusCode != 200 {
		t.Fatalf("before the freeze: %d %s", resp.StatusCode, b)
	}

	thaw := testenv.FreezeProduce(cluster)
	defer thaw()

	// A client that gives up after 20 s: far past every bound here, so a
	// timeout is a hang, not a slow answer.
	hc := &http.Client{Timeout: 20 * time.Second}
	cases := []struct {
		name     string
		deadline string // X-Sluice-Deadline-Ms; "" none (ledger_timeout_ms bounds it)
	}{
		{"deadline 300 ms", "300"},
		{"deadline 3000 ms", "3000"},
		{"no deadline", ""},
		{"no deadline again", ""},
	}
	type result struct {
		status     int
		code       string
		retryAfter string
		err        error
	}
	results := make([]result, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", s.GatewayURL+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+keyDemo)
			if c.deadline != "" {
				req.Header.Set("X-Sluice-Deadline-Ms", c.deadline)
			}
			resp, err := hc.Do(req)
			if err != nil {
				results[i].err = err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			results[i] = result{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), code: decodeError(t, b, false).Code}
		}()
	}
	wg.Wait()
	for i, c := range cases {
		r := results[i]
		if r.err != nil {
			t.Errorf("%s: no answer while frozen: %v", c.name, r.err)
			continue
		}
		if r.status != 503 || r.code != "ledger_unavailable" || r.retryAfter == "" {
			t.Errorf("%s: %d %q Retry-After %q, want 503 ledger_unavailable with Retry-After", c.name, r.status, r.code, r.retryAfter)
		}
	}

	thaw()
	var last string
	for try := 0; try < 60; try++ {
		resp, b := s.do(t, "POST", "/v1/chat/completions", keyDemo, body)
		if resp.StatusCode == 200 {
			return
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("not served again after the thaw: %s", last)
}
