//go:build integration

package ledgerd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
)

// timeline notes what happened when, relative to the test's start.
type timeline struct {
	mu     sync.Mutex
	start  time.Time
	events []string
}

func (tl *timeline) note(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, fmt.Sprintf("%7.1fs  %s", time.Since(tl.start).Seconds(), fmt.Sprintf(format, args...)))
}

// member is a supervised `sluice ledger` process: restarted whenever it
// exits (what systemd or Kubernetes would do), its /healthz polled.
type member struct {
	node, metrics string
	mu            sync.Mutex
	exits         int
	healthy       bool
	reason        string
}

func (r *rig) supervise(ctx context.Context, tl *timeline, node string) *member {
	m := &member{node: node, metrics: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(r.t))}
	go func() {
		for ctx.Err() == nil {
			err := r.ledger(node, "--metrics", m.metrics).Wait()
			if ctx.Err() != nil {
				return
			}
			m.mu.Lock()
			m.exits++
			m.mu.Unlock()
			tl.note("%s exited (%v); restarting it", node, err)
		}
	}()
	go func() {
		hc := &http.Client{Timeout: time.Second}
		for ctx.Err() == nil {
			ok, reason := false, "no answer"
			if resp, err := hc.Get("http://" + m.metrics + "/healthz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				ok, reason = resp.StatusCode == http.StatusOK, strings.TrimSpace(string(b))
			}
			m.mu.Lock()
			if ok != m.healthy {
				tl.note("%s /healthz: %v %s", node, map[bool]string{true: "200", false: "503"}[ok], reason)
			}
			m.healthy, m.reason = ok, reason
			m.mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return m
}

// TestFrozenBrokerNoWedge reproduces D1 on a private broker: under load
// with two ledger members at the default settings, the broker is frozen
// (SIGSTOP) for 11 s, resumed, frozen again 5 s later for 60 s, and
// resumed. Both freezes outlast the transaction and session timeouts, so
// the broker aborts the open transactions and bumps their producer epochs:
// the members' producers come back fenced. Before, a fenced member failed
// every Begin and kept its partitions for good. Now every request sent is
// decided exactly once, both members end live, and replay finds no
// divergence. The timeline (health, exits, first decisions after each
// resume) is logged; timings are reported, not asserted.
func TestFrozenBrokerNoWedge(t *testing.T) {
	tl := &timeline{start: time.Now()}
	b := testenv.StartPrivateBroker(t)
	tl.note("private broker up on %s (pid %d)", b.Addr, b.Pid)
	r := newRigOn(t, []string{b.Addr}, 4)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var members []*member
	for _, node := range []string{"ledger-f1", "ledger-f2"} {
		members = append(members, r.supervise(ctx, tl, node))
	}
	actx, stopAudit := context.WithCancel(context.Background())
	defer stopAudit()
	go r.audit(actx)
	lctx, stopLoad := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() { r.load(lctx, 40, 8); close(loaded) }()
	// Freeze a group at work: on a fresh broker the members' first join
	// waits for the offsets topic, and a freeze before their first
	// transaction would catch none open.
	r.awaitDecisions(3, 120*time.Second) // the 8 scopes land on 3 of the 4 partitions
	tl.note("decisions committed on every partition")
	time.Sleep(3 * time.Second)

	var resumes []time.Time
	freeze := func(d time.Duration) {
		if err := syscall.Kill(b.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		tl.note("broker frozen for %v", d)
		time.Sleep(d)
		if err := syscall.Kill(b.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		resumes = append(resumes, time.Now())
		tl.note("broker resumed")
	}
	freeze(11 * time.Second)
	time.Sleep(5 * time.Second)
	freeze(60 * time.Second)
	time.Sleep(20 * time.Second)
	stopLoad()
	<-loaded
	r.settle(90 * time.Second)
	stopAudit()
	r.check()

	r.mu.Lock()
	for i, at := range resumes {
		first := time.Time{}
		for _, d := range r.decisions {
			if d.at.After(at) && (first.IsZero() || d.at.Before(first)) {
				first = d.at
			}
		}
		if first.IsZero() {
			t.Errorf("no decision committed after resume %d", i+1)
			continue
		}
		tl.note("resume %d: first committed decision %.1fs after it", i+1, first.Sub(at).Seconds())
	}
	// The longest silence of each partition after the last resume.
	last := map[int32]time.Time{}
	gaps := map[int32]time.Duration{}
	for _, d := range r.decisions {
		if p, ok := last[d.partition]; ok && d.at.After(resumes[len(resumes)-1]) {
			gaps[d.partition] = max(gaps[d.partition], d.at.Sub(p))
		}
		last[d.partition] = d.at
	}
	logs := r.logs
	r.mu.Unlock()
	tl.note("longest decision gap per partition spanning the last resume: %v", gaps)
	// What the members went through, from their logs (kept in
	// $SLUICE_TEST_KEEP_LOGS when set).
	counts := map[string]int{}
	for node, paths := range logs {
		for i, p := range paths {
			raw, _ := os.ReadFile(p)
			for _, msg := range []string{"ledger session unusable", "ledger session recreated", `msg="begin transaction"`,
				"outcome unknown", "transaction aborted", "partition caught up", "ledger peer silent", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"} {
				counts[msg] += strings.Count(string(raw), msg)
			}
			if dir := os.Getenv("SLUICE_TEST_KEEP_LOGS"); dir != "" {
				_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.log", node, i)), raw, 0o644)
			}
		}
	}
	tl.note("ledger logs: %v", counts)
	for _, m := range members {
		m.mu.Lock()
		if !m.healthy {
			t.Errorf("%s not live at the end: %s", m.node, m.reason)
		}
		tl.note("%s: %d exits, live at the end: %v", m.node, m.exits, m.healthy)
		m.mu.Unlock()
	}
	r.verifyReplay()
	tl.mu.Lock()
	t.Logf("timeline:\n%s", strings.Join(tl.events, "\n"))
	tl.mu.Unlock()
}
