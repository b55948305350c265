// Package synth generates a seeded, realistic Sluice event log — the event
// sequences a gateway and a ledger write for each request (one reserve,
// decision, queue, dispatch, provider 429 or 503 and a retry without a
// new reserve, reconcile (partial for a cut answer), a release of a grant
// never used, a late grant, a hold the ledger expired when its gateway
// died, outcome), plus the ConfigChanged of every scope — for analytics'
// oracle test, its chDB comparison, the report's golden files and the
// benchmarks. The same Options and Seed give the same records byte for
// byte. Its attempt shapes are those of the logs recorded from the real
// gateway (testdata of package analytics; TestShapesMatchRecorded).
//
// One route ("chat-4x") reserves about 4× the output it uses, so the
// calibration report has something to correct.
package synth

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/sluice-dev/sluice/schemas"
)

// Record is one Kafka record of the generated log.
type Record struct {
	Partition int32
	LogTimeMs int64 // the record timestamp (LogAppendTime on Sluice topics)
	Value     []byte
	Event     *schemas.Event
}

// Options shape a run. The zero value of a field takes its default.
type Options struct {
	Seed     uint64
	Requests int   // logical requests; default 2000
	StartMs  int64 // log time of the first event; default 2026-11-23T00:00:00Z (a Monday)
	// SpanMs is the log-time span the arrivals cover; default 7 days.
	SpanMs int64
	// OutputFactor4x is how much chat-4x over-reserves output; default 4.
	OutputFactor4x float64
	// Batch, when > 0, goes into every event and request id, so logs
	// generated in batches (the benchmarks) do not collide.
	Batch int
}

// DefaultStartMs is Monday 2026-11-23 00:00:00 UTC.
const DefaultStartMs = 1795392000000

func (o Options) withDefaults() Options {
	if o.Requests <= 0 {
		o.Requests = 2000
	}
	if o.StartMs <= 0 {
		o.StartMs = DefaultStartMs
	}
	if o.SpanMs <= 0 {
		o.SpanMs = 7 * 86400 * 1000
	}
	if o.OutputFactor4x <= 0 {
		o.OutputFactor4x = 4
	}
	return o
}

type route struct {
	name, provider, model, scope string
	partition                    int32
	inMean, outMean              int64
	outFactor                    float64 // reserved output ÷ actual output
	inFactor                     float64 // estimated input ÷ actual input
}

type tenant struct{ id, class string }

// Scopes are the provider scopes of the generated log, with their buckets.
var Scopes = []struct {
	Name    string
	Buckets []Bucket
}{
	{"openai:org-1/proj-1", []Bucket{
		{"org", "org-1", schemas.DimRequests, 600},
		{"org", "org-1", schemas.DimInputTokens, 400000},
		{"org", "org-1", schemas.DimOutputTokens, 60000},
		{"tenant", "acme", schemas.DimTotalTokens, 200000},
		{"tenant", "globex", schemas.DimTotalTokens, 150000},
		{"tenant", "initech", schemas.DimTotalTokens, 100000},
	}},
	{"anthropic:ws-1/sonnet", []Bucket{
		{"org", "org-1", schemas.DimRequests, 300},
		{"org", "org-1", schemas.DimInputTokens, 200000},
		{"org", "org-1", schemas.DimOutputTokens, 40000},
		{"tenant", "acme", schemas.DimRequestsPerDay, 20000},
	}},
}

// Bucket is one configured bucket of a generated scope.
type Bucket struct {
	Level, ID string
	Dimension schemas.Dimension
	Capacity  int64
}

var routes = []route{
	{"chat-default", "openai", "gpt-4o", "openai:org-1/proj-1", 0, 1800, 300, 1.3, 1.05},
	{"chat-4x", "openai", "gpt-4o-mini", "openai:org-1/proj-1", 0, 900, 120, 4, 1.0},
	{"summarize", "anthropic", "claude-sonnet", "anthropic:ws-1/sonnet", 1, 12000, 400, 1.5, 0.92},
}

var tenants = []tenant{{"acme", "interactive"}, {"globex", "agent"}, {"initech", "batch"}}

var families = []string{"pf-support", "pf-search", "pf-extract", "pf-code"}

