package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/services/gateway"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// member runs one ledger member until its stop is called.
func member(t *testing.T, brokers []string, names bus.Names, node string) (stop func()) {
	t.Helper()
	return memberWith(t, brokers, names, node, 0)
}

// memberWith is member with a snapshot interval (0: the ledger's default).
func memberWith(t *testing.T, brokers []string, names bus.Names, node string, snapshotEvery time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	led, err := ledgerd.New(ctx, ledgerd.Config{Brokers: brokers, Topics: names, Group: names.Requests + ".ledger", Node: node,
		SnapshotInterval: snapshotEvery,
		Log:              slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = led.Loop(ctx)
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			led.Close()
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestHeldThroughATakeover (issue 19, item 3): a request whose deadline
// outlasts a ledger takeover is served, not answered 503 at
// ledger_timeout_ms. The only member is stopped, a request arrives while
// no member owns its partition (its reserve is in the log, undecided), and
// a replacement member joins after several answer bounds: the request is
// served by the replacement's decision. One without a deadline fails
// closed at ledger_timeout_ms, as documented.
func TestHeldThroughATakeover(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx := context.Background()
	brokers := cluster.ListenAddrs()
	names := bus.NamesWithPrefix(fmt.Sprintf("gwtakeover%d.", time.Now().UnixNano()))
	adm, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	tc := bus.DefaultTopics()
	tc.Names = names
	if _, err := bus.Ensure(ctx, kadm.NewClient(adm), tc.Specs()); err != nil {
		t.Fatal(err)
	}
	f := newFakeUpstream(t)
	f.script("gpt-4o-mini", okHandler)
	cfg, err := config.Load(strings.NewReader(testYAML(f.URL, "", "", "ledger_timeout_ms: 300")))
	if err != nil {
		t.Fatal(err)
	}
	if err := ledgerd.PublishConfig(ctx, brokers, names, cfg.LedgerJSON(), "test"); err != nil {
		t.Fatal(err)
	}
	stopFirst := member(t, brokers, names, "ledger-a")
	rc, err := reserve.New(ctx, reserve.Config{Brokers: brokers, Topics: names, Node: cfg.Node, AnswerTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	srv := httptest.NewServer(gateway.New(cfg, rc, nil))
	defer srv.Close()
	do := func(deadline string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+keyDemo)
		if deadline != "" {
			req.Header.Set("X-Sluice-Deadline-Ms", deadline)
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The first member serves (retried while the group forms).
	var last string
	for try := 0; ; try++ {
		st, b := do("")
		if st == 200 {
			break
		}
		if last = b; try == 100 {
			t.Fatalf("never served by the first member: %d %s", st, last)
		}
		time.Sleep(100 * time.Millisecond)
	}

	stopFirst()
	held := make(chan string, 1)
	go func() {
		st, b := do("20000")
		held <- fmt.Sprintf("%d %s", st, b)
	}()
	if st, b := do(""); st != 503 || !strings.Contains(b, "ledger_unavailable") {
		t.Errorf("without a deadline, during the takeover: %d %s, want 503 ledger_unavailable", st, b)
	}
	time.Sleep(time.Second) // several answer bounds with no member at all
	member(t, brokers, names, "ledger-b")
	if got := <-held; !strings.HasPrefix(got, "200 ") {
		t.Fatalf("held request: %s, want it served by the replacement member", got)
	}
}
