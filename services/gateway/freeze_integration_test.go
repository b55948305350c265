//go:build integration

package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/dev"
)

// answer is one request of the freeze timeline.
type answer struct {
	StartMs    int64  `json:"start_ms"` // since the test's t0
	Phase      string `json:"phase"`    // before, frozen, after (at its start)
	DeadlineMs int64  `json:"deadline_ms"`
	BoundMs    int64  `json:"bound_ms"` // its deadline, or ledger_timeout_ms
	AnswerMs   int64  `json:"answer_ms"`
	Status     int    `json:"status"`
	Code       string `json:"code,omitempty"`
	Err        string `json:"err,omitempty"`
}

// TestFrozenBrokerEveryRequestAnswered (issue 19, D2) freezes a private
// real broker with SIGSTOP for 30 s — connections stay open, nothing
// answers — under a steady trickle of chat requests through a real
// gateway, ledger and provider simulator, and shows that every request
// got an answer (a 503 ledger_unavailable while frozen), none waiting for
// the broker. The timeline is logged as JSON, one line per request; the
// answer time against the request's bound is reported there, not asserted
// (a loaded machine may overshoot by scheduling), but a request with a
// deadline and no answer ten seconds past it, a ledger_unavailable ten
// seconds past its bound, and a grant that is never reconciled or
// released (auditGrants) fail the test.
func TestFrozenBrokerEveryRequestAnswered(t *testing.T) {
	const (
		ledgerTimeoutMs = 2000
		warm            = 5 * time.Second
		freeze          = 30 * time.Second
		after           = 15 * time.Second
		every           = 250 * time.Millisecond
	)
	pb := testenv.StartPrivateBroker(t)
	broker, pid := pb.Addr, pb.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	names := bus.NamesWithPrefix(fmt.Sprintf("freeze%d.", time.Now().UnixNano()))
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: []string{broker}, Topics: names, APIKey: keyDemo,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Config: func(u string) (*config.Config, error) {
			return config.Load(strings.NewReader(testYAML(u, "", "", fmt.Sprintf("ledger_timeout_ms: %d", ledgerTimeoutMs))))
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := &stack{Stack: st, names: names}
	const body = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	// Served once before the clock starts: the group has its partitions.
	var warmErr string
	for try := 0; try < 120; try++ {
		resp, b := s.do(t, "POST", "/v1/chat/completions", keyDemo, body)
		if resp.StatusCode == 200 {
			warmErr = ""
			break
		}
		warmErr = fmt.Sprintf("%d %s", resp.StatusCode, b)
		time.Sleep(250 * time.Millisecond)
	}
	if warmErr != "" {
		t.Fatalf("not served before the freeze: %s", warmErr)
	}

	t0 := time.Now()
	frozenAt, thawAt := t0.Add(warm), t0.Add(warm+freeze)
	deadlines := []int64{1000, 3000, 0}
	var (
		mu  sync.Mutex
		all []answer
		wg  sync.WaitGroup
	)
	go func() {
		time.Sleep(time.Until(frozenAt))
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Errorf("SIGSTOP: %v", err)
		}
		time.Sleep(time.Until(thawAt))
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Errorf("SIGCONT: %v", err)
		}
	}()
	for i := 0; time.Since(t0) < warm+freeze+after; i++ {
		start := time.Now()
		a := answer{StartMs: start.Sub(t0).Milliseconds(), DeadlineMs: deadlines[i%len(deadlines)], Phase: "before"}
		switch {
		case start.After(thawAt):
			a.Phase = "after"
		case start.After(frozenAt):
			a.Phase = "frozen"
		}
		a.BoundMs = ledgerTimeoutMs
		if a.DeadlineMs > 0 {
			a.BoundMs = a.DeadlineMs
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// With a deadline, an answer ten seconds past it is a hang.
			// Without one, only the ledger's first answer is bounded (by
			// ledger_timeout_ms): a request the ledger queued, or that
			// waits out a provider 429's backoff, may take longer by
			// design, so its client waits a minute (auditGrants and the
			// 503s' answer times below catch a Kafka hang).
			limit := time.Duration(a.BoundMs)*time.Millisecond + 10*time.Second
			if a.DeadlineMs == 0 {
				limit = time.Minute
			}
			hc := &http.Client{Timeout: limit}
			req, _ := http.NewRequest("POST", s.GatewayURL+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+keyDemo)
			if a.DeadlineMs > 0 {
				req.Header.Set("X-Sluice-Deadline-Ms", strconv.FormatInt(a.DeadlineMs, 10))
			}
			resp, err := hc.Do(req)
			a.AnswerMs = time.Since(start).Milliseconds()
			if err != nil {
				a.Err = err.Error()
			} else {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				a.Status = resp.StatusCode
				if resp.StatusCode != 200 {
					var e struct {
						Error struct {
							Code string `json:"code"`
						} `json:"error"`
					}
					_ = json.Unmarshal(b, &e)
					a.Code = e.Error.Code
				}
			}
			mu.Lock()
			all = append(all, a)
			mu.Unlock()
		}()
		time.Sleep(time.Until(start.Add(every)))
	}
	wg.Wait()

	type tally struct{ n, ok, unavailable, other, hung, overBound int }
	by := map[string]*tally{"before": {}, "frozen": {}, "after": {}}
	var maxOverMs int64
	for _, a := range all {
		line, _ := json.Marshal(a)
		t.Logf("timeline %s", line)
		c := by[a.Phase]
		c.n++
		switch {
		case a.Err != "":
			c.hung++
			t.Errorf("request at %d ms (%s, bound %d ms) got no answer: %s", a.StartMs, a.Phase, a.BoundMs, a.Err)
		case a.Status == 200:
			c.ok++
		case a.Status == 503 && a.Code == "ledger_unavailable":
			c.unavailable++
		default:
			c.other++
		}
		// A 200 may take longer than ledger_timeout_ms (queued, then the
		// provider's time): the bound is the ledger's, for the failures.
		if over := a.AnswerMs - a.BoundMs; over > 0 && a.Err == "" && a.Status != 200 {
			c.overBound++
			maxOverMs = max(maxOverMs, over)
			if a.Code == "ledger_unavailable" && over > 10_000 {
				t.Errorf("request at %d ms (%s, bound %d ms) waited %d ms for its ledger_unavailable: a hang on Kafka", a.StartMs, a.Phase, a.BoundMs, a.AnswerMs)
			}
		}
	}
	for _, p := range []string{"before", "frozen", "after"} {
		c := by[p]
		t.Logf("summary %s: %d requests, %d ok, %d ledger_unavailable, %d other, %d unanswered, %d failures answered past their bound", p, c.n, c.ok, c.unavailable, c.other, c.hung, c.overBound)
	}
	t.Logf("summary: the latest failure past its bound was %d ms past it", maxOverMs)
	if by["frozen"].n == 0 {
		t.Fatal("no request ran during the freeze")
	}
	auditGrants(t, s)
}

