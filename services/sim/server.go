package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HeaderOutputTokens is a simulator extension: a request carrying it gets
// exactly that many output tokens (bounded by its max tokens) instead of a
// draw from the output spread.
const HeaderOutputTokens = "x-sim-output-tokens"

const maxBody = 32 << 20

// Server is the simulator; it is an http.Handler.
type Server struct {
	cfg Config
	mux *http.ServeMux
	seq atomic.Int64

	mu     sync.Mutex
	start  time.Time
	scopes map[string]*scope
	rng    *rand.Rand
	storms []*stormState
	cache  map[string]time.Time // Anthropic prompt cache: prefix key → expiry
	stats  map[string]*ProviderStats

	reg        *prometheus.Registry
	mRequests  *prometheus.CounterVec
	mLimited   *prometheus.CounterVec
	mTokens    *prometheus.CounterVec
	mInFlight  *prometheus.GaugeVec
	mStormsNow prometheus.GaugeFunc
}

type stormState struct {
	Storm
	from, until time.Time // until zero = open-ended
	n           int64
	// scopes of a capacity storm: the reduced capacity per provider and
	// model, made when the storm first sees them.
	scopes map[string]*scope
}

func (st *stormState) active(now time.Time) bool {
	return !now.Before(st.from) && (st.until.IsZero() || now.Before(st.until))
}

// ProviderStats are the counters of one provider style.
type ProviderStats struct {
	Requests    int64 `json:"requests"`
	OK          int64 `json:"ok"`
	RateLimited int64 `json:"rate_limited"` // 429s sent
	Overloaded  int64 `json:"overloaded"`   // 503s (or storm status override) sent
	BadRequests int64 `json:"bad_requests"`
	Streams     int64 `json:"streams"`
	Cancelled   int64 `json:"cancelled"` // client went away mid-response
	// CancelledTokens are the tokens (input and output sent) of the
	// Cancelled calls: work the provider charged that nobody read.
	CancelledTokens int64 `json:"cancelled_tokens"`
	// RateLimitedBy counts 429s by the limit that fired: requests, tokens,
	// input_tokens, output_tokens, requests_per_day, acceleration, storm,
	// request_too_large.
	RateLimitedBy map[string]int64 `json:"rate_limited_by"`
	Tokens        TokenStats       `json:"tokens"`
}

// TokenStats are tokens served per dimension. Input excludes cache reads and
// includes cache writes (Anthropic's input_tokens + cache_creation).
type TokenStats struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	Total      int64 `json:"total"`
	CacheRead  int64 `json:"cache_read"`
	CacheWrite int64 `json:"cache_write"`
}

// Stats is the body of GET /sim/stats.
type Stats struct {
	StartedAt time.Time                 `json:"started_at"`
	Now       time.Time                 `json:"now"`
	Providers map[string]*ProviderStats `json:"providers"`
	Totals    ProviderStats             `json:"totals"`
}

// New builds a simulator from cfg (zero fields of a Config not built from
// DefaultConfig keep their zero meaning: no limits, no latency).
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	if cfg.Providers == nil {
		cfg.Providers = map[string]ProviderConfig{}
	}
	if cfg.StreamChunkTokens == 0 {
		cfg.StreamChunkTokens = 4
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = Duration(5 * time.Minute)
	}
	if cfg.Output.Max == 0 && cfg.Output.Min == 0 {
		cfg.Output.Max, cfg.Output.Min = 1, 1
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), reg: prometheus.NewRegistry()}
	s.initMetrics()
	s.resetLocked()
	s.routes()
	return s, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Registry is the simulator's private Prometheus registry (served on /metrics).
func (s *Server) Registry() *prometheus.Registry { return s.reg }

func (s *Server) initMetrics() {
	s.mRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_sim_requests_total", Help: "Requests answered by the provider simulator, by provider style and HTTP status.",
	}, []string{"provider", "code"})
	s.mLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_sim_rate_limited_total", Help: "429s sent by the provider simulator, by provider style and the limit that fired.",
	}, []string{"provider", "limit"})
	s.mTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_sim_tokens_total", Help: "Tokens served by the provider simulator, by provider style and dimension (input, output, total, cache_read, cache_write).",
	}, []string{"provider", "dimension"})
	s.mInFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_sim_in_flight", Help: "Requests being answered by the provider simulator.",
	}, []string{"provider"})
	s.mStormsNow = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_sim_storms_active", Help: "Injected 429/503 storms active now.",
	}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		now := s.cfg.Now()
		n := 0
		for _, st := range s.storms {
			if st.active(now) {
				n++
			}
		}
		return float64(n)
	})
	s.reg.MustRegister(s.mRequests, s.mLimited, s.mTokens, s.mInFlight, s.mStormsNow)
}

