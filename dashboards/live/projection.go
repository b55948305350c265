package live

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// Limits that keep the projection's memory bounded whatever the traffic.
const (
	// RecentDecisions is the length of the recent-decision rings (one
	// global, one per tenant).
	RecentDecisions = 50
	// MaxSeries bounds the number of (scope, tenant, key, class) series;
	// events of new series beyond it are counted in dropped_events.
	MaxSeries = 2000
	// maxTenantRings bounds the per-tenant decision rings.
	maxTenantRings = 2000
	// flightTTL forgets a grant that was never settled (the ledger expires
	// abandoned holds much sooner; this only guards memory).
	flightTTL = 15 * time.Minute
	// tombTTL is how long a settlement that arrived before its grant (the
	// topics are read independently) is remembered.
	tombTTL  = 2 * time.Minute
	maxTombs = 100000
	// observedTTL drops provider observations nobody refreshed.
	observedTTL = 10 * time.Minute
	// waitTTL forgets a queued request whose end was never seen (the
	// longest class wait of the examples is 20 min).
	waitTTL   = 30 * time.Minute
	maxWaits  = 100000
	maxFlight = 100000
	// TimelineTenantsMax bounds the tenants drawn over time in the operator
	// view; the rest are summed as OtherTenants.
	TimelineTenantsMax = 8
	// estErrSpanS is the trailing span of the estimation-error line: each
	// point is (estimate − actual) ÷ actual over the reconciles of the last
	// estErrSpanS seconds, so a second with one request does not spike it.
	estErrSpanS = 10
)

// OtherTenants names the sum of the tenants beyond TimelineTenantsMax.
const OtherTenants = "(other tenants)"

// Counter slots of one time bucket.
const (
	cReceived = iota
	cGranted
	cQueued
	cDenied
	cExpired
	cCancelled
	cDispatched
	cRetries
	cProv429
	cProv503
	cProvOther
	cReconciled
	cReleased
	cEstIn
	cActIn
	cEstOut
	cActOut
	cOutSuccess
	cOutCancelled
	cOutTimeout
	cOutFailure
	cOutOther
	cDeniedDim  // first of deniedSlots slots, indexed like dimSlot
	deniedSlots = 16
	nCounters   = cDeniedDim + deniedSlots
)

// otherSlot counts denials without a limiting dimension (policy, cooldown…)
// or with a dimension this build does not know.
const otherSlot = deniedSlots - 1

var dimSlot = func() map[schemas.Dimension]int {
	m := map[schemas.Dimension]int{}
	for i, d := range schemas.Dimensions {
		if i < otherSlot {
			m[d] = i
		}
	}
	return m
}()

func slotName(i int) string {
	if i == otherSlot {
		return "other"
	}
	for d, j := range dimSlot {
		if j == i {
			return string(d)
		}
	}
	return "other"
}

type vec [nCounters]int64

// SeriesKey identifies one rolling-counter series.
type SeriesKey struct {
	Scope, Tenant, KeyID, Class string
}

type bucket struct {
	sec int64 // unix second
	v   vec
	// queue depth of the series when the bucket opened and at its latest
	// event: a gauge drawn over time (seconds without a bucket carry the
	// previous bucket's end value).
	depthStart, depthEnd int64
}

type series struct {
	key SeriesKey
	// subs are the sub-scopes of a split scope (ledger/split.go) whose
	// events the series sums, sorted (a key's requests go to one, so
	// usually one; more after the scope was split differently).
	subs     []string
	buckets  []bucket // ascending sec, at most window+1 of them
	inFlight int64
	queued   int64 // requests waiting in a queue now (a gauge)
}

type flight struct {
	s    *series
	atMs int64
	// grantMs is when the hold began: Decision.log_time_ms, the ledger
	// clock that charged the bucket (the view's clock if 0).
	grantMs int64
	own     strandKey
}

// strandKey is who strands quota: scope, tenant, route, class (the
// operator's question is whose estimates to fix; the series have no route).
type strandKey struct {
	Scope, Tenant, Route, Class string
}

// strandBucket is one second of settled holds: the token·ms they held
// above what they used, by dimension and by how the hold ended.
type strandBucket struct {
	sec                            int64
	inMs, outMs, lateMs, expiredMs int64
	holds, lateHolds, expiredHolds int64
}

// reserveEst is a request's first reserved estimate: a gateway retry
// (RetryRequested, no ReserveRequested) keeps it, as the ledger does.
type reserveEst struct {
	in, out, atMs int64
}

// tomb is a settlement seen before its grant (the topics are read
// independently): what it used and when it ended, so the late grant can
// still be charged its stranded quota.
type tomb struct {
	atMs, endMs     int64
	usedIn, usedOut int64
	kind            string
}

type obsKey struct {
	scope, deployment string
	dim               schemas.Dimension
}

type observed struct {
	ObservedRow
	tenant string
	hist   []obsPoint // ascending sec, last observation per second, within the window
}

type obsPoint struct {
	sec, remaining int64
}

type ring struct {
	buf  []DecisionRow
	next int
	n    int
}

func (r *ring) push(d DecisionRow) {
	if r.buf == nil {
		r.buf = make([]DecisionRow, RecentDecisions)
	}
	r.buf[r.next] = d
	r.next = (r.next + 1) % len(r.buf)
	if r.n < len(r.buf) {
		r.n++
	}
}

// newestFirst returns the ring's contents, newest first.
func (r *ring) newestFirst() []DecisionRow {
	out := make([]DecisionRow, 0, r.n)
	for i := 1; i <= r.n; i++ {
		out = append(out, r.buf[(r.next-i+len(r.buf))%len(r.buf)])
	}
	return out
}

