package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/schemas"
)

// TestDisconnectWhileQueuedReleasesAtOnce: a client that gives up while
// its request waits in the ledger's queue releases the reservation then,
// not when the class's wait or the deadline runs out: the Released is in
// the log while the request ahead of it still holds the only slot.
func TestDisconnectWhileQueuedReleasesAtOnce(t *testing.T) {
	f := newFakeUpstream(t)
	arrived, release := make(chan struct{}), make(chan struct{})
	f.script("fake-slow", func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		okHandler(w, r)
	})
	st := startStack(t, func(string) string {
		return fmt.Sprintf(`node: gw-test
providers:
  - {name: fake, kind: openai, scope: s, base_url: %s/openai/v1}
routes:
  - {model: fake-slow, provider: fake}
tenants:
  - id: demo
    keys:
      - {id: first, sha256: %s, class: interactive}
      - {id: second, sha256: %s, class: batch}
ledger:
  classes:
    - {name: interactive, age_offset_ms: 0, max_wait_ms: 300, max_depth: 10}
    - {name: batch, age_offset_ms: 30000, max_wait_ms: 600000, max_depth: 10, deadline_ms: 600000}
  scopes:
    - name: s
      buckets:
        - {level: deployment, id: fake, dimension: concurrency, capacity: 1}
`, f.URL, config.HashKey(keyDemo), config.HashKey(keyBatch))
	})
	body := `{"model":"fake-slow","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", st.GatewayURL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keyDemo)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-arrived // the first request holds the deployment's one slot

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", st.GatewayURL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keyBatch)
		req.Header.Set("X-Stainless-Read-Timeout", "600.0")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	second := func(e schemas.Event) bool { return e.KeyID == "second" }
	var reqID string
	st.events(t, "", func(evs []schemas.Event) bool {
		for _, e := range evs {
			if second(e) && e.Decision != nil && e.Decision.Status == schemas.StatusQueued {
				reqID = e.RequestID
				return true
			}
		}
		return false
	})
	cancel() // the second client hangs up while queued
	<-gone
	evs := st.events(t, reqID, func(evs []schemas.Event) bool { return has(evs, ofType(schemas.TypeReleased)) })
	for _, e := range evs {
		if e.Released != nil && e.Released.Reason != schemas.ReasonCancel {
			t.Errorf("released with reason %q, want %q", e.Released.Reason, schemas.ReasonCancel)
		}
		if rr := e.ReserveRequested; rr != nil && (rr.DeadlineMs > 600_000 || rr.DeadlineMs < 590_000) {
			t.Errorf("deadline %d, want the SDK's 600 s less the time before the reservation", rr.DeadlineMs)
		}
	}
	select {
	case code := <-first:
		t.Fatalf("the first request ended (%d) before the check: the release was not shown to come first", code)
	default:
	}
	close(release)
	if code := <-first; code != 200 {
		t.Fatalf("first: %d", code)
	}
}