// resetLocked restores the state of a fresh server: full buckets, empty
// stats, scheduled storms relative to now. Prometheus counters stay
// monotonic.
func (s *Server) resetLocked() {
	s.start = s.cfg.Now()
	s.scopes = map[string]*scope{}
	s.rng = rand.New(rand.NewPCG(s.cfg.Seed, s.cfg.Seed^0x9e3779b97f4a7c15))
	s.cache = map[string]time.Time{}
	s.stats = map[string]*ProviderStats{}
	for _, p := range providerNames {
		s.stats[p] = &ProviderStats{RateLimitedBy: map[string]int64{}}
	}
	s.storms = nil
	for _, st := range s.cfg.Storms {
		ss := &stormState{Storm: st, from: s.start.Add(st.Start.D())}
		if st.End > 0 {
			ss.until = s.start.Add(st.End.D())
		}
		s.storms = append(s.storms, ss)
	}
}

// Reset is POST /sim/reset.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{StartedAt: s.start, Now: s.cfg.Now(), Providers: map[string]*ProviderStats{}}
	out.Totals.RateLimitedBy = map[string]int64{}
	for name, p := range s.stats {
		c := *p
		c.RateLimitedBy = map[string]int64{}
		for k, v := range p.RateLimitedBy {
			c.RateLimitedBy[k] = v
			out.Totals.RateLimitedBy[k] += v
		}
		out.Providers[name] = &c
		out.Totals.addCounts(&c)
	}
	return out
}

// Add adds o's counters into p (RateLimitedBy included): a sum of
// providers, or of deltas.
func (p *ProviderStats) Add(o *ProviderStats) {
	if p.RateLimitedBy == nil {
		p.RateLimitedBy = map[string]int64{}
	}
	for k, v := range o.RateLimitedBy {
		p.RateLimitedBy[k] += v
	}
	p.addCounts(o)
}

// addCounts adds every counter of o but RateLimitedBy.
func (p *ProviderStats) addCounts(o *ProviderStats) {
	p.Requests += o.Requests
	p.OK += o.OK
	p.RateLimited += o.RateLimited
	p.Overloaded += o.Overloaded
	p.BadRequests += o.BadRequests
	p.Streams += o.Streams
	p.Cancelled += o.Cancelled
	p.CancelledTokens += o.CancelledTokens
	p.Tokens.Input += o.Tokens.Input
	p.Tokens.Output += o.Tokens.Output
	p.Tokens.Total += o.Tokens.Total
	p.Tokens.CacheRead += o.Tokens.CacheRead
	p.Tokens.CacheWrite += o.Tokens.CacheWrite
}

func (s *Server) routes() {
	m := s.mux
	for _, d := range dialects {
		d.routes(s, m)
	}
	m.HandleFunc("GET /sim/stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Stats()) })
	m.HandleFunc("POST /sim/reset", func(w http.ResponseWriter, r *http.Request) {
		s.Reset()
		writeJSON(w, http.StatusOK, map[string]any{"reset": true})
	})
	m.HandleFunc("POST /sim/storm", s.stormControl)
	m.HandleFunc("GET /sim/storm", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.stormList()) })
	m.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
}

// StormRequest is the body of POST /sim/storm.
type StormRequest struct {
	Kind     string `json:"kind"`               // "429" or "503"
	Provider string `json:"provider,omitempty"` // "" = all
	// Active starts (true) or stops (false) storms. Stopping ends every
	// active or scheduled storm of that kind (and provider, if given).
	Active     bool     `json:"active"`
	Duration   Duration `json:"duration,omitempty"` // 0 = until stopped
	RetryAfter Duration `json:"retry_after,omitempty"`
	Every      int      `json:"every,omitempty"`
	Status     int      `json:"status,omitempty"`
	EchoKey    bool     `json:"echo_key,omitempty"`
}

// StormInfo describes one storm in the answer of /sim/storm.
type StormInfo struct {
	Storm
	From   time.Time  `json:"from"`
	Until  *time.Time `json:"until,omitempty"`
	Active bool       `json:"active"`
	Hits   int64      `json:"hits"`
}

