//go:build integration

package dev_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/dev"
)

// TestChatCompletionEndToEnd runs the walking skeleton on the real broker:
// a chat completion travels gateway → ReserveRequested → ledger → Decision
// → gateway → simulator → response with usage → Reconciled, and all three
// events are observed on the bus.
func TestChatCompletionEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	brokers := bus.SplitBrokers(testenv.KafkaBrokers(t))

	names := bus.NamesWithPrefix(fmt.Sprintf("test%d.", time.Now().UnixNano()))
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: brokers, Topics: names})
	if err != nil {
		t.Fatalf("dev stack on the real broker: %v", err)
	}
	defer st.Close()

	// Watch the bus from its current end, before the request is sent.
	watch := watcher(ctx, t, brokers, names)

	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello to Sluice."}],"max_tokens":64}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.GatewayURL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+st.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var out struct {
		Object string `json:"object"`
		Usage  struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Object != "chat.completion" || out.Usage.PromptTokens == 0 {
		t.Fatalf("not a chat completion with usage: %s", raw)
	}
	reqID := resp.Header.Get("X-Sluice-Request-Id")
	if reqID == "" {
		t.Fatal("no X-Sluice-Request-Id")
	}

	seen := map[schemas.Type]*schemas.Event{}
	for len(seen) < 3 && ctx.Err() == nil {
		fs := watch.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.RequestID == reqID {
				switch ev.Type {
				case schemas.TypeReserveRequested, schemas.TypeDecision, schemas.TypeReconciled:
					seen[ev.Type] = &ev
				}
			}
		})
	}
	for _, ty := range []schemas.Type{schemas.TypeReserveRequested, schemas.TypeDecision, schemas.TypeReconciled} {
		if seen[ty] == nil {
			t.Fatalf("%s for %s not observed on the bus (saw %v)", ty, reqID, seen)
		}
	}
	if d := seen[schemas.TypeDecision].Decision; d.Status != schemas.StatusGranted {
		t.Errorf("decision %+v, want granted", d)
	}
	if rc := seen[schemas.TypeReconciled].Reconciled; rc.OutputTokens != out.Usage.CompletionTokens || rc.InputTokens != out.Usage.PromptTokens {
		t.Errorf("reconciled %+v does not match the response usage %+v", rc, out.Usage)
	}
}

// TestUnknownKeyIs401 checks the error contract's shape on the real stack.
func TestUnknownKeyIs401(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: bus.SplitBrokers(testenv.KafkaBrokers(t)),
		Topics: bus.NamesWithPrefix(fmt.Sprintf("test%d.", time.Now().UnixNano()))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	req, _ := http.NewRequest(http.MethodPost, st.GatewayURL+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
	req.Header.Set("Authorization", "Bearer sk-wrong")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct {
			Code string `json:"code"`
			Type string `json:"type"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != 401 || e.Error.Code != "invalid_api_key" || e.Error.Type != "authentication_error" {
		t.Fatalf("got %d %+v", resp.StatusCode, e)
	}
}

func watcher(ctx context.Context, t *testing.T, brokers []string, names bus.Names) *kgo.Client {
	t.Helper()
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, names.Requests, names.Decisions)
	if err != nil {
		t.Fatal(err)
	}
	starts := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if starts[o.Topic] == nil {
			starts[o.Topic] = map[int32]kgo.Offset{}
		}
		starts[o.Topic][o.Partition] = kgo.NewOffset().At(o.Offset)
	})
	w, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(starts), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}