// Generate returns the log of one run, in log-time order per partition
// (and globally).
func Generate(o Options) []Record {
	o = o.withDefaults()
	g := &gen{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x5eed)), side: rand.New(rand.NewPCG(o.Seed^0xc11e, o.Seed))}
	for i, sc := range Scopes {
		g.config(int32(i), sc.Name, sc.Buckets)
	}
	step := o.SpanMs / int64(o.Requests)
	for i := 0; i < o.Requests; i++ {
		g.request(i, o.StartMs+1000+int64(i)*step+g.rng.Int64N(max(step, 1)))
	}
	sortRecords(g.out)
	return g.out
}

type gen struct {
	o   Options
	rng *rand.Rand
	// side draws the client's layer (SDK retries, idempotency keys,
	// duplicates) and everything of the request ids it adds, so the first
	// tries are the same as without it.
	side *rand.Rand
	out  []Record
	ids  int
	// last and lastT: the Outcome status and time of the latest try
	// ("" if it wrote none: the gateway died).
	last  string
	lastT int64
}

func (g *gen) emit(e *schemas.Event, partition int32, logMs int64) {
	g.ids++
	e.V = schemas.Version
	e.ID = fmt.Sprintf("0190a0b0-%04x-7000-8000-%012x", g.o.Batch&0xffff, g.ids)
	e.ProducedAtMs = logMs
	b, err := schemas.Encode(e)
	if err != nil {
		panic(err) // the generator builds only valid events
	}
	g.out = append(g.out, Record{Partition: partition, LogTimeMs: logMs, Value: b, Event: e})
}

func (g *gen) config(partition int32, scope string, buckets []Bucket) {
	type bc struct {
		Level     string            `json:"level"`
		ID        string            `json:"id"`
		Dimension schemas.Dimension `json:"dimension"`
		Capacity  int64             `json:"capacity"`
		PeriodMs  int64             `json:"period_ms"`
	}
	var bs []bc
	for _, b := range buckets {
		p := int64(60000)
		if b.Dimension == schemas.DimRequestsPerDay {
			p = 86400000
		}
		bs = append(bs, bc{b.Level, b.ID, b.Dimension, b.Capacity, p})
	}
	doc, _ := json.Marshal(map[string]any{"scopes": []any{map[string]any{"name": scope, "buckets": bs}}})
	e := &schemas.Event{Type: schemas.TypeConfigChanged, Scope: scope,
		ConfigChanged: &schemas.ConfigChanged{ConfigVersion: "v1", Source: "deploy/examples/sluice.yaml", Ledger: doc}}
	g.emit(e, partition, g.o.StartMs)
}

// around returns a value near mean (±50 %, at least 1).
func (g *gen) around(mean int64) int64 {
	return max(1, mean/2+g.rng.Int64N(mean+1))
}

// request writes one logical request: its first try and, as the
// client's layer does, the SDK's retries of a failed or timed-out try (a
// new request id with X-Stainless-Retry-Count n, 0.5–8 s later, at most
// 2) and, for one in ten with an idempotency key, one duplicate sent again
// by the client (same key, retry count 0).
func (g *gen) request(i int, t int64) {
	r := routes[g.rng.IntN(len(routes))]
	tn := tenants[g.rng.IntN(len(tenants))]
	reqID := fmt.Sprintf("req-%06d", i)
	if g.o.Batch > 0 {
		reqID = fmt.Sprintf("req-b%d-%06d", g.o.Batch, i)
	}
	key := ""
	if g.side.IntN(5) == 0 {
		key = "idem-" + reqID
	}
	g.last = ""
	g.try(reqID, r, tn, t, 0, key)
	first := g.rng
	g.rng = g.side
	defer func() { g.rng = first }()
	for n := int32(1); n <= 2 && (g.last == "failure" || g.last == "timeout") && g.rng.IntN(2) == 0; n++ {
		g.try(fmt.Sprintf("%s-sdk%d", reqID, n), r, tn, g.lastT+500+g.rng.Int64N(7500), n, key)
	}
	if key != "" && g.rng.IntN(10) == 0 {
		g.try(reqID+"-dup", r, tn, t+100+g.rng.Int64N(2000), 0, key)
	}
}