func (s *Server) stormList() []StormInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	out := []StormInfo{}
	for _, st := range s.storms {
		si := StormInfo{Storm: st.Storm, From: st.from, Active: st.active(now), Hits: st.n}
		if !st.until.IsZero() {
			u := st.until
			si.Until = &u
		}
		out = append(out, si)
	}
	return out
}

func (s *Server) stormControl(w http.ResponseWriter, r *http.Request) {
	var req StormRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid storm request: " + err.Error()})
		return
	}
	st := Storm{Kind: req.Kind, Provider: req.Provider, Every: req.Every, RetryAfter: req.RetryAfter, Status: req.Status, EchoKey: req.EchoKey}
	if err := st.validate(); err != nil || req.Duration < 0 {
		msg := "duration must be >= 0"
		if err != nil {
			msg = err.Error()
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid storm request: " + msg})
		return
	}
	s.StartStorm(req)
	writeJSON(w, http.StatusOK, s.stormList())
}

// StartStorm starts or stops a storm at run time (what POST /sim/storm does).
func (s *Server) StartStorm(req StormRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	if !req.Active {
		for _, st := range s.storms {
			if st.Kind == req.Kind && (req.Provider == "" || st.Provider == req.Provider) &&
				(st.until.IsZero() || st.until.After(now)) {
				st.until = now
				if st.from.After(now) {
					st.from = now
				}
			}
		}
		return
	}
	ss := &stormState{Storm: Storm{Kind: req.Kind, Provider: req.Provider, Every: req.Every, RetryAfter: req.RetryAfter, Status: req.Status, EchoKey: req.EchoKey}, from: now}
	if req.Duration > 0 {
		ss.until = now.Add(req.Duration.D())
	}
	s.storms = append(s.storms, ss)
}

// ---- the common request path ----

// call describes one model request after the provider handler parsed it.
type call struct {
	provider  string
	model     string // scope: model, or Azure deployment
	input     int64  // input tokens in the usage (for Anthropic excludes cache reads and writes)
	cacheRead int64
	cacheWrit int64
	cacheKey  string // Anthropic prompt cache prefix key ("" = none)
	cacheSize int64
	maxTokens int64 // explicit max output tokens (0 = not set)
	choices   int64 // outputs generated (chat and completions n × prompts; 0 = 1)
	embedding bool
	stream    bool
}

// rateView is the state of a scope's limiters, rendered into headers.
type rateView struct {
	req, tok, in, out *dimView
	now               time.Time
}

type dimView struct {
	limit, remaining int64
	reset            time.Duration
}

func view(d *dimLimiter, now time.Time) *dimView {
	if d == nil {
		return nil
	}
	return &dimView{limit: d.limit, remaining: d.remaining(now), reset: d.reset(now)}
}

// ticket is an admitted request.
type ticket struct {
	c        call
	sc       *scope
	output   int64 // output tokens to produce
	finish   bool  // true when output == the bound (length / max_tokens stop)
	reserved int64
	rv       rateView
	id       string
}

// rejection is a 429 or 503 to send.
type rejection struct {
	status int
	deny   *denial // nil for storms
	storm  *Storm
	wait   time.Duration // Retry-After (0 = none)
	rv     rateView
	echo   string // the credential to quote in the message (Storm.EchoKey)
	// bare: no rate-limit headers and no Retry-After (a capacity storm's
	// bare and overloaded dialects).
	bare bool
}

// capacityStorms admits c against every active capacity storm of its
// provider, charging each storm's reduced capacity. It refuses, in the
// storm's dialect, what is above one of them; otherwise it returns the
// rate view a headers-dialect storm reports on success (nil: none).
// Called with s.mu held.
func (s *Server) capacityStorms(c call, d demand, now time.Time) (*rateView, *rejection) {
	var rv *rateView
	for _, storm := range s.storms {
		if storm.Kind != StormCapacity || !storm.active(now) || (storm.Provider != "" && storm.Provider != c.provider) {
			continue
		}
		key := c.provider + "\x00" + c.model
		cs := storm.scopes[key]
		if cs == nil {
			if storm.scopes == nil {
				storm.scopes = map[string]*scope{}
			}
			cs = newScope(c.provider, c.model, s.cfg.Providers[c.provider].limitsFor(c.model).scaled(storm.Fraction), storm.from, now)
			storm.scopes[key] = cs
		}
		view := rateView{req: view(cs.req, now), tok: view(cs.tok, now), in: view(cs.in, now), out: view(cs.out, now), now: now}
		den := cs.admit(d, now)
		if den == nil {
			if storm.Dialect == "" || storm.Dialect == DialectHeaders {
				rv = &view
			}
			continue
		}
		storm.n++
		st := s.stats[c.provider]
		rj := &rejection{status: http.StatusTooManyRequests, deny: den, storm: &storm.Storm, wait: den.wait, rv: view}
		switch storm.Dialect {
		case DialectBare:
			rj.bare, rj.wait = true, 0
		case DialectOverloaded:
			rj.bare, rj.wait, rj.status = true, 0, dialectOf(c.provider).overloadStatus()
		}
		if rj.status == http.StatusTooManyRequests {
			st.RateLimited++
			st.RateLimitedBy[DimCapacityStorm]++
			s.mLimited.WithLabelValues(c.provider, DimCapacityStorm).Inc()
		} else {
			st.Overloaded++
		}
		s.mRequests.WithLabelValues(c.provider, strconv.Itoa(rj.status)).Inc()
		return nil, rj
	}
	return rv, nil
}

