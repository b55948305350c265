//go:build integration

package live_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/services/dev"
)

// The three-tenant example's keys (deploy/examples/dev-three-tenants.yaml).
const (
	threeTenants = "../../deploy/examples/dev-three-tenants.yaml"
	keyWeb       = "sk-sluice-dev-web"   // tenant web, key web-app, team frontend, class interactive
	keyAgents    = "sk-sluice-dev-agent" // tenant agents, key agent-runner, team automation, class agent
)

// chromium finds Debian's chromium (deploy/local/chromium.sh installs it;
// `make test-integration` runs that script). Missing is a failure, never a
// skip.
func chromium(t *testing.T) string {
	t.Helper()
	for _, b := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: run deploy/local/chromium.sh (make test-integration does)")
	return ""
}

// startView runs `sluice view` against the real broker and returns the URL
// it prints. The process lives until the test's cleanups (so that a failing
// test can still ask it what it holds), 5 min at most.
func startView(t *testing.T, brokers, prefix, config string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.Command("go", "build", "-o", bin, "./services/sluice")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin, "view", "--brokers", brokers, "--topic-prefix", prefix,
		"--listen", "127.0.0.1:0", "--config", config, "-v")
	cmd.Stderr = testWriter{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "VIEW_URL="); ok {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return u
		}
	}
	t.Fatalf("sluice view printed no VIEW_URL (%v)", sc.Err())
	return ""
}

// eval evaluates a JavaScript expression in the tab.
func eval[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("sluice view: %s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func chat(t *testing.T, ctx context.Context, gateway, key, text string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}],"max_tokens":16}`, text)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gateway+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("gateway %d: %s", resp.StatusCode, raw)
	}
}