// try writes one request id's attempts: clientRetries and key are its
// ReserveRequested's client_retry_count and idempotency_key.
func (g *gen) try(reqID string, r route, tn tenant, t int64, clientRetries int32, key string) {
	x := &attempts{g: g, reqID: reqID, r: r, tn: tn, t: t, maxAttempts: 3, firstQueueMs: -1}
	x.streaming = g.rng.IntN(3) == 0
	family := families[g.rng.IntN(len(families))]
	x.actIn = g.around(r.inMean)
	x.actOut = g.around(r.outMean)
	if g.rng.IntN(4) == 0 {
		x.cached = x.actIn / 3
	}
	x.estIn = int64(float64(x.actIn) * r.inFactor)
	x.estOut = int64(float64(x.actOut) * r.outFactor)
	if r.name == "chat-4x" {
		x.estOut = int64(float64(x.actOut) * g.o.OutputFactor4x)
	}
	path := []schemas.PathLevel{{Level: "org", ID: "org-1"}, {Level: "tenant", ID: tn.id}, {Level: "key", ID: "key-" + tn.id}}
	x.deadline = map[string]int64{"interactive": 3000, "agent": 20000, "batch": 1200000}[tn.class]
	x.received = t
	// One ReserveRequested per logical request: the gateway retries with
	// a RetryRequested, and the ledger gives the retry the same path and
	// estimates (admission/lifecycle upstreamError, ledger/feedback.go).
	x.first = x.env(schemas.TypeReserveRequested, 1)
	x.first.ReserveRequested = &schemas.ReserveRequested{Path: path, InputTokens: x.estIn, CachedInputTokens: x.cached,
		OutputTokens: x.estOut, Streaming: x.streaming, MaxWaitMs: x.deadline / 2, DeadlineMs: x.deadline,
		MaxAttempts: x.maxAttempts, PromptFamily: family, ClientRetryCount: clientRetries, IdempotencyKey: key}
	g.emit(x.first, r.partition, t)
	// fresh: the attempt was announced by a ReserveRequested (the first,
	// or one the gateway asked again after a late grant), not by a
	// RetryRequested.
	fresh := true
	for attempt := int32(1); ; attempt++ {
		x.t += 1 + g.rng.Int64N(3)
		roll := g.rng.IntN(100)
		var gd schemas.GatewayDecision
		var done bool
		if fresh {
			gd, done = x.decideFresh(attempt, roll)
		} else {
			gd, done = x.decideRetry(attempt, roll)
		}
		if done {
			return
		}
		switch x.grant(attempt, gd) {
		case stepDone:
			return
		case stepAskAgain:
			fresh = true
			continue
		}
		if x.dispatch(attempt, gd) == stepDone {
			return
		}
		fresh = false
	}
}

// attempts is one logical request of the generator, attempt by attempt.
type attempts struct {
	g                     *gen
	reqID                 string
	r                     route
	tn                    tenant
	t                     int64 // the log time reached
	streaming             bool
	actIn, actOut, cached int64
	estIn, estOut         int64
	deadline, received    int64
	firstQueueMs          int64
	maxAttempts           int32
	first                 *schemas.Event // the ReserveRequested
}

// step is what follows an attempt's grant or dispatch.
type step int

const (
	stepNext     step = iota // go on with this attempt
	stepDone                 // the request ended (or its gateway died)
	stepAskAgain             // a new ReserveRequested for the next attempt
	stepRetry                // a RetryRequested for the next attempt
)

func (x *attempts) env(typ schemas.Type, attempt int32) *schemas.Event {
	return &schemas.Event{Type: typ, RequestID: x.reqID, Attempt: attempt, Node: "gw-1", Scope: x.r.scope,
		Tenant: x.tn.id, KeyID: "key-" + x.tn.id, Route: x.r.name, Class: x.tn.class}
}

func (x *attempts) dec(attempt int32, st schemas.Status, gd schemas.GatewayDecision) *schemas.Event {
	d := x.env(schemas.TypeDecision, attempt)
	d.Node = "ledger-1"
	d.Decision = &schemas.Decision{Status: st, GatewayDecision: gd, LogTimeMs: x.t, InputPartition: x.r.partition, HoldTTLMs: 60000}
	return d
}