func (s *Server) scopeFor(provider, model string, now time.Time) *scope {
	key := provider + "\x00" + model
	sc := s.scopes[key]
	if sc == nil {
		sc = newScope(provider, model, s.cfg.Providers[provider].limitsFor(model), s.start, now)
		s.scopes[key] = sc
	}
	return sc
}

// admit runs storms and limits for c. Exactly one of the results is non-nil.
func (s *Server) admit(r *http.Request, c call) (*ticket, *rejection) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	st := s.stats[c.provider]
	st.Requests++
	pc := s.cfg.Providers[c.provider]
	sc := s.scopeFor(c.provider, c.model, now)
	rvNow := func() rateView {
		return rateView{req: view(sc.req, now), tok: view(sc.tok, now), in: view(sc.in, now), out: view(sc.out, now), now: now}
	}

	if rj := s.stormRefusal(r, c, st, now, rvNow); rj != nil {
		return nil, rj
	}

	counted := s.cacheAccount(&c, pc, now)

	bound := c.maxTokens
	if bound <= 0 {
		bound = pc.DefaultMaxTokens
		if bound <= 0 {
			bound = 1024
		}
	}
	var reserve int64
	if pc.ReserveMaxTokens && c.maxTokens > 0 && !c.embedding {
		reserve = c.maxTokens * max(1, c.choices)
	}
	want := demand{input: counted, output: reserve}
	capRV, rj := s.capacityStorms(c, want, now)
	if rj != nil {
		return nil, rj
	}
	if d := sc.admit(want, now); d != nil {
		st.RateLimited++
		st.RateLimitedBy[d.dim]++
		s.mLimited.WithLabelValues(c.provider, d.dim).Inc()
		s.mRequests.WithLabelValues(c.provider, "429").Inc()
		return nil, &rejection{status: http.StatusTooManyRequests, deny: d, wait: d.wait, rv: rvNow()}
	}
	if c.cacheKey != "" {
		s.cache[c.cacheKey] = now.Add(s.cfg.CacheTTL.D())
	}

	t := &ticket{c: c, sc: sc, reserved: reserve, rv: rvNow(), id: strconv.FormatInt(s.seq.Add(1), 10)}
	if capRV != nil {
		t.rv = *capRV // a provider that says so reports its reduced limits
	}
	if !c.embedding {
		t.output = s.drawOutput(r, bound)
		t.finish = t.output >= bound
	}
	if c.stream {
		st.Streams++
	}
	s.mInFlight.WithLabelValues(c.provider).Inc()
	return t, nil
}

// stormRefusal is the answer of the first active request storm that
// refuses this call (counted), or nil. Capacity storms are not request
// storms: capacityStorms handles them against the reduced capacity.
func (s *Server) stormRefusal(r *http.Request, c call, st *ProviderStats, now time.Time, rvNow func() rateView) *rejection {
	for _, storm := range s.storms {
		if storm.Kind == StormCapacity || !storm.active(now) || (storm.Provider != "" && storm.Provider != c.provider) {
			continue
		}
		storm.n++
		if storm.Every > 1 && (storm.n-1)%int64(storm.Every) != 0 {
			continue
		}
		rj := &rejection{storm: &storm.Storm, wait: storm.RetryAfter.D(), rv: rvNow()}
		if storm.EchoKey {
			rj.echo = presentedKey(r)
		}
		if storm.Kind == "429" {
			rj.status = http.StatusTooManyRequests
			if rj.wait == 0 {
				rj.wait = time.Second
			}
			st.RateLimited++
			st.RateLimitedBy[DimStorm]++
			s.mLimited.WithLabelValues(c.provider, DimStorm).Inc()
		} else {
			rj.status = http.StatusServiceUnavailable
			st.Overloaded++
		}
		if storm.Status != 0 {
			rj.status = storm.Status
		}
		s.mRequests.WithLabelValues(c.provider, strconv.Itoa(rj.status)).Inc()
		return rj
	}
	return nil
}