// waitFor evaluates the JavaScript expression cond until it is true; on the
// context's end it fails with what show evaluates to.
func waitFor(t *testing.T, ctx context.Context, what, cond, show string) {
	t.Helper()
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			got, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](show))
			conn, _ := chromedp.Run(context.WithoutCancel(ctx), chromedp.Evaluate[string](`document.getElementById("conn").textContent`))
			t.Fatalf("%s: not seen before the deadline; page shows %q (connection: %q)", what, got, conn)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestBrowserLiveView loads the live view of `sluice view` (on the real
// broker, fed by a dev stack with two tenants) in headless Chromium: the
// page updates over the websocket when traffic is sent, a tenant key shows
// only its tenant, and a wrong key is refused with a clear message and no
// retry loop.
func TestBrowserLiveView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	browser := chromium(t)
	brokers := testenv.KafkaBrokers(t)
	prefix := fmt.Sprintf("viewtest%d.", time.Now().UnixNano())
	t.Cleanup(func() { // runs last: after the stack and the view stopped
		cl, err := kgo.NewClient(kgo.SeedBrokers(bus.SplitBrokers(brokers)...))
		if err != nil {
			return
		}
		defer cl.Close()
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = kadm.NewClient(cl).DeleteTopics(dctx, bus.NamesWithPrefix(prefix).Created()...)
	})

	load, err := dev.ConfigFile(threeTenants)
	if err != nil {
		t.Fatal(err)
	}
	st, err := dev.Start(ctx, dev.Options{Addr: "127.0.0.1:0", Brokers: bus.SplitBrokers(brokers),
		Topics: bus.NamesWithPrefix(prefix), Partitions: 2, Config: load})
	if err != nil {
		t.Fatalf("dev stack on the real broker: %v", err)
	}
	defer st.Close()
	raw, err := os.ReadFile(threeTenants)
	if err != nil {
		t.Fatal(err)
	}
	gwConfig := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(gwConfig, []byte(strings.ReplaceAll(string(raw), dev.SimURLPlaceholder, st.SimURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	view := startView(t, brokers, prefix, gwConfig)
	t.Cleanup(func() { // what the view itself holds, when the page disagrees
		if !t.Failed() {
			return
		}
		for _, auth := range []string{"", "Bearer " + keyWeb} {
			req, _ := http.NewRequest(http.MethodGet, view+"/api/snapshot", nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("snapshot %q: %d %.3000s", auth, resp.StatusCode, b)
			}
		}
	})

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")), chromedp.WindowSize(1280, 1600))...)
	defer cancelAlloc()
	// newTab opens a tab; its first action runs without a deadline (a
	// deadline there would bound the browser's life, see chromedp.Run).
	newTab := func(parent context.Context, opts ...chromedp.ContextOption) context.Context {
		tab, cancel := chromedp.NewContext(parent, opts...)
		t.Cleanup(cancel)
		if err := chromedp.Do(tab); err != nil {
			t.Fatalf("start chromium: %v", err)
		}
		return tab
	}
	// Every websocket frame the tenant's page receives, to check that what
	// the server sends (not only what the page shows) is the tenant's own.
	var framesMu sync.Mutex
	var frames []string
	tab := newTab(alloc, chromedp.WithListener(func(ev any) {
		if f, ok := ev.(*network.EventWebSocketFrameReceived); ok && f.Response != nil {
			framesMu.Lock()
			frames = append(frames, string(f.Response.PayloadData))
			framesMu.Unlock()
		}
	}))

	// Tenant web's view, connected before any traffic.
	c, done := context.WithTimeout(tab, 60*time.Second)
	if err := chromedp.Do(c, chromedp.Navigate(view+"/#key="+keyWeb)); err != nil {
		t.Fatalf("load the page: %v", err)
	}
	waitFor(t, c, "the websocket goes live", `document.getElementById("conn").textContent === "live"`,
		`document.getElementById("conn").textContent`)
	done()
	who := eval[string](t, tab, `document.getElementById("who").textContent`)
	before := eval[string](t, tab, `document.getElementById("ch-tenants").toDataURL()`)
	if who != "tenant view: web" {
		t.Fatalf("who = %q, want the tenant view of web", who)
	}

	// Traffic from both tenants.
	const n = 3
	for i := 0; i < n; i++ {
		chat(t, ctx, st.GatewayURL, keyWeb, fmt.Sprintf("hello from web %d", i))
		chat(t, ctx, st.GatewayURL, keyAgents, fmt.Sprintf("hello from agents %d", i))
	}

	// The page updates over the websocket: the counter and the chart.
	c, done = context.WithTimeout(tab, 60*time.Second)
	waitFor(t, c, "web's requests counted", fmt.Sprintf(`document.getElementById("total-received").textContent === "%d"`, n),
		`document.getElementById("total-received").textContent`)
	waitFor(t, c, "the tenant chart draws them", `Number(document.getElementById("ch-tenants").dataset.sum) >= `+fmt.Sprint(n),
		`document.getElementById("ch-tenants").dataset.sum`)
	waitFor(t, c, "web's decisions listed in plain words with their codes in tooltips",
		`[...document.querySelectorAll("#decisions span.code")].some(e => e.title === "gateway_decision: admitted" && e.textContent === "admitted at once")`,
		`document.getElementById("decisions").innerText`)
	waitFor(t, c, "web's settled holds listed in the stranded-quota panel",
		fmt.Sprintf(`[...document.querySelectorAll("#stranded tr")].some(r => r.cells.length === 12 && r.cells[1].textContent === "web" && Number(r.cells[4].textContent) >= %d)`, n),
		`document.getElementById("stranded").innerText`)
	done()
	if after := eval[string](t, tab, `document.getElementById("ch-tenants").toDataURL()`); after == before {
		t.Error("the tenant chart's pixels did not change with the traffic")
	}

	// The operator view (open on loopback) sees both tenants: agents'
	// traffic reached the view, so its absence below means something.
	opTab := newTab(tab)
	c, done = context.WithTimeout(opTab, 60*time.Second)
	if err := chromedp.Do(c, chromedp.Navigate(view+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, "the operator view shows both tenants",
		`document.body.innerText.includes("agent-runner") && document.body.innerText.includes("web-app") && document.getElementById("who").textContent.startsWith("operator")`,
		`document.body.innerText`)
	done()
	for _, shot := range []struct {
		env string
		tab context.Context
	}{{"SLUICE_VIEW_PNG", opTab}, {"SLUICE_VIEW_TENANT_PNG", tab}} {
		if keep := os.Getenv(shot.env); keep != "" { // a look at the page, for people
			png, err := chromedp.Run(shot.tab, chromedp.FullScreenshot(100))
			if err == nil {
				err = os.WriteFile(keep, png, 0o644)
			}
			if err != nil {
				t.Errorf("%s: %v", shot.env, err)
			}
		}
	}

	// Tenant web's page holds no trace of tenant agents: not its name, key
	// id, class or prompts, in the text, the markup or the tooltips.
	text := eval[string](t, tab, `document.body.innerText`)
	html := eval[string](t, tab, `document.documentElement.outerHTML`)
	framesMu.Lock()
	sent := strings.Join(frames, "\n")
	nFrames := len(frames)
	framesMu.Unlock()
	for _, trace := range []string{"agents", "agent-runner", "automation", keyAgents, "hello from"} {
		if strings.Contains(text, trace) || strings.Contains(html, trace) {
			t.Errorf("tenant web's view shows %q", trace)
		}
		if strings.Contains(sent, trace) {
			t.Errorf("a websocket frame to tenant web's page carries %q", trace)
		}
	}
	t.Logf("tenant web's page received %d websocket frames (%d bytes)", nFrames, len(sent))
	if nFrames == 0 || !strings.Contains(sent, "web-app") {
		t.Errorf("%d websocket frames seen, none with web's own key id", nFrames)
	}
	if !strings.Contains(text, "web-app") {
		t.Errorf("tenant web's view does not show its own key id:\n%s", text)
	}

	// A wrong key: a clear refusal, and the page stops trying.
	badTab := newTab(tab)
	c, done = context.WithTimeout(badTab, 60*time.Second)
	defer done()
	if err := chromedp.Do(c, chromedp.Navigate(view+"/#key=sk-not-a-key")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, "the wrong key is refused",
		`document.getElementById("refused").classList.contains("on") && document.getElementById("refused-title").textContent === "This API key is not valid." && document.getElementById("conn").textContent === "refused — not retrying"`,
		`document.getElementById("conn").textContent + " | " + document.getElementById("refused").innerText`)
	if tip := eval[string](t, c, `document.getElementById("refused").title`); tip != "code: invalid_credential" {
		t.Errorf("refusal tooltip %q, want the server's code", tip)
	}
}