func (x *attempts) outcome(attempt int32, status string, http int32, code string, gd schemas.GatewayDecision, in, out int64) {
	x.g.outcome(x.env, attempt, x.t, x.received, status, http, code, gd, x.firstQueueMs, in, out)
}

// decideRetry is the ledger's answer to a retry: denied when the attempts
// or the scope's retry budget are spent, otherwise queued until its
// backoff passes, then granted.
func (x *attempts) decideRetry(attempt int32, roll int) (schemas.GatewayDecision, bool) {
	g, p := x.g, x.r.partition
	if attempt > x.maxAttempts || roll < 25 {
		d := x.dec(attempt, schemas.StatusDenied, schemas.GDRejectedPolicy)
		d.Decision.Reason, d.Decision.RetryClass = schemas.ReasonRetryBudgetExhausted, schemas.RetryPolicy
		if attempt > x.maxAttempts {
			d.Decision.Reason = schemas.ReasonRetryAttemptsExhausted
		}
		g.emitDecision(d, p, x.t)
		x.outcome(attempt, "failure", 429, "rate_limited", schemas.GDAdmittedThenProviderReject, 0, 0)
		return "", true
	}
	g.emitDecision(x.dec(attempt, schemas.StatusQueued, schemas.GDQueued), p, x.t)
	x.t += 1000 + g.rng.Int64N(500)
	return schemas.GDQueuedThenAdmitted, false
}

// decideFresh is the ledger's answer to a ReserveRequested: mostly granted
// at once; some queued then granted, expired or cancelled by a client that
// went away; a few denied.
func (x *attempts) decideFresh(attempt int32, roll int) (schemas.GatewayDecision, bool) {
	g, p, tn := x.g, x.r.partition, x.tn
	if roll < 6 { // denied
		d := x.dec(attempt, schemas.StatusDenied, schemas.GDRejectedLocally)
		d.Decision.Reason, d.Decision.LimitPath, d.Decision.LimitDimension = "over_limit", "org:org-1", schemas.DimOutputTokens
		d.Decision.Needed, d.Decision.Available, d.Decision.RetryAfterMs = x.estOut, x.estOut/3, 800
		d.Decision.RetryClass = "retryable_capacity"
		g.emitDecision(d, p, x.t)
		x.outcome(attempt, "failure", 429, "rate_limited", schemas.GDRejectedLocally, 0, 0)
		return "", true
	}
	if roll >= 20 {
		return schemas.GDAdmitted, false
	}
	// queued
	d := x.dec(attempt, schemas.StatusQueued, schemas.GDQueued)
	d.Decision.LimitPath, d.Decision.LimitDimension = "org:org-1/tenant:"+tn.id, schemas.DimTotalTokens
	d.Decision.Needed, d.Decision.Available = x.estIn+x.estOut, (x.estIn+x.estOut)/2
	g.emitDecision(d, p, x.t)
	wait := 5 + g.rng.Int64N(x.deadline/2)
	switch {
	case roll == 6 && attempt == 1: // its gateway died (kill -9) while it
		// waited: the ledger drops it as node_lost once the node is
		// silent for node_liveness_ms; nobody writes an Outcome
		// (ledger/liveness.go)
		x.t += wait
		e := x.dec(attempt, schemas.StatusExpired, schemas.GDQueuedThenExpired)
		e.Decision.Reason = schemas.ReasonNodeLost
		g.emitDecision(e, p, x.t)
		return "", true
	case roll < 9: // expired in the queue
		x.t += x.deadline / 2
		e := x.dec(attempt, schemas.StatusExpired, schemas.GDQueuedThenExpired)
		e.Decision.Reason = "queue_timeout"
		g.emitDecision(e, p, x.t)
		x.outcome(attempt, "timeout", 429, "queue_timeout", schemas.GDQueuedThenExpired, 0, 0)
		return "", true
	case roll < 10: // the client went away while queued
		x.t += wait / 2
		rel := x.env(schemas.TypeReleased, attempt)
		rel.Released = &schemas.Released{Reason: schemas.ReasonClientDisconnect}
		g.emit(rel, p, x.t)
		x.t++
		g.emitDecision(x.dec(attempt, schemas.StatusCancelled, schemas.GDQueued), p, x.t)
		x.outcome(attempt, "cancelled", 499, "client_disconnect", schemas.GDQueued, 0, 0)
		return "", true
	}
	x.t += wait
	return schemas.GDQueuedThenAdmitted, false
}