// auditGrants checks that no grant of the run was leaked: every grant the
// ledger committed is followed on sluice.requests by the Reconciled,
// Released or ProviderRejected of its attempt (a late grant for an
// attempt the gateway gave up included), within the bound of the retries.
func auditGrants(t *testing.T, s *stack) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.ConsumeTopics(s.names.Requests, s.names.Decisions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type key struct {
		id      string
		attempt int32
	}
	granted, settled := map[key]bool{}, map[key]schemas.Type{}
	unsettled := func() []key {
		var out []key
		for k := range granted {
			if _, ok := settled[k]; !ok {
				out = append(out, k)
			}
		}
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) != nil {
				return
			}
			k := key{ev.RequestID, ev.Attempt}
			switch ev.Type {
			case schemas.TypeDecision:
				if ev.Decision != nil && ev.Decision.Status == schemas.StatusGranted {
					granted[k] = true
				}
			case schemas.TypeReconciled, schemas.TypeReleased, schemas.TypeProviderRejected:
				if _, ok := settled[k]; !ok {
					settled[k] = ev.Type
				}
			}
		})
		if ctx.Err() != nil {
			break
		}
		if len(granted) > 0 && len(unsettled()) == 0 {
			break
		}
	}
	byType := map[schemas.Type]int{}
	for k := range granted {
		if typ, ok := settled[k]; ok {
			byType[typ]++
		}
	}
	t.Logf("summary grants: %d committed, settled by %v, %d unsettled", len(granted), byType, len(unsettled()))
	if u := unsettled(); len(u) > 0 {
		t.Errorf("%d grants never reconciled or released (leaked until their hold TTL): %v", len(u), u)
	}
}
