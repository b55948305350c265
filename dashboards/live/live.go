// Package live is Sluice's live quota view (DESIGN.md §2: views →
// websocket → live quota page). It reads sluice.requests, sluice.decisions
// and sluice.telemetry (read_committed, from the end, no consumer group: a
// view is a projection and never commits), keeps rolling per scope /
// tenant / key / class counters over the last 60 s (with their per-second
// timeline, which the page draws as charts), and serves them as JSON
// (/api/snapshot), as a websocket stream (/ws, a snapshot every 500 ms)
// and as a self-contained HTML page (/). `sluice dev` embeds it; `sluice
// view` runs it alone against a Kafka cluster.
//
// Security (dashboards/README.md): a request that presents an API key sees
// only that key's tenant; a request without one is the operator view and
// needs the operator token when one is configured. Events never carry
// provider credentials, and the view shows no provider message text.
package live

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
)

//go:embed static/index.html
var indexHTML []byte

// closeCredentialInvalid is the websocket close code of a stream whose
// credential stopped being valid.
const closeCredentialInvalid = 4401

// Config configures a live view.
type Config struct {
	Brokers []string
	Topics  bus.Names // zero value = default names
	// Addr is the listen address of Listen and Run (default 127.0.0.1:8090).
	Addr string
	Log  *slog.Logger
	// Lookup maps a presented API key to its tenant. A request that
	// presents a key is shown that tenant only; with Lookup nil every key
	// is refused.
	Lookup func(apiKey string) (tenant string, ok bool)
	// OperatorToken guards the operator (all-tenant) view. Empty means open,
	// which is meant only for the loopback dev stack: Listen refuses a
	// non-loopback address without a token, and the open view answers only
	// requests whose Host is a loopback name (DNS-rebinding guard).
	OperatorToken string

	Window       time.Duration // rolling window, default 60 s
	PushInterval time.Duration // websocket push period, default 500 ms
	WriteTimeout time.Duration // per websocket frame, default 2 s; slower clients are dropped
	MaxClients   int           // concurrent websocket clients, default 256
	// RecheckInterval is how often an open websocket's credential is
	// looked up again (default 5 s): a revoked or disabled key loses the
	// stream within it.
	RecheckInterval time.Duration
	Now             func() time.Time // clock (tests), default time.Now
}

// View is a running live view: an http.Handler plus its Kafka consumer.
type View struct {
	cfg      Config
	log      *slog.Logger
	proj     *Projection
	mux      *http.ServeMux
	upgrader websocket.Upgrader
	csp      string
	clients  atomic.Int64

	quit      chan struct{}
	closeOnce sync.Once
	cons      *kgo.Client
	consDone  chan struct{}

	cacheMu sync.Mutex
	cache   map[string]cached
}

type cached struct {
	at time.Time
	b  []byte
}

// New returns a view with an empty projection. Call Start to consume.
func New(cfg Config) *View {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Topics = cfg.Topics.OrDefault()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:8090"
	}
	if cfg.PushInterval <= 0 {
		cfg.PushInterval = 500 * time.Millisecond
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 2 * time.Second
	}
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = 256
	}
	if cfg.RecheckInterval <= 0 {
		cfg.RecheckInterval = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v := &View{
		cfg: cfg, log: cfg.Log, proj: NewProjection(cfg.Window, cfg.Now),
		mux: http.NewServeMux(), quit: make(chan struct{}), cache: map[string]cached{},
		// The zero CheckOrigin accepts only same-origin browsers (or
		// clients sending no Origin), which stops other web pages from
		// reading the view through a visitor's browser.
		upgrader: websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 16 << 10, HandshakeTimeout: 5 * time.Second},
		csp:      contentSecurityPolicy(indexHTML),
	}
	v.mux.HandleFunc("GET /{$}", v.serveIndex)
	v.mux.HandleFunc("GET /api/snapshot", v.serveSnapshot)
	v.mux.HandleFunc("GET /ws", v.serveWS)
	v.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return v
}