// grant writes the attempt's grant: mostly delivered at once; rarely
// late (released unused, asked again when the deadline allows) or held by
// a gateway that then died.
func (x *attempts) grant(attempt int32, gd schemas.GatewayDecision) step {
	g, p, tn := x.g, x.r.partition, x.tn
	gr := x.dec(attempt, schemas.StatusGranted, gd)
	gr.Decision.Borrowed = tn.class == "batch" && g.rng.IntN(5) == 0
	gr.Decision.Shadow = shadowVerdict(x.r, tn, x.estIn, x.estOut, x.t)
	switch g.rng.IntN(200) {
	case 0: // a late grant: it reached the gateway seconds after the
		// ledger charged the bucket (a stalled ledger); the gateway
		// releases it unused and, when the deadline allows, asks again
		// with a new ReserveRequested (admission/lifecycle decided);
		// otherwise the request fails late_grant
		lag := 3000 + g.rng.Int64N(2000)
		g.emit(gr, p, x.t+lag)
		x.t += lag + 1
		rel := x.env(schemas.TypeReleased, attempt)
		rel.Released = &schemas.Released{Reason: schemas.ReasonLateGrant}
		g.emit(rel, p, x.t)
		if tn.class != "interactive" && attempt < x.maxAttempts {
			again := x.env(schemas.TypeReserveRequested, attempt+1)
			rr := *x.first.ReserveRequested
			again.ReserveRequested = &rr
			g.emit(again, p, x.t)
			return stepAskAgain
		}
		x.outcome(attempt, "timeout", 504, "late_grant", schemas.GDLateGrant, 0, 0)
		return stepDone
	case 1: // the gateway died holding the grant: the ledger expires the
		// hold after its TTL, or (a gateway that heartbeats, as every
		// current one does) once the node is silent for
		// node_liveness_ms; nobody writes an Outcome
		g.emitDecision(gr, p, x.t)
		e := x.dec(attempt, schemas.StatusHoldExpired, gd)
		e.Decision.Reason, e.Decision.LogTimeMs = schemas.ReasonHoldAbandoned, x.t+gr.Decision.HoldTTLMs
		if tn.class != "interactive" {
			e.Decision.Reason, e.Decision.LogTimeMs = schemas.ReasonNodeLost, x.t+10_000
		}
		g.emitDecision(e, p, e.Decision.LogTimeMs)
		return stepDone
	}
	g.emitDecision(gr, p, x.t)
	return stepNext
}

// dispatch sends the granted attempt to the provider: a 429 or 503 is
// retried by the gateway (stepRetry), else the answer is reconciled,
// sometimes partially by a client that went away.
func (x *attempts) dispatch(attempt int32, gd schemas.GatewayDecision) step {
	g, p, r := x.g, x.r.partition, x.r
	x.t += 1 + g.rng.Int64N(4)
	disp := x.env(schemas.TypeDispatched, attempt)
	q := x.t - x.received
	if x.firstQueueMs < 0 {
		x.firstQueueMs = q
	}
	disp.Dispatched = &schemas.Dispatched{Provider: schemas.ProviderKind(r.provider), Deployment: r.model + "-east", Model: r.model, QueueMs: q}
	g.emit(disp, p, x.t)
	lat := 200 + g.rng.Int64N(2500)
	x.t += lat
	if g.rng.IntN(100) < 5 { // provider 429 (or 503), retried by the gateway
		pr := x.env(schemas.TypeProviderRejected, attempt)
		pr.ProviderRejected = &schemas.ProviderRejected{HTTPStatus: 429, Kind: "rate_limited", Limiter: schemas.DimRequests, RetryAfterMs: 1000, Deployment: r.model + "-east"}
		if g.rng.IntN(4) == 0 {
			pr.ProviderRejected = &schemas.ProviderRejected{HTTPStatus: 503, Kind: "overloaded", Deployment: r.model + "-east"}
		}
		g.emit(pr, p, x.t)
		rr := x.env(schemas.TypeRetryRequested, attempt+1)
		rr.RetryRequested = &schemas.RetryRequested{PreviousAttempt: attempt, Reason: "retryable_capacity", RetryAfterMs: pr.ProviderRejected.RetryAfterMs}
		g.emit(rr, p, x.t)
		return stepRetry
	}
	rc := x.env(schemas.TypeReconciled, attempt)
	rc.Reconciled = &schemas.Reconciled{InputTokens: x.actIn, CachedInputTokens: x.cached, OutputTokens: x.actOut,
		HTTPStatus: 200, FirstByteMs: lat / 4, TotalMs: lat, Streaming: x.streaming,
		EstimatedInputTokens: x.estIn, EstimatedOutputTokens: x.estOut}
	if g.rng.IntN(100) < 3 { // the client went away mid-answer: a partial reconcile
		// (the gateway settles what the provider reported; it writes a
		// Released only for a grant it never used)
		rc.Reconciled.OutputTokens, rc.Reconciled.Partial, rc.Reconciled.HTTPStatus = x.actOut/2, true, 499
		g.emit(rc, p, x.t)
		x.outcome(attempt, "cancelled", 499, "client_disconnect", gd, x.actIn, x.actOut/2)
		return stepDone
	}
	g.emit(rc, p, x.t)
	x.outcome(attempt, "success", 200, "", gd, x.actIn, x.actOut)
	return stepDone
}