// Projection is the view's in-memory state: rolling per-series counters
// over the window, the in-flight set, the last provider observations and
// the recent decisions. It is safe for concurrent use. The clock is
// injectable so that tests can move time without sleeping.
type Projection struct {
	mu       sync.Mutex
	now      func() time.Time
	window   int64 // seconds
	series   map[SeriesKey]*series
	flights  map[string]flight
	waits    map[string]flight // queued, not yet granted, denied, expired or cancelled
	tombs    map[string]tomb
	observed map[obsKey]observed
	// learned holds the newest CapacityLearned per provider bucket.
	learned map[learnedKey]LearnedRow
	// stranded: per owner, rolling per-second buckets of settled holds'
	// unused token·ms; ests: the requests' reserved estimates.
	stranded map[strandKey][]strandBucket
	ests     map[string]reserveEst
	recent   ring
	byTenant map[string]*ring
	// budgetDefs are the budgets of the newest ConfigChanged, leases the
	// lease counters per (budget, holder scope) (budgets.go).
	budgetDefs map[string]budgetDef
	leases     map[[2]string]*leaseState

	events, invalid, dropped int64
	lastEventMs              int64
	lastPruneSec             int64
}

// NewProjection returns an empty projection over a rolling window (0 means
// 60 s) reading time from now (nil means time.Now).
func NewProjection(window time.Duration, now func() time.Time) *Projection {
	if window <= 0 {
		window = 60 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	w := int64(window / time.Second)
	if w < 1 {
		w = 1
	}
	return &Projection{
		now: now, window: w,
		series:   map[SeriesKey]*series{},
		flights:  map[string]flight{},
		waits:    map[string]flight{},
		tombs:    map[string]tomb{},
		stranded: map[strandKey][]strandBucket{},
		ests:     map[string]reserveEst{},
		observed: map[obsKey]observed{},
		learned:  map[learnedKey]LearnedRow{},
		byTenant: map[string]*ring{},
		leases:   map[[2]string]*leaseState{},
	}
}

// ApplyRecord decodes one Kafka record value and applies it; undecodable
// records are counted and skipped.
func (p *Projection) ApplyRecord(b []byte) {
	var ev schemas.Event
	err := schemas.Decode(b, &ev)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.invalid++
		return
	}
	p.apply(&ev, p.now())
}

// Apply applies events in order at the projection clock's current time.
func (p *Projection) Apply(evs ...*schemas.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for _, ev := range evs {
		p.apply(ev, now)
	}
}

// CountInvalid records n undecodable records.
func (p *Projection) CountInvalid(n int) {
	p.mu.Lock()
	p.invalid += int64(n)
	p.mu.Unlock()
}

func flightKey(ev *schemas.Event) string {
	a := ev.Attempt
	if a <= 0 {
		a = 1
	}
	return ev.RequestID + "\x00" + itoa(int64(a))
}