// Projection returns the view's state (tests feed it directly).
func (v *View) Projection() *Projection { return v.proj }

// ServeHTTP implements http.Handler.
func (v *View) ServeHTTP(w http.ResponseWriter, r *http.Request) { v.mux.ServeHTTP(w, r) }

// Start positions a consumer at the current end of the requests, decisions
// and telemetry topics and consumes them until Close is called; ctx bounds
// only the setup. Every event produced after Start returns is seen.
func (v *View) Start(ctx context.Context) error {
	if v.cons != nil {
		return errors.New("live: already started")
	}
	adm, err := bus.NewClient(ctx, v.cfg.Brokers, 10*time.Second)
	if err != nil {
		return err
	}
	defer adm.Close()
	topics := []string{v.cfg.Topics.Requests, v.cfg.Topics.Decisions, v.cfg.Topics.Telemetry}
	// Topics created a moment ago may not be in every broker's metadata
	// yet, and a partition whose leader is being elected answers with an
	// error: look again for a few seconds. A partition left out here would
	// never be read (a tenant's traffic on it would be missing from the
	// view), so every partition must have answered.
	var starts map[string]map[int32]kgo.Offset
	var failed []string
	for wait := time.Now().Add(10 * time.Second); ; {
		ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topics...)
		if err != nil {
			return fmt.Errorf("live: list end offsets: %w", err)
		}
		starts, failed = map[string]map[int32]kgo.Offset{}, nil
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err != nil || o.Partition < 0 {
				failed = append(failed, fmt.Sprintf("%s[%d]: %v", o.Topic, o.Partition, o.Err))
				return
			}
			if starts[o.Topic] == nil {
				starts[o.Topic] = map[int32]kgo.Offset{}
			}
			starts[o.Topic][o.Partition] = kgo.NewOffset().At(o.Offset)
		})
		if (len(starts) == len(topics) && len(failed) == 0) || time.Now().After(wait) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, t := range topics {
		if len(starts[t]) == 0 {
			return fmt.Errorf("live: topic %s has no partitions (run `sluice topics ensure`)", t)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("live: partitions without an end offset: %s", strings.Join(failed, "; "))
	}
	cons, err := kgo.NewClient(bus.Opts(v.cfg.Brokers,
		kgo.ConsumePartitions(starts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)...)
	if err != nil {
		return fmt.Errorf("live: consumer: %w", err)
	}
	v.cons, v.consDone = cons, make(chan struct{})
	go v.consume()
	return nil
}

func (v *View) consume() {
	defer close(v.consDone)
	var lastErrLog time.Time
	for {
		fs := v.cons.PollFetches(context.Background())
		if fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if time.Since(lastErrLog) > 10*time.Second {
				lastErrLog = time.Now()
				v.log.Warn("live view: fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { v.proj.ApplyRecord(r.Value) })
	}
}

// Close stops the consumer and ends every websocket stream.
func (v *View) Close() {
	v.closeOnce.Do(func() {
		close(v.quit)
		if v.cons != nil {
			v.cons.Close()
			<-v.consDone
		}
	})
}

// Listen starts the view (consumer and HTTP server on cfg.Addr) and returns
// its base URL and a stop function; ctx bounds only the setup, the view
// runs until stop is called.
func Listen(ctx context.Context, cfg Config) (url string, stop func(), err error) {
	v := New(cfg)
	if v.cfg.OperatorToken == "" && !loopbackAddr(v.cfg.Addr) {
		return "", nil, fmt.Errorf("live: refusing an open operator view on %s; set an operator token or listen on a loopback address", v.cfg.Addr)
	}
	if err := v.Start(ctx); err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", v.cfg.Addr)
	if err != nil {
		v.Close()
		return "", nil, fmt.Errorf("live: listen on %s: %w", v.cfg.Addr, err)
	}
	srv := &http.Server{Handler: v, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			v.log.Error("live view server", "err", err)
		}
	}()
	stop = func() {
		v.Close() // ends websocket loops (Shutdown does not track hijacked conns)
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	return "http://" + ln.Addr().String(), stop, nil
}

// Run serves the view until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	url, stop, err := Listen(ctx, cfg)
	if err != nil {
		return err
	}
	defer stop()
	if cfg.Log != nil {
		cfg.Log.Info("live quota view", "url", url)
	}
	<-ctx.Done()
	return nil
}

// ---- authentication ----

// principal is who is looking: the operator (all tenants) or one tenant.
type principal struct {
	operator bool
	tenant   string
}

// authError is why a viewer was refused: a stable code for the page and a
// sentence for people. The page stops reconnecting on any of them (a
// wrong key does not become right by retrying).
type authError struct{ code, msg string }

func (e *authError) Error() string { return e.msg }

var (
	errBadScheme = &authError{"invalid_authorization", "the Authorization header must be \"Bearer <API key or operator token>\""}
	errBadBearer = &authError{"invalid_credential", "this API key or operator token is not valid"}
	errBadKey    = &authError{"invalid_api_key", "this API key is not valid (unknown, revoked or disabled)"}
	errBadToken  = &authError{"invalid_operator_token", "this operator token is not valid"}
	errNoCred    = &authError{"credential_required", "present an API key (tenant view) or the operator token"}
)

// authenticate resolves the viewer. Credentials: "Authorization: Bearer X"
// (X = operator token or an API key); on the websocket, whose browser API
// cannot set headers, also ?token= (operator) and ?key= (API key).
func (v *View) authenticate(r *http.Request, allowQuery bool) (principal, error) {
	bearer := ""
	if h := r.Header.Get("Authorization"); h != "" {
		const pfx = "bearer "
		if len(h) <= len(pfx) || !strings.EqualFold(h[:len(pfx)], pfx) {
			return principal{}, errBadScheme
		}
		bearer = strings.TrimSpace(h[len(pfx):])
	}
	var key, token string
	if allowQuery {
		q := r.URL.Query()
		key, token = q.Get("key"), q.Get("token")
	}
	switch {
	case bearer != "":
		if v.isOperatorToken(bearer) {
			return principal{operator: true}, nil
		}
		if p, ok := v.tenantFor(bearer); ok {
			return p, nil
		}
		return principal{}, errBadBearer
	case key != "":
		if p, ok := v.tenantFor(key); ok {
			return p, nil
		}
		return principal{}, errBadKey
	case token != "":
		if v.isOperatorToken(token) {
			return principal{operator: true}, nil
		}
		return principal{}, errBadToken
	}
	// No credential: the operator view, open only without a token and only
	// to loopback Host names.
	if v.cfg.OperatorToken == "" && loopbackHost(r.Host) {
		return principal{operator: true}, nil
	}
	return principal{}, errNoCred
}

func (v *View) isOperatorToken(s string) bool {
	t := v.cfg.OperatorToken
	return t != "" && subtle.ConstantTimeCompare([]byte(s), []byte(t)) == 1
}

// tenantFor maps an API key to its tenant view; an unknown key is refused
// (never widened to the operator view).
func (v *View) tenantFor(key string) (principal, bool) {
	if v.cfg.Lookup == nil {
		return principal{}, false
	}
	tenant, ok := v.cfg.Lookup(key)
	if !ok || tenant == "" {
		return principal{}, false
	}
	return principal{tenant: tenant}, true
}

// stillValid reports whether a viewer admitted earlier is admitted now: a
// key revoked or disabled while its websocket is open loses the stream.
func (v *View) stillValid(r *http.Request, p principal) bool {
	q, err := v.authenticate(r, true)
	return err == nil && q == p
}

func unauthorized(w http.ResponseWriter, err error) {
	ae, ok := err.(*authError)
	if !ok {
		ae = errNoCred
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="sluice live view"`)
	writeJSONError(w, http.StatusUnauthorized, ae.code, ae.msg)
}

func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
}

func loopbackHost(hostport string) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false // ":8090" listens on every interface
	}
	return loopbackHost(host)
}

// ---- handlers ----

// snapshotJSON returns the encoded snapshot for p, shared between the
// clients of one principal for half a push interval.
func (v *View) snapshotJSON(p principal) ([]byte, error) {
	k := "\x00operator"
	if !p.operator {
		k = p.tenant
	}
	now := time.Now()
	v.cacheMu.Lock()
	if c, ok := v.cache[k]; ok && now.Sub(c.at) < v.cfg.PushInterval/2 {
		v.cacheMu.Unlock()
		return c.b, nil
	}
	v.cacheMu.Unlock()
	var s Snapshot
	if p.operator {
		s = v.proj.Snapshot()
	} else {
		s = v.proj.TenantSnapshot(p.tenant)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	v.cacheMu.Lock()
	if len(v.cache) > 1024 {
		clear(v.cache)
	}
	v.cache[k] = cached{at: now, b: b}
	v.cacheMu.Unlock()
	return b, nil
}

func (v *View) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	p, err := v.authenticate(r, false)
	if err != nil {
		unauthorized(w, err)
		return
	}
	b, err := v.snapshotJSON(p)
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, "internal", "snapshot encoding failed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b)
}

func (v *View) serveWS(w http.ResponseWriter, r *http.Request) {
	p, err := v.authenticate(r, true)
	if err != nil {
		unauthorized(w, err)
		return
	}
	if n := v.clients.Add(1); n > int64(v.cfg.MaxClients) {
		v.clients.Add(-1)
		writeJSONError(w, http.StatusServiceUnavailable, "too_many_clients", "too many live view clients")
		return
	}
	defer v.clients.Add(-1)
	conn, err := v.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	defer conn.Close()
	conn.SetReadLimit(4096)
	gone := make(chan struct{})
	go func() { // read (and discard) until the peer goes: handles ping/close
		defer close(gone)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	t := time.NewTicker(v.cfg.PushInterval)
	defer t.Stop()
	checked := time.Now()
	for {
		if time.Since(checked) >= v.cfg.RecheckInterval {
			checked = time.Now()
			if !v.stillValid(r, p) {
				// 4401 (the private range of RFC 6455 §7.4.2): the page
				// reads it as "not valid any more" and stops reconnecting.
				_ = conn.WriteControl(websocket.CloseMessage,
					websocket.FormatCloseMessage(closeCredentialInvalid, "this credential is no longer valid"), time.Now().Add(time.Second))
				return
			}
		}
		b, err := v.snapshotJSON(p)
		if err != nil {
			return
		}
		// The consumer never waits on a client: snapshots are built under
		// the projection lock, written outside it, and a client that cannot
		// take a frame within WriteTimeout is dropped.
		_ = conn.SetWriteDeadline(time.Now().Add(v.cfg.WriteTimeout))
		if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
			v.log.Debug("live view: websocket client dropped", "err", err)
			return
		}
		select {
		case <-t.C:
		case <-gone:
			return
		case <-v.quit:
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseGoingAway, "view stopping"), time.Now().Add(time.Second))
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (v *View) serveIndex(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", v.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(indexHTML)
}

// contentSecurityPolicy allows exactly the page's inline script and style
// (by hash), same-origin connections (the websocket) and nothing else.
func contentSecurityPolicy(page []byte) string {
	hash := func(open, closeTag string) string {
		s := string(page)
		i := strings.Index(s, open)
		if i < 0 {
			return ""
		}
		s = s[i+len(open):]
		j := strings.Index(s, closeTag)
		if j < 0 {
			return ""
		}
		sum := sha256.Sum256([]byte(s[:j]))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return "default-src 'none'; script-src " + hash("<script>", "</script>") +
		"; style-src " + hash("<style>", "</style>") +
		"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}