// emitDecision writes a Decision whose record reaches sluice.decisions a
// little after the ledger charged the bucket (Decision.log_time_ms = ledgerMs),
// as it does under load: usually a few ms, one in twenty up to 700 ms.
func (g *gen) emitDecision(d *schemas.Event, partition int32, ledgerMs int64) {
	lag := g.rng.Int64N(5)
	if g.rng.IntN(20) == 0 {
		lag = g.rng.Int64N(700)
	}
	g.emit(d, partition, ledgerMs+lag)
}

// shadowVerdict is the verdict of the shadow limits the generated config
// tries out (evaluated, never enforced): a tenant output-token bucket on
// the OpenAI scope and an org input-token bucket on batch traffic of the
// Anthropic scope; nil on paths without one. The free capacity is a hash
// of the log time in [0, 3·needed] (resp. [0, 2·needed]), so about a third
// (resp. half) of the grants would have been refused. It draws nothing from
// the generator, so the rest of the log is the same as without it.
func shadowVerdict(r route, tn tenant, estIn, estOut, t int64) *schemas.ShadowVerdict {
	var v schemas.ShadowVerdict
	switch {
	case r.partition == 0:
		v = schemas.ShadowVerdict{LimitPath: "org:org-1/tenant:" + tn.id, LimitDimension: schemas.DimOutputTokens,
			Needed: estOut, Available: int64(uint64(t) * 2654435761 % uint64(3*estOut+1)), Buckets: 1}
	case tn.class == "batch":
		v = schemas.ShadowVerdict{LimitPath: "org:org-1", LimitDimension: schemas.DimInputTokens,
			Needed: estIn, Available: int64(uint64(t) * 40503 % uint64(2*estIn+1)), Buckets: 1}
	default:
		return nil
	}
	if v.Needed <= v.Available {
		return &schemas.ShadowVerdict{Buckets: v.Buckets}
	}
	v.Limited, v.Reason = true, schemas.ReasonCapacity
	return &v
}

func (g *gen) outcome(env func(schemas.Type, int32) *schemas.Event, attempt int32, t, received int64,
	status string, http int32, code string, gd schemas.GatewayDecision, queueMs, in, out int64) {
	o := env(schemas.TypeOutcome, attempt)
	o.Outcome = &schemas.Outcome{Status: schemas.OutcomeStatus(status), HTTPStatus: http, Attempts: attempt, QueueMs: max(queueMs, 0),
		TotalMs: t + 1 - received, ErrorCode: code, GatewayDecision: gd, InputTokens: in, OutputTokens: out}
	r := routes[0]
	for _, x := range routes {
		if x.name == o.Route {
			r = x
		}
	}
	g.emit(o, r.partition, t+1)
	g.last, g.lastT = status, t+1
}

func sortRecords(rs []Record) {
	// Stable by log time: events of one request are already in order.
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].LogTimeMs < rs[j].LogTimeMs })
}