func itoa(n int64) string {
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// apply folds one event into the view at now. Every five seconds of the
// projection's clock it first prunes what fell out of the window, so that memory follows
// the window and not the log. Each event type that does more than count
// has a step of its own below.
func (p *Projection) apply(ev *schemas.Event, now time.Time) {
	nowMs := now.UnixMilli()
	sec := now.Unix()
	p.events++
	p.lastEventMs = nowMs
	if sec-p.lastPruneSec >= 5 {
		p.prune(now)
	}
	switch ev.Type {
	case schemas.TypeConfigChanged, schemas.TypeLeaseRequested, schemas.TypeLeaseGranted, schemas.TypeLeaseReturned:
		p.budgetEvent(ev)
	case schemas.TypeReserveRequested:
		p.reserveRequested(ev, sec, nowMs)
	case schemas.TypeDecision:
		p.decision(ev, now)
	case schemas.TypeDispatched:
		p.add(ev, sec, cDispatched, 1)
	case schemas.TypeRetryRequested:
		p.retryRequested(ev, sec, nowMs)
	case schemas.TypeReconciled:
		p.reconciled(ev, sec, nowMs)
	case schemas.TypeReleased:
		p.released(ev, sec, nowMs)
	case schemas.TypeProviderRejected:
		p.add(ev, sec, providerRejectedCounter(ev.ProviderRejected), 1)
		p.settleAs(ev, nowMs, endMs(ev, nowMs), 0, 0, "provider_rejected")
	case schemas.TypeCapacityLearned:
		p.capacityLearned(ev)
	case schemas.TypeProviderObserved:
		p.providerObserved(ev, sec, nowMs)
	case schemas.TypeOutcome:
		p.add(ev, sec, outcomeCounter(ev.Outcome), 1)
	}
}

// reserveRequested counts the request and keeps its reserved estimate: the
// stranded figures compare it with what the settled hold used. The first
// estimate of a request id wins, and the map is bounded like the
// in-flight set.
func (p *Projection) reserveRequested(ev *schemas.Event, sec, nowMs int64) {
	p.add(ev, sec, cReceived, 1)
	if r := ev.ReserveRequested; r != nil {
		if _, seen := p.ests[ev.RequestID]; !seen && len(p.ests) < maxFlight {
			p.ests[ev.RequestID] = reserveEst{in: r.InputTokens, out: r.OutputTokens, atMs: nowMs}
		}
	}
}

// retryRequested counts the retry and settles the previous attempt's hold
// if the view still has it: the ledger releases a grant the previous
// attempt still holds (ledger/feedback.go retry), and no other event says
// so.
func (p *Projection) retryRequested(ev *schemas.Event, sec, nowMs int64) {
	p.add(ev, sec, cRetries, 1)
	if r := ev.RetryRequested; r != nil {
		prev := *ev
		prev.Attempt = r.PreviousAttempt
		if _, held := p.flights[flightKey(&prev)]; held {
			p.settleAs(&prev, nowMs, endMs(ev, nowMs), 0, 0, "retried")
		}
	}
}

// reconciled counts the reconciliation, adds estimate and actual tokens to
// the accuracy counters, and settles the hold. Usage counted from an
// interrupted stream (Partial) and a dimension that was not estimated stay
// out of the accuracy counters, which would otherwise read as
// misestimates.
func (p *Projection) reconciled(ev *schemas.Event, sec, nowMs int64) {
	s := p.add(ev, sec, cReconciled, 1)
	if r := ev.Reconciled; r != nil && s != nil && !r.Partial {
		v := &s.buckets[len(s.buckets)-1].v
		if r.EstimatedInputTokens > 0 {
			v[cEstIn] += r.EstimatedInputTokens
			v[cActIn] += r.InputTokens
		}
		if r.EstimatedOutputTokens > 0 {
			v[cEstOut] += r.EstimatedOutputTokens
			v[cActOut] += r.OutputTokens
		}
	}
	var in, out int64
	if r := ev.Reconciled; r != nil {
		in, out = r.InputTokens, r.OutputTokens
	}
	p.settleAs(ev, nowMs, endMs(ev, nowMs), in, out, "reconciled")
}

// released counts the release and settles the hold; a grant the gateway
// did not dispatch because it arrived too late after the ledger's log time
// (schemas.ReasonLateGrant) is settled as late_grant, so that the stranded
// figures tell it apart from an ordinary release.
func (p *Projection) released(ev *schemas.Event, sec, nowMs int64) {
	p.add(ev, sec, cReleased, 1)
	kind, in, out := "released", int64(0), int64(0)
	if r := ev.Released; r != nil {
		in, out = r.InputTokens, r.OutputTokens
		if r.Reason == schemas.ReasonLateGrant {
			kind = "late_grant"
		}
	}
	p.settleAs(ev, nowMs, endMs(ev, nowMs), in, out, kind)
}

// providerRejectedCounter picks the counter of a provider rejection: 429
// and 503 have their own, as they are the two a quota governor is about.
func providerRejectedCounter(r *schemas.ProviderRejected) int {
	if r != nil {
		switch r.HTTPStatus {
		case 429:
			return cProv429
		case 503:
			return cProv503
		}
	}
	return cProvOther
}

// capacityLearned keeps the newest learned capacity per provider bucket;
// older ones are of no use to the view.
func (p *Projection) capacityLearned(ev *schemas.Event) {
	if c := ev.CapacityLearned; c != nil {
		// Each sub-scope of a split scope learns, and enforces, its own:
		// one row each, under the scope's name.
		r := LearnedRow{Scope: ev.Scope, Level: c.Level, ID: c.ID,
			Dimension: string(c.Dimension), PeriodMs: c.PeriodMs, Configured: c.ConfiguredCapacity, Learned: c.LearnedCapacity,
			Reported: c.ReportedLimit, Source: c.Source, LogTimeMs: c.LogTimeMs}
		if scope, split := viewScope(ev.Scope); split {
			r.Scope, r.SubScope = scope, ev.Scope
			if r.Level == ledger.LevelScope {
				r.ID = scope
			}
		}
		p.learned[learnedKey{ev.Scope, c.Level, c.ID, c.Dimension}] = r
	}
}

// providerObserved keeps the newest observation per deployment and
// dimension and a per-second history of what remained over the window (the
// last observation of a second wins), for the timeline's remaining lines.
func (p *Projection) providerObserved(ev *schemas.Event, sec, nowMs int64) {
	o := ev.ProviderObserved
	if o == nil {
		return
	}
	// The provider reports the deployment's quota, whichever sub-scope of
	// a split scope sent the request: the newest report stands for the
	// scope, and names the sub-scope it came through.
	scope, split := viewScope(ev.Scope)
	sub := ""
	if split {
		sub = ev.Scope
	}
	for _, ob := range o.Observations {
		k := obsKey{scope, o.Deployment, ob.Dimension}
		prev := p.observed[k]
		h := prev.hist
		if n := len(h); n > 0 && h[n-1].sec == sec {
			h[n-1].remaining = ob.Remaining
		} else {
			h = append(trimHist(h, sec-p.window), obsPoint{sec: sec, remaining: ob.Remaining})
		}
		p.observed[k] = observed{tenant: ev.Tenant, hist: h, ObservedRow: ObservedRow{
			Scope: scope, SubScope: sub, Deployment: o.Deployment, Dimension: string(ob.Dimension),
			Limit: ob.Limit, Remaining: ob.Remaining, ResetMs: ob.ResetMs, ObservedAtMs: nowMs,
		}}
	}
}

// outcomeCounter picks the counter of a request's outcome; a status the
// view does not know is counted as other rather than dropped.
func outcomeCounter(o *schemas.Outcome) int {
	if o != nil {
		switch o.Status {
		case "success":
			return cOutSuccess
		case "cancelled":
			return cOutCancelled
		case "timeout":
			return cOutTimeout
		case "failure":
			return cOutFailure
		}
	}
	return cOutOther
}

// decision counts a ledger decision by status, moves the request between
// the waits and the holds, and keeps its row for the recent decisions. Any
// status but queued ends a wait.
func (p *Projection) decision(ev *schemas.Event, now time.Time) {
	d := ev.Decision
	if d == nil {
		return
	}
	sec, nowMs := now.Unix(), now.UnixMilli()
	if d.Status != schemas.StatusQueued {
		p.unwait(ev, sec)
	}
	switch d.Status {
	case schemas.StatusGranted:
		p.granted(ev, d, sec, nowMs)
	case schemas.StatusQueued:
		p.queued(ev, sec, nowMs)
	case schemas.StatusDenied:
		if s := p.add(ev, sec, cDenied, 1); s != nil {
			i, ok := dimSlot[d.LimitDimension]
			if !ok {
				i = otherSlot
			}
			s.buckets[len(s.buckets)-1].v[cDeniedDim+i]++
		}
	case schemas.StatusExpired, schemas.StatusHoldExpired:
		p.add(ev, sec, cExpired, 1)
		if _, held := p.flights[flightKey(ev)]; held {
			// a grant abandoned and expired by the ledger
			end := d.LogTimeMs
			if end <= 0 {
				end = nowMs
			}
			p.settleAs(ev, nowMs, end, 0, 0, "hold_expired")
		}
	case schemas.StatusCancelled:
		p.add(ev, sec, cCancelled, 1)
	}
	p.remember(ev.Tenant, decisionRow(ev, d, nowMs))
}

// granted counts a grant and opens its hold, from the ledger's log time
// that charged the bucket. Its settlement may have been seen first (the
// topics are read independently): the tomb it left settles the hold at
// once, so the late grant is still charged its stranded quota.
func (p *Projection) granted(ev *schemas.Event, d *schemas.Decision, sec, nowMs int64) {
	s := p.add(ev, sec, cGranted, 1)
	if s == nil {
		return
	}
	k := flightKey(ev)
	grantMs := d.LogTimeMs
	if grantMs <= 0 {
		grantMs = nowMs
	}
	scope, _ := viewScope(ev.Scope)
	own := strandKey{Scope: scope, Tenant: ev.Tenant, Route: ev.Route, Class: ev.Class}
	if t, settled := p.tombs[k]; settled {
		delete(p.tombs, k)
		p.strand(ev.RequestID, own, grantMs, t.endMs, t.usedIn, t.usedOut, t.kind, sec)
	} else if _, dup := p.flights[k]; !dup && len(p.flights) < maxFlight {
		p.flights[k] = flight{s: s, atMs: nowMs, grantMs: grantMs, own: own}
		s.inFlight++
	}
}

// queued counts a queued request and adds it to the waits (once, and
// bounded), recording the queue's depth at the end of this second.
func (p *Projection) queued(ev *schemas.Event, sec, nowMs int64) {
	s := p.add(ev, sec, cQueued, 1)
	if s == nil {
		return
	}
	k := flightKey(ev)
	if _, dup := p.waits[k]; !dup && len(p.waits) < maxWaits {
		p.waits[k] = flight{s: s, atMs: nowMs}
		s.queued++
		p.newest(s, sec).depthEnd = s.queued
	}
}

// decisionRow is the recent-decisions row of a decision, with the words
// that explain its codes to a reader of the view.
func decisionRow(ev *schemas.Event, d *schemas.Decision, nowMs int64) DecisionRow {
	row := DecisionRow{
		AtMs: nowMs, LogTimeMs: d.LogTimeMs, RequestID: ev.RequestID, Attempt: ev.Attempt,
		Tenant: ev.Tenant, KeyID: ev.KeyID, Route: ev.Route, Class: ev.Class,
		Status: string(d.Status), Reason: string(d.Reason), LimitPath: d.LimitPath,
		LimitDimension: string(d.LimitDimension), Needed: d.Needed, Available: d.Available,
		RetryAfterMs: d.RetryAfterMs, GatewayDecision: string(d.GatewayDecision),
		RetryClass: string(d.RetryClass), Borrowed: d.Borrowed, Shadow: d.Shadow,
		StatusWords: d.Status.Words(), GatewayDecisionWords: d.GatewayDecision.Words(),
	}
	if scope, split := viewScope(ev.Scope); split {
		row.Scope, row.SubScope = scope, ev.Scope
	} else {
		row.Scope = ev.Scope
	}
	if d.Reason != "" {
		row.ReasonWords = d.Reason.Words()
	}
	if d.LimitDimension != "" {
		row.LimitDimensionWords = d.LimitDimension.Words()
	}
	if d.RetryClass != "" {
		row.RetryClassWords = d.RetryClass.Words()
	}
	return row
}

// remember keeps the row among the recent decisions and the tenant's own;
// beyond maxTenantRings tenants a new tenant gets no ring of its own, so
// that the memory of the view stays bounded.
func (p *Projection) remember(tenant string, row DecisionRow) {
	p.recent.push(row)
	r := p.byTenant[tenant]
	if r == nil {
		if len(p.byTenant) >= maxTenantRings {
			return
		}
		r = &ring{}
		p.byTenant[tenant] = r
	}
	r.push(row)
}

// unwait ends a queued attempt's wait (it was granted, denied, expired or
// cancelled). A wait that began before the view started is not known and
// changes nothing.
func (p *Projection) unwait(ev *schemas.Event, sec int64) {
	k := flightKey(ev)
	w, ok := p.waits[k]
	if !ok {
		return
	}
	delete(p.waits, k)
	b := p.newest(w.s, sec)
	w.s.queued--
	b.depthEnd = w.s.queued
}

// settleAs ends an attempt's in-flight hold (reconciled, released,
// rejected by the provider, retried, or expired) at endMs, having used in
// and out tokens, and charges the owner what it held above that. A
// settlement seen before its grant leaves a tombstone so the late grant
// is not counted as in flight (and is charged when it arrives).
func (p *Projection) settleAs(ev *schemas.Event, nowMs, endMs, in, out int64, kind string) {
	k := flightKey(ev)
	if f, ok := p.flights[k]; ok {
		f.s.inFlight--
		delete(p.flights, k)
		p.strand(ev.RequestID, f.own, f.grantMs, endMs, in, out, kind, nowMs/1000)
		return
	}
	if len(p.tombs) < maxTombs {
		p.tombs[k] = tomb{atMs: nowMs, endMs: endMs, usedIn: in, usedOut: out, kind: kind}
	}
}

// endMs is when a settlement event happened: the time its producer
// stamped (the gateway's clock), the view's clock if none.
func endMs(ev *schemas.Event, nowMs int64) int64 {
	if ev.ProducedAtMs > 0 {
		return ev.ProducedAtMs
	}
	return nowMs
}

// strand charges a settled hold: max(0, estimate − used) × (end − grant)
// per dimension, in the owner's bucket of second sec. The estimate is the
// request's reserved one; a hold whose ReserveRequested the view never saw
// (it began before the view started) strands nothing here.
func (p *Projection) strand(reqID string, own strandKey, grantMs, endMs, usedIn, usedOut int64, kind string, sec int64) {
	est, ok := p.ests[reqID]
	if !ok {
		return
	}
	held := max(endMs-grantMs, 0) // two clocks (ledger, gateway): never negative
	in, out := max(est.in-usedIn, 0)*held, max(est.out-usedOut, 0)*held
	bs := p.stranded[own]
	if bs == nil && len(p.stranded) >= MaxSeries {
		p.dropped++
		return
	}
	if n := len(bs); n == 0 || sec > bs[n-1].sec {
		bs = append(trimStrand(bs, sec-p.window), strandBucket{sec: sec})
	}
	b := &bs[len(bs)-1]
	b.inMs += in
	b.outMs += out
	b.holds++
	switch kind {
	case "late_grant":
		b.lateMs += in + out
		b.lateHolds++
	case "hold_expired":
		b.expiredMs += in + out
		b.expiredHolds++
	}
	p.stranded[own] = bs
}

// trimStrand drops the buckets at or before second cut.
func trimStrand(bs []strandBucket, cut int64) []strandBucket {
	i := 0
	for i < len(bs) && bs[i].sec <= cut {
		i++
	}
	if i == 0 {
		return bs
	}
	return append(bs[:0], bs[i:]...)
}

// add bumps counter c of ev's series in the bucket of second sec and
// returns the series (nil if the series cap dropped it).
func (p *Projection) add(ev *schemas.Event, sec int64, c int, n int64) *series {
	scope, split := viewScope(ev.Scope)
	k := SeriesKey{Scope: scope, Tenant: ev.Tenant, KeyID: ev.KeyID, Class: ev.Class}
	s := p.series[k]
	defer func() {
		if s != nil && split {
			if i, found := slices.BinarySearch(s.subs, ev.Scope); !found {
				s.subs = slices.Insert(s.subs, i, ev.Scope)
			}
		}
	}()
	if s == nil {
		if len(p.series) >= MaxSeries && p.lastPruneSec != sec {
			p.prune(time.Unix(sec, 0))
		}
		if len(p.series) >= MaxSeries {
			p.dropped++
			return nil
		}
		s = &series{key: k}
		p.series[k] = s
	}
	p.newest(s, sec).v[c] += n
	return s
}

// newest returns s's bucket of second sec, opening it if needed; a clock
// that stepped back gets the newest bucket.
func (p *Projection) newest(s *series, sec int64) *bucket {
	if nb := len(s.buckets); nb == 0 || sec > s.buckets[nb-1].sec {
		s.buckets = append(s.buckets, bucket{sec: sec, depthStart: s.queued, depthEnd: s.queued})
		// Drop buckets that left the window (keeps the slice short).
		cut := 0
		for cut < len(s.buckets) && s.buckets[cut].sec <= sec-p.window {
			cut++
		}
		if cut > 0 {
			s.buckets = append(s.buckets[:0], s.buckets[cut:]...)
		}
	}
	return &s.buckets[len(s.buckets)-1]
}

// prune forgets what left the window: empty series, stale holds, old
// tombstones and observations.
func (p *Projection) prune(now time.Time) {
	sec, nowMs := now.Unix(), now.UnixMilli()
	p.lastPruneSec = sec
	for k, f := range p.flights {
		if nowMs-f.atMs > flightTTL.Milliseconds() {
			f.s.inFlight--
			delete(p.flights, k)
		}
	}
	for k, w := range p.waits {
		if nowMs-w.atMs > waitTTL.Milliseconds() {
			w.s.queued--
			delete(p.waits, k)
		}
	}
	for k, s := range p.series {
		cut := 0
		for cut < len(s.buckets) && s.buckets[cut].sec <= sec-p.window {
			cut++
		}
		if cut > 0 {
			s.buckets = append(s.buckets[:0], s.buckets[cut:]...)
		}
		if len(s.buckets) == 0 && s.inFlight == 0 && s.queued == 0 {
			delete(p.series, k)
		}
	}
	for k, t := range p.tombs {
		if nowMs-t.atMs > tombTTL.Milliseconds() {
			delete(p.tombs, k)
		}
	}
	for k, e := range p.ests {
		if nowMs-e.atMs > flightTTL.Milliseconds() {
			delete(p.ests, k)
		}
	}
	for k, bs := range p.stranded {
		if bs = trimStrand(bs, sec-p.window); len(bs) == 0 {
			delete(p.stranded, k)
		} else {
			p.stranded[k] = bs
		}
	}
	for k, o := range p.observed {
		if nowMs-o.ObservedAtMs > observedTTL.Milliseconds() {
			delete(p.observed, k)
			continue
		}
		o.hist = trimHist(o.hist, sec-p.window)
		p.observed[k] = o
	}
}

// ---- snapshot (the JSON contract; see dashboards/README.md) ----

// Counters are one series' (or an aggregate's) counts over the window.
type Counters struct {
	Received          int64            `json:"received"`
	Granted           int64            `json:"granted"`
	Queued            int64            `json:"queued"`
	Denied            int64            `json:"denied"`
	DeniedByDimension map[string]int64 `json:"denied_by_dimension"`
	Expired           int64            `json:"expired"`
	Cancelled         int64            `json:"cancelled"`
	Dispatched        int64            `json:"dispatched"`
	Retries           int64            `json:"retries"`
	Provider429       int64            `json:"provider_429"`
	Provider503       int64            `json:"provider_503"`
	ProviderOther     int64            `json:"provider_rejected_other"`
	Reconciled        int64            `json:"reconciled"`
	Released          int64            `json:"released"`
	EstInputTokens    int64            `json:"estimated_input_tokens"`
	ActInputTokens    int64            `json:"actual_input_tokens"`
	EstOutputTokens   int64            `json:"estimated_output_tokens"`
	ActOutputTokens   int64            `json:"actual_output_tokens"`
	// Estimation errors are (estimate − actual) ÷ actual over the window's
	// reconciled attempts that carried an estimate; null when undefined.
	InputEstimationError  *float64         `json:"input_estimation_error"`
	OutputEstimationError *float64         `json:"output_estimation_error"`
	Outcomes              map[string]int64 `json:"outcomes"`
	// InFlight is granted − reconciled − released − rejected − expired:
	// attempts holding quota now (a gauge, not windowed).
	InFlight int64 `json:"in_flight"`
	// QueueDepth is the number of requests waiting in a queue now: queued
	// and not yet granted, denied, expired or cancelled (a gauge). Waits
	// that began before the view started are not counted.
	QueueDepth int64 `json:"queue_depth"`
}

// SeriesRow is one (scope, tenant, key, class) series. A scope split
// over partitions (ledger/split.go) is one series under its provider
// scope's name, summing the sub-scopes it lists.
type SeriesRow struct {
	Scope     string   `json:"scope"`
	SubScopes []string `json:"sub_scopes,omitempty"`
	Tenant    string   `json:"tenant"`
	KeyID     string   `json:"key_id"`
	Class     string   `json:"class"`
	Counters
}

// TenantRow aggregates a tenant's series.
type TenantRow struct {
	Tenant string `json:"tenant"`
	Counters
}

// ObservedRow is the last remaining level a provider reported for one
// dimension of a scope/deployment.
type ObservedRow struct {
	Scope string `json:"scope"`
	// SubScope is the sub-scope of a split scope whose request brought
	// the report (empty: the scope is not split).
	SubScope     string `json:"sub_scope,omitempty"`
	Deployment   string `json:"deployment"`
	Dimension    string `json:"dimension"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetMs      int64  `json:"reset_ms"`
	ObservedAtMs int64  `json:"observed_at_ms"`
}

// learnedKey names one provider bucket.
type learnedKey struct {
	scope, level, id string
	dim              schemas.Dimension
}

// LearnedRow is a provider bucket's capacity as the ledger last learned
// it (schemas.CapacityLearned): configured against learned.
type LearnedRow struct {
	Scope string `json:"scope"`
	// SubScope is the sub-scope of a split scope that learned it (each
	// learns and enforces its own; empty: the scope is not split).
	SubScope   string `json:"sub_scope,omitempty"`
	Level      string `json:"level"`
	ID         string `json:"id"`
	Dimension  string `json:"dimension"`
	PeriodMs   int64  `json:"period_ms"`
	Configured int64  `json:"configured_capacity"`
	Learned    int64  `json:"learned_capacity"`
	Reported   int64  `json:"reported_limit,omitempty"`
	Source     string `json:"source"`
	LogTimeMs  int64  `json:"log_time_ms"`
}

// DecisionRow is one ledger decision with its explanation.
type DecisionRow struct {
	AtMs            int64  `json:"at_ms"` // when the view saw it
	LogTimeMs       int64  `json:"log_time_ms"`
	RequestID       string `json:"request_id"`
	Attempt         int32  `json:"attempt"`
	Scope           string `json:"scope"`
	SubScope        string `json:"sub_scope,omitempty"` // the sub-scope that decided, for a split scope
	Tenant          string `json:"tenant"`
	KeyID           string `json:"key_id"`
	Route           string `json:"route"`
	Class           string `json:"class"`
	Status          string `json:"status"`
	Reason          string `json:"reason,omitempty"`
	LimitPath       string `json:"limit_path,omitempty"`
	LimitDimension  string `json:"limit_dimension,omitempty"`
	Needed          int64  `json:"needed,omitempty"`
	Available       int64  `json:"available,omitempty"`
	RetryAfterMs    int64  `json:"retry_after_ms,omitempty"`
	GatewayDecision string `json:"gateway_decision"`
	RetryClass      string `json:"retry_class,omitempty"`
	Borrowed        bool   `json:"borrowed,omitempty"`

	// The codes above in plain words (schemas/words.go), for people.
	StatusWords          string `json:"status_words"`
	ReasonWords          string `json:"reason_words,omitempty"`
	LimitDimensionWords  string `json:"limit_dimension_words,omitempty"`
	GatewayDecisionWords string `json:"gateway_decision_words"`
	RetryClassWords      string `json:"retry_class_words,omitempty"`
	// Shadow is a grant's shadow verdict (shadow limits on its own path:
	// would they have limited it?), so a new limit can be watched before
	// it is enforced.
	Shadow *schemas.ShadowVerdict `json:"shadow,omitempty"`
}

// Timeline is the window drawn over time, one point per second: point i
// is the second StartS+i, the last point is the current (partial) second.
type Timeline struct {
	StartS int64 `json:"start_s"`
	Points int   `json:"points"`
	// Tenants: per tenant, busiest first; in the operator view at most
	// TimelineTenantsMax, the rest summed as OtherTenants.
	Tenants []RateLine `json:"tenants"`
	Classes []RateLine `json:"classes"` // per traffic class, by name
	// Estimation errors: (estimate − actual) ÷ actual over the reconciles
	// of the trailing 10 s at each point; null where there were none.
	InputEstimationError  []*float64 `json:"input_estimation_error"`
	OutputEstimationError []*float64 `json:"output_estimation_error"`
	// ProviderRemaining: operator view only (a scope's remaining quota
	// reflects every tenant's usage).
	ProviderRemaining []RemainingLine `json:"provider_remaining"`
}

// RateLine is one tenant's or class's counts per second, and its queue
// depth at the end of each second.
type RateLine struct {
	Name       string  `json:"name"`
	Received   []int64 `json:"received"`
	Granted    []int64 `json:"granted"`
	Denied     []int64 `json:"denied"` // denied + expired
	QueueDepth []int64 `json:"queue_depth"`
}

// RemainingLine is what a provider reported remaining for one dimension of
// a scope/deployment, per second; null before its first report in the
// window (later seconds carry the last report).
type RemainingLine struct {
	Scope      string   `json:"scope"`
	Deployment string   `json:"deployment"`
	Dimension  string   `json:"dimension"`
	Limit      int64    `json:"limit"` // the latest report's limit (0 = not reported)
	Remaining  []*int64 `json:"remaining"`
}

// StrandedRow is the quota one owner's holds settled within the window
// kept above what they used: max(0, reserved − used) × (settled − granted),
// per dimension, in token·s. late_grant (released unused because the
// grant came too late) and hold_expired (abandoned, expired by the
// ledger) are broken out of the total. Holds are charged when they
// settle, so a hold still in flight is not counted yet.
type StrandedRow struct {
	Scope             string  `json:"scope"`
	Tenant            string  `json:"tenant"`
	Route             string  `json:"route"`
	Class             string  `json:"class"`
	Holds             int64   `json:"holds"`
	TokenS            float64 `json:"stranded_token_s"`
	InputTokenS       float64 `json:"input_token_s"`
	OutputTokenS      float64 `json:"output_token_s"`
	LateGrantHolds    int64   `json:"late_grant_holds"`
	LateGrantTokenS   float64 `json:"late_grant_token_s"`
	HoldExpiredHolds  int64   `json:"hold_expired_holds"`
	HoldExpiredTokenS float64 `json:"hold_expired_token_s"`
}

// StreamStats describes the consumed stream (operator view only).
type StreamStats struct {
	Events         int64 `json:"events"`
	InvalidRecords int64 `json:"invalid_records"`
	DroppedEvents  int64 `json:"dropped_events"`
	LastEventMs    int64 `json:"last_event_ms"`
	Series         int   `json:"series"`
	InFlightHolds  int   `json:"in_flight_holds"`
}

// Snapshot is what /api/snapshot returns and /ws pushes.
type Snapshot struct {
	GeneratedAtMs int64  `json:"generated_at_ms"`
	WindowS       int64  `json:"window_s"`
	View          string `json:"view"` // "operator" or "tenant"
	Tenant        string `json:"tenant,omitempty"`

	Totals           Counters      `json:"totals"`
	Tenants          []TenantRow   `json:"tenants"`
	Series           []SeriesRow   `json:"series"`
	ProviderObserved []ObservedRow `json:"provider_observed"`
	// ProviderCapacity lists the capacities learned from the provider
	// (operator view only: scope-wide).
	ProviderCapacity []LearnedRow  `json:"provider_capacity"`
	RecentDecisions  []DecisionRow `json:"recent_decisions"`
	// Stranded: per scope, tenant, route and class, most stranded first.
	Stranded []StrandedRow `json:"stranded"`
	Timeline Timeline      `json:"timeline"`
	Stream   *StreamStats  `json:"stream,omitempty"`
	// Budgets are the budgets across providers and their leases per
	// scope (budgets.go); a tenant's view holds its tenant budgets only.
	Budgets []BudgetRow `json:"budgets"`
}

// Snapshot returns the operator view: every tenant, provider observations
// and stream statistics.
func (p *Projection) Snapshot() Snapshot { return p.snapshot("", false) }

// TenantSnapshot returns the view of one tenant: only its series and its
// decisions; no provider observations (they are scope-wide and reveal
// other tenants' usage) and no stream statistics.
func (p *Projection) TenantSnapshot(tenant string) Snapshot { return p.snapshot(tenant, true) }

// snapshot builds a view under the lock: the series of the window with
// their tenant sums and totals, the timeline and the stranded rows for
// every view; the recent decisions of the view; and, for the operator view
// only, the provider rows and the stream statistics (filter is the tenant
// view, which must not see scope-wide figures).
func (p *Projection) snapshot(tenant string, filter bool) Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	sec := now.Unix()
	snap := Snapshot{
		GeneratedAtMs: now.UnixMilli(), WindowS: p.window, View: "operator",
		Tenants: []TenantRow{}, Series: []SeriesRow{},
		ProviderObserved: []ObservedRow{}, ProviderCapacity: []LearnedRow{}, RecentDecisions: []DecisionRow{},
	}
	if filter {
		snap.View, snap.Tenant = "tenant", tenant
	}
	tl := newTimelineBuilder(sec-p.window+1, int(p.window))
	p.seriesRows(&snap, tl, tenant, filter, sec)
	snap.Timeline = tl.finish(filter)
	snap.Stranded = p.strandedRows(tenant, filter, sec)
	snap.Budgets = p.budgetRows(tenant, filter)

	if filter {
		if r := p.byTenant[tenant]; r != nil {
			snap.RecentDecisions = r.newestFirst()
		}
		return snap
	}
	snap.RecentDecisions = p.recent.newestFirst()
	p.providerRows(&snap, tl)
	snap.Stream = &StreamStats{
		Events: p.events, InvalidRecords: p.invalid, DroppedEvents: p.dropped,
		LastEventMs: p.lastEventMs, Series: len(p.series), InFlightHolds: len(p.flights),
	}
	return snap
}

// seriesSum is one tenant's (or every tenant's) counters over the window
// and its holds now.
type seriesSum struct {
	v                vec
	inFlight, queued int64
}

// add adds one series' window counters and holds.
func (t *seriesSum) add(v *vec, s *series) {
	for j := range v {
		t.v[j] += v[j]
	}
	t.inFlight += s.inFlight
	t.queued += s.queued
}

// seriesRows fills the series rows, the tenant rows and the totals of the
// view and draws each series into the timeline. A series with nothing in
// the window and no hold is left out: it is only waiting to be pruned.
// Rows are sorted, as maps give them in no order and the view must not
// jump between refreshes.
func (p *Projection) seriesRows(snap *Snapshot, tl *timelineBuilder, tenant string, filter bool, sec int64) {
	var total seriesSum
	tenants := map[string]*seriesSum{}
	for _, s := range p.series {
		if filter && s.key.Tenant != tenant {
			continue
		}
		v := p.windowSum(s, sec)
		if v == (vec{}) && s.inFlight == 0 && s.queued == 0 {
			continue
		}
		tl.add(s)
		snap.Series = append(snap.Series, SeriesRow{
			Scope: s.key.Scope, SubScopes: slices.Clone(s.subs), Tenant: s.key.Tenant, KeyID: s.key.KeyID, Class: s.key.Class,
			Counters: counters(&v, s.inFlight, s.queued),
		})
		t := tenants[s.key.Tenant]
		if t == nil {
			t = &seriesSum{}
			tenants[s.key.Tenant] = t
		}
		t.add(&v, s)
		total.add(&v, s)
	}
	sort.Slice(snap.Series, func(i, j int) bool {
		a, b := snap.Series[i], snap.Series[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		if a.KeyID != b.KeyID {
			return a.KeyID < b.KeyID
		}
		return a.Class < b.Class
	})
	for name, t := range tenants {
		snap.Tenants = append(snap.Tenants, TenantRow{Tenant: name, Counters: counters(&t.v, t.inFlight, t.queued)})
	}
	sort.Slice(snap.Tenants, func(i, j int) bool { return snap.Tenants[i].Tenant < snap.Tenants[j].Tenant })
	snap.Totals = counters(&total.v, total.inFlight, total.queued)
}

// windowSum sums a series' buckets of the window ending at sec; buckets
// not yet pruned and any ahead of the clock are left out.
func (p *Projection) windowSum(s *series, sec int64) vec {
	var v vec
	for i := range s.buckets {
		b := &s.buckets[i]
		if b.sec <= sec-p.window || b.sec > sec {
			continue
		}
		for j := range v {
			v[j] += b.v[j]
		}
	}
	return v
}

// providerRows fills the operator view's provider observations, their
// remaining lines on the timeline and the learned capacities, each sorted
// for a steady view.
func (p *Projection) providerRows(snap *Snapshot, tl *timelineBuilder) {
	for _, o := range p.observed {
		snap.ProviderObserved = append(snap.ProviderObserved, o.ObservedRow)
		snap.Timeline.ProviderRemaining = append(snap.Timeline.ProviderRemaining, tl.remaining(o))
	}
	sort.Slice(snap.Timeline.ProviderRemaining, func(i, j int) bool {
		a, b := snap.Timeline.ProviderRemaining[i], snap.Timeline.ProviderRemaining[j]
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		if a.Deployment != b.Deployment {
			return a.Deployment < b.Deployment
		}
		return a.Dimension < b.Dimension
	})
	for _, r := range p.learned {
		snap.ProviderCapacity = append(snap.ProviderCapacity, r)
	}
	sort.Slice(snap.ProviderCapacity, func(i, j int) bool {
		a, b := snap.ProviderCapacity[i], snap.ProviderCapacity[j]
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		if a.Level != b.Level {
			return a.Level < b.Level
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		if a.Dimension != b.Dimension {
			return a.Dimension < b.Dimension
		}
		return a.SubScope < b.SubScope
	})
	sort.Slice(snap.ProviderObserved, func(i, j int) bool {
		a, b := snap.ProviderObserved[i], snap.ProviderObserved[j]
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		if a.Deployment != b.Deployment {
			return a.Deployment < b.Deployment
		}
		return a.Dimension < b.Dimension
	})
}

// strandedRows sums each owner's buckets of the window (one tenant's
// owners only when filter), most stranded first.
func (p *Projection) strandedRows(tenant string, filter bool, sec int64) []StrandedRow {
	out := []StrandedRow{}
	for k, bs := range p.stranded {
		if filter && k.Tenant != tenant {
			continue
		}
		r := StrandedRow{Scope: k.Scope, Tenant: k.Tenant, Route: k.Route, Class: k.Class}
		var in, outMs, late, expired int64
		for _, b := range bs {
			if b.sec <= sec-p.window || b.sec > sec {
				continue
			}
			in, outMs, late, expired = in+b.inMs, outMs+b.outMs, late+b.lateMs, expired+b.expiredMs
			r.Holds += b.holds
			r.LateGrantHolds += b.lateHolds
			r.HoldExpiredHolds += b.expiredHolds
		}
		if r.Holds == 0 {
			continue
		}
		r.InputTokenS, r.OutputTokenS = float64(in)/1000, float64(outMs)/1000
		r.TokenS = float64(in+outMs) / 1000
		r.LateGrantTokenS, r.HoldExpiredTokenS = float64(late)/1000, float64(expired)/1000
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.TokenS != b.TokenS {
			return a.TokenS > b.TokenS
		}
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		if a.Route != b.Route {
			return a.Route < b.Route
		}
		return a.Class < b.Class
	})
	return out
}

// viewScope is the scope the view shows an event of ledger scope scope
// under: the provider scope of a split scope's sub-scope "<scope>#<i>"
// (split true), as the gateways' partitioner reads the name
// (ledger.SplitOf), or scope itself.
func viewScope(scope string) (shown string, split bool) {
	if !strings.Contains(scope, ledger.SplitSep) {
		return scope, false
	}
	base, _, ok := ledger.SplitOf(scope)
	return base, ok
}

func counters(v *vec, inFlight, queued int64) Counters {
	c := Counters{
		Received: v[cReceived], Granted: v[cGranted], Queued: v[cQueued], Denied: v[cDenied],
		Expired: v[cExpired], Cancelled: v[cCancelled], Dispatched: v[cDispatched], Retries: v[cRetries],
		Provider429: v[cProv429], Provider503: v[cProv503], ProviderOther: v[cProvOther],
		Reconciled: v[cReconciled], Released: v[cReleased],
		EstInputTokens: v[cEstIn], ActInputTokens: v[cActIn],
		EstOutputTokens: v[cEstOut], ActOutputTokens: v[cActOut],
		InputEstimationError:  ratio(v[cEstIn], v[cActIn]),
		OutputEstimationError: ratio(v[cEstOut], v[cActOut]),
		DeniedByDimension:     map[string]int64{},
		Outcomes:              map[string]int64{},
		InFlight:              inFlight,
		QueueDepth:            queued,
	}
	for i := 0; i < deniedSlots; i++ {
		if n := v[cDeniedDim+i]; n != 0 {
			c.DeniedByDimension[slotName(i)] += n
		}
	}
	for name, i := range map[string]int{"success": cOutSuccess, "cancelled": cOutCancelled, "timeout": cOutTimeout, "failure": cOutFailure, "other": cOutOther} {
		if n := v[i]; n != 0 {
			c.Outcomes[name] = n
		}
	}
	return c
}

func ratio(est, act int64) *float64 {
	if act == 0 {
		return nil
	}
	r := float64(est-act) / float64(act)
	return &r
}