// cacheAccount applies the Anthropic prompt cache to c: a live prefix is
// a cache read, otherwise the prefix is written to the cache (and counts
// as input). It returns the input tokens the provider's limits count.
func (s *Server) cacheAccount(c *call, pc ProviderConfig, now time.Time) (counted int64) {
	hit := false
	if c.cacheKey != "" {
		if exp, ok := s.cache[c.cacheKey]; ok && now.Before(exp) {
			hit = true
		}
	}
	if hit {
		c.cacheRead = c.cacheSize
	} else {
		c.cacheWrit = c.cacheSize
	}
	c.input -= c.cacheRead + c.cacheWrit
	counted = c.input + c.cacheWrit
	if pc.CountCacheReads {
		counted += c.cacheRead
	}
	return counted
}

func (s *Server) drawOutput(r *http.Request, bound int64) int64 {
	if v := r.Header.Get(HeaderOutputTokens); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			return min(n, bound)
		}
	}
	lo, hi := s.cfg.Output.Min, s.cfg.Output.Max
	f := lo
	if hi > lo {
		f = lo + (hi-lo)*s.rng.Float64()
	}
	n := int64(math.Round(f * float64(bound)))
	return max(min(n, bound), min(1, bound))
}

// finish settles the output charge and records usage. delivered is the number
// of output tokens actually sent; cancelled reports a client that went away.
func (s *Server) finish(t *ticket, delivered int64, cancelled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	pc := s.cfg.Providers[t.c.provider]
	delta := delivered - t.reserved
	if delta < 0 && !pc.RefundUnused {
		delta = 0
	}
	t.sc.settle(delta, now)
	st := s.stats[t.c.provider]
	code := "200"
	in := t.c.input + t.c.cacheWrit
	if cancelled {
		st.Cancelled++
		st.CancelledTokens += in + delivered
		code = "499"
	} else {
		st.OK++
	}
	st.Tokens.Input += in
	st.Tokens.Output += delivered
	st.Tokens.Total += in + delivered
	st.Tokens.CacheRead += t.c.cacheRead
	st.Tokens.CacheWrite += t.c.cacheWrit
	p := t.c.provider
	s.mTokens.WithLabelValues(p, "input").Add(float64(in))
	s.mTokens.WithLabelValues(p, "output").Add(float64(delivered))
	s.mTokens.WithLabelValues(p, "total").Add(float64(in + delivered))
	s.mTokens.WithLabelValues(p, "cache_read").Add(float64(t.c.cacheRead))
	s.mTokens.WithLabelValues(p, "cache_write").Add(float64(t.c.cacheWrit))
	s.mRequests.WithLabelValues(p, code).Inc()
	s.mInFlight.WithLabelValues(p).Dec()
}

func (s *Server) badRequest(provider string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats[provider].Requests++
	s.stats[provider].BadRequests++
	s.mRequests.WithLabelValues(provider, "400").Inc()
}

// sleep applies the latency model; it fails when the client is gone.
func (s *Server) sleep(ctx context.Context, d time.Duration) error { return s.cfg.Sleep(ctx, d) }

func (s *Server) perToken(n int64) time.Duration {
	return time.Duration(n) * s.cfg.Latency.PerOutputToken.D()
}

// decodeBody reads a JSON object body.
func decodeBody(r *http.Request) (map[string]any, error) {
	var m map[string]any
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("could not parse the JSON body of your request: %v", err)
	}
	if m == nil {
		return nil, errors.New("the request body must be a JSON object")
	}
	return m, nil
}

func num(v any) (int64, bool) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// retryAfterSeconds renders a wait as RFC 9110 delay-seconds (rounded up, >= 1).
func retryAfterSeconds(d time.Duration) string {
	sec := int64(math.Ceil(d.Seconds()))
	if sec < 1 {
		sec = 1
	}
	return strconv.FormatInt(sec, 10)
}

// retryAfterMillis renders a wait as integer milliseconds (rounded up, >= 1).
func retryAfterMillis(d time.Duration) string {
	ms := int64(math.Ceil(float64(d) / float64(time.Millisecond)))
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10)
}
