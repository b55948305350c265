package ledger

import (
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/schemas"
)

// Explain: a pure observer that follows one request through the records a
// ledger applies and writes down, for every record that concerns it, the
// buckets on its path before and after, its decisions, its place in the
// queue and the provider feedback that moved its buckets. It only reads
// the ledger's state between Apply calls (levels are projected to the
// record's log time without refilling anything), so a ledger applying
// records through an Explainer decides exactly as one that does not.

// BucketView is one bucket on a request's path at one instant.
type BucketView struct {
	// Node is the bucket's node, e.g. "tenant:acme".
	Node      string            `json:"node"`
	Dimension schemas.Dimension `json:"dimension"`
	Refill    Refill            `json:"refill"`
	// Capacity is the enforced capacity per PeriodMs (the configured one,
	// or the one learned from the provider when Learned); Max the most the
	// bucket holds at once (the enforcement window's burst for token
	// buckets).
	Capacity int64 `json:"capacity"`
	// Learned marks a capacity learned from the provider (learn.go);
	// Configured is then the configured bound.
	Learned    bool  `json:"learned,omitempty"`
	Configured int64 `json:"configured_capacity,omitempty"`
	PeriodMs   int64 `json:"period_ms,omitempty"`
	Max        int64 `json:"max"`
	// Before and After are the units available just before and just after
	// the record (may be negative: debt).
	Before int64 `json:"before"`
	After  int64 `json:"after"`
	// Needed is what the request takes from this bucket.
	Needed int64 `json:"needed"`
	// Held is what all outstanding grants hold of the bucket, after.
	Held int64 `json:"held"`
	// Limiting marks the bucket a decision of this record named.
	Limiting bool `json:"limiting,omitempty"`
	Shadow   bool `json:"shadow,omitempty"`
}

// QueueEntry is a waiter ahead of the explained request.
type QueueEntry struct {
	RequestID string `json:"request_id"`
	Attempt   int32  `json:"attempt"`
	Tenant    string `json:"tenant"`
	KeyID     string `json:"key_id"`
	Class     string `json:"class"`
	WaitedMs  int64  `json:"waited_ms"`
}

// QueueView is the request's place in its scope's queue: Ahead lists the
// waiters before it in queue order (at most queueAheadMax; AheadTotal
// counts them all).
type QueueView struct {
	Position   int          `json:"position"` // 0 = first
	Depth      int          `json:"depth"`
	AheadTotal int          `json:"ahead_total"`
	Ahead      []QueueEntry `json:"ahead,omitempty"`
	// OtherTenantsAhead counts the waiters ahead that belong to other
	// tenants (all of them, not only those listed in Ahead).
	OtherTenantsAhead int `json:"other_tenants_ahead"`
	// SlowStart is set while the scope is in slow start (learn.go,
	// slowArm): a request can wait with every bucket full because only
	// an answer frees a slot, and without this the explanation showed
	// room everywhere and no reason for the wait.
	SlowStart *SlowStartView `json:"slow_start,omitempty"`
}

// SlowStartView is a scope's slow start: Window attempts may be in
// flight, InFlight are.
type SlowStartView struct {
	Window   int64 `json:"window"`
	InFlight int64 `json:"in_flight"`
}

const queueAheadMax = 20

// ExplainStep is one record that concerned the request.
type ExplainStep struct {
	Offset    int64        `json:"offset"`
	LogTimeMs int64        `json:"log_time_ms"`
	Input     schemas.Type `json:"input"`
	// Own is true when the record is the request's own event; otherwise
	// it is feedback or another request's event that moved its buckets or
	// decided it (a grant from the queue).
	Own     bool  `json:"own"`
	Attempt int32 `json:"attempt,omitempty"`
	// Scope and Partition say where the record is: a fallback attempt is
	// a reservation in another scope, often in another partition, and an
	// explanation holds the steps of every partition the request reached.
	Scope     string             `json:"scope,omitempty"`
	Partition int32              `json:"partition"`
	Note      string             `json:"note,omitempty"`
	Decisions []schemas.Decision `json:"decisions,omitempty"`
	Buckets   []BucketView       `json:"buckets,omitempty"`
	Queue     *QueueView         `json:"queue,omitempty"`
	// Feedback is the provider feedback input (operator view only).
	Feedback *schemas.Event `json:"feedback,omitempty"`
	// Learned lists the capacity changes this record caused on the
	// request's path (learn.go): the learned limit, named as such.
	Learned []schemas.CapacityLearned `json:"learned,omitempty"`
	// OtherTenant is set when the feedback came from another tenant's
	// request (the tenant view keeps only this flag).
	OtherTenant bool                `json:"other_tenant,omitempty"`
	Other       *ExplainOtherTenant `json:"other,omitempty"`
}

// ExplainOtherTenant names the tenant of a feedback record when it is not
// the request's own (operator view only).
type ExplainOtherTenant struct {
	Tenant string `json:"tenant"`
}

// Explanation is a request's timeline.
type Explanation struct {
	RequestID string        `json:"request_id"`
	Scope     string        `json:"scope"`
	Tenant    string        `json:"tenant"`
	KeyID     string        `json:"key_id"`
	Class     string        `json:"class"`
	Partition int32         `json:"partition"`
	Steps     []ExplainStep `json:"steps"`
	// Outcome is the status of the last decision (and its reason).
	Outcome string `json:"outcome"`
	// LimitPath and LimitDimension name the bucket of the last decision
	// that named one: what refused the request, or what it queued on
	// before a grant.
	LimitPath      string            `json:"limit_path,omitempty"`
	LimitDimension schemas.Dimension `json:"limit_dimension,omitempty"`
	// Hops lists the request's attempts in order: each reservation (the
	// first, a fallback to another scope) or retry, where it was made,
	// and how the ledger decided it.
	Hops []ExplainHop `json:"hops,omitempty"`
}

// ExplainHop is one attempt of a request.
type ExplainHop struct {
	Attempt   int32        `json:"attempt"`
	Input     schemas.Type `json:"input"` // ReserveRequested or RetryRequested
	Scope     string       `json:"scope"`
	Partition int32        `json:"partition"`
	LogTimeMs int64        `json:"log_time_ms"`
	// Fallback marks a reservation in another scope than the attempt
	// before it (set when the hops of all partitions are merged).
	Fallback bool `json:"fallback,omitempty"`
	// Outcome is the attempt's last decision ("" while undecided).
	Outcome string `json:"outcome,omitempty"`
}

// Explainer follows one request id through the records applied to a
// ledger.
type Explainer struct {
	l       *Ledger
	x       Explanation
	attempt int32
	lastPos int // queue position last written down; -1 when not queued
}

// NewExplainer returns an observer of request id on l. Apply records
// through it, in order, from a point at or before the request's first
// record.
func NewExplainer(l *Ledger, requestID string) *Explainer {
	return &Explainer{l: l, x: Explanation{RequestID: requestID, Partition: l.st.Partition}, attempt: 1, lastPos: -1}
}

// Explanation returns the timeline so far.
func (e *Explainer) Explanation() *Explanation { return &e.x }

// Apply is Ledger.Apply, watching the explained request.
func (e *Explainer) Apply(logTimeMs, offset int64, ev *schemas.Event, out []Output) []Output {
	l := e.l
	if offset < l.st.Next || offset < 0 {
		return l.Apply(logTimeMs, offset, ev, out)
	}
	now := max(logTimeMs, l.st.Now)
	own := ev != nil && ev.RequestID == e.x.RequestID
	if own && e.x.Scope == "" && ev.Type == schemas.TypeReserveRequested {
		e.x.Scope, e.x.Tenant, e.x.KeyID, e.x.Class = ev.Scope, ev.Tenant, ev.KeyID, ev.Class
	}
	ri, live := l.resFind(e.x.RequestID, e.attempt)
	if live {
		st := l.st.Res[ri].State
		live = st == stQueued || st == stGranted
	}
	feedback := ev != nil && live && ev.Scope == e.x.Scope &&
		(ev.Type == schemas.TypeProviderRejected || ev.Type == schemas.TypeProviderObserved)
	var before []BucketView
	switch {
	case live:
		before = l.viewsOf(&l.st.Res[ri], now, true)
	case own && ev.Type == schemas.TypeReserveRequested && ev.ReserveRequested != nil:
		before = l.peekPath(ev, now)
	}
	start := len(out)
	out = l.Apply(logTimeMs, offset, ev, out)
	if own && (ev.Type == schemas.TypeReserveRequested || ev.Type == schemas.TypeRetryRequested) {
		e.x.Hops = append(e.x.Hops, ExplainHop{Attempt: ev.Attempt, Input: ev.Type, Scope: ev.Scope, Partition: e.x.Partition, LogTimeMs: l.st.Now})
	}
	mine := e.noteDecisions(out[start:])
	if own && ev.Type == schemas.TypeRetryRequested && ev.RetryRequested != nil {
		e.attempt = max(e.attempt, ev.RetryRequested.PreviousAttempt+1)
	}
	if own && ev.Type == schemas.TypeReserveRequested {
		e.attempt = max(e.attempt, ev.Attempt) // a fallback: a new reservation
	}
	var after []BucketView
	if ri, ok := l.resFind(e.x.RequestID, e.attempt); ok {
		after = l.viewsOf(&l.st.Res[ri], l.st.Now, false)
	}
	buckets := mergeViews(before, after)
	var queue *QueueView
	if ri, ok := l.resFind(e.x.RequestID, e.attempt); ok && l.st.Res[ri].State == stQueued {
		queue = l.queueView(ri)
	}
	// A waiter ahead that left (granted, expired) moves the request up:
	// that is worth a line too.
	queueMoved := queue != nil && queue.Position != e.lastPos
	if queue != nil {
		e.lastPos = queue.Position
	} else {
		e.lastPos = -1
	}
	var learned []schemas.CapacityLearned
	if live {
		learned = e.learnedOnPath(buckets)
	}
	if !own && len(mine) == 0 && !(feedback && moved(buckets)) && !queueMoved && len(learned) == 0 {
		return out
	}
	e.x.Steps = append(e.x.Steps, e.step(offset, ev, own, feedback, mine, buckets, queue, learned))
	return out
}

// noteDecisions records the explained request's decisions among outs (the
// outputs of one record): each attempt's outcome, the request's identity
// and outcome, and the bucket that limited it.
func (e *Explainer) noteDecisions(outs []Output) []schemas.Decision {
	var mine []schemas.Decision
	for i := range outs {
		o := &outs[i]
		if o.RequestID != e.x.RequestID {
			continue
		}
		mine = append(mine, o.Decision)
		for h := len(e.x.Hops) - 1; h >= 0; h-- {
			if e.x.Hops[h].Attempt == o.Attempt {
				e.x.Hops[h].Outcome = outcomeText(o.Decision)
				break
			}
		}
		e.attempt = max(e.attempt, o.Attempt)
		e.x.Scope, e.x.Tenant, e.x.KeyID, e.x.Class = o.Scope, o.Tenant, o.KeyID, o.Class
		e.x.Outcome = outcomeText(o.Decision)
		if o.Decision.LimitPath != "" {
			e.x.LimitPath, e.x.LimitDimension = o.Decision.LimitPath, o.Decision.LimitDimension
		}
	}
	return mine
}

// learnedOnPath is the capacity learned, in this record, on a bucket of
// the request's path.
func (e *Explainer) learnedOnPath(buckets []BucketView) []schemas.CapacityLearned {
	var learned []schemas.CapacityLearned
	for _, lo := range e.l.LearnedOutputs() {
		name := lo.Learned.Level + ":" + lo.Learned.ID
		for _, b := range buckets {
			if b.Node == name && b.Dimension == lo.Learned.Dimension {
				learned = append(learned, lo.Learned)
				break
			}
		}
	}
	return learned
}

// step is the timeline's line for one record.
func (e *Explainer) step(offset int64, ev *schemas.Event, own, feedback bool, mine []schemas.Decision, buckets []BucketView,
	queue *QueueView, learned []schemas.CapacityLearned) ExplainStep {
	l := e.l
	step := ExplainStep{Offset: offset, LogTimeMs: l.st.Now, Own: own, Attempt: e.attempt, Partition: e.x.Partition, Decisions: mine, Buckets: buckets, Queue: queue, Learned: learned}
	if ev != nil {
		step.Input, step.Scope = ev.Type, ev.Scope
		if own && ev.Attempt > 0 {
			step.Attempt = ev.Attempt
		}
	}
	for i := range mine {
		markLimiting(step.Buckets, mine[i].LimitPath, mine[i].LimitDimension)
	}
	if own && ev != nil {
		step.Note = degradedNote(ev, l.st.Now)
	}
	if feedback {
		cp := *ev
		step.Feedback = &cp
		step.Note = feedbackNote(ev)
		if ev.Tenant != e.x.Tenant {
			step.OtherTenant = true
			step.Other = &ExplainOtherTenant{Tenant: ev.Tenant}
		}
	}
	return step
}

// outcomeText is a decision's status and reason: "denied (rate_limited)".
func outcomeText(d schemas.Decision) string {
	if d.Reason != "" {
		return string(d.Status) + " (" + string(d.Reason) + ")"
	}
	return string(d.Status)
}

// ForTenant returns the explanation as its own tenant may see it: other
// tenants appear only as aggregates. Queue entries of other tenants are
// dropped (OtherTenantsAhead counts them), feedback records caused by
// another tenant's requests say only that, and nothing else of the
// explanation names anyone but the request's tenant (the buckets are
// those of the request's own path; the held amount of a shared bucket is
// an aggregate).
func (x *Explanation) ForTenant() *Explanation {
	c := *x
	c.Steps = make([]ExplainStep, len(x.Steps))
	for i, s := range x.Steps {
		s.Feedback, s.Other = nil, nil
		if s.Queue != nil {
			q := *s.Queue
			q.Ahead = nil
			for _, a := range s.Queue.Ahead {
				if a.Tenant == x.Tenant {
					q.Ahead = append(q.Ahead, a)
				}
			}
			s.Queue = &q
		}
		c.Steps[i] = s
	}
	return &c
}

// viewsOf returns the views of every bucket (enforced, then shadow) on r's
// path, projected to log time now, as Before (before=true) or After.
func (l *Ledger) viewsOf(r *res, now int64, before bool) []BucketView {
	var vs []BucketView
	for _, ni := range r.Path[:r.NPath] {
		n := &l.st.Nodes[ni]
		name := levelNames[n.Lvl] + ":" + n.ID
		for _, bs := range [2][]bucket{l.st.Buckets[n.First : n.First+n.N], l.st.Shadow[n.SFirst : n.SFirst+n.SN]} {
			for k := range bs {
				b := &bs[k]
				sp := &l.cc.specs[b.Spec]
				v := l.view(name, b, sp, now)
				v.Needed = sp.amount(r)
				if before {
					v.Before, v.After = v.After, 0
				}
				vs = append(vs, v)
			}
		}
	}
	return vs
}

func (l *Ledger) view(node string, b *bucket, sp *spec, now int64) BucketView {
	v := BucketView{
		Node: node, Dimension: dimension(sp.dim), Refill: kindName(sp.kind), Capacity: sp.capacity,
		PeriodMs: sp.period, Max: sp.holdUnits, After: l.peekAvailable(b, sp, now), Held: b.Held, Shadow: sp.shadow,
	}
	if i := int(b.Spec) - l.cc.nBase; i >= 0 && i < len(l.st.Learned) {
		v.Learned, v.Configured = true, l.st.Learned[i].Conf
	}
	return v
}

// peekPath returns the Before views of the path a ReserveRequested names,
// without creating anything: a node that does not exist yet would be
// stamped full.
func (l *Ledger) peekPath(ev *schemas.Event, now int64) []BucketView {
	si, ok := l.scopeIdx[ev.Scope]
	ci, cok := l.cc.scopeFor(ev.Scope)
	if !cok {
		return nil
	}
	levels := append([]schemas.PathLevel{{Level: LevelScope, ID: ev.Scope}}, ev.ReserveRequested.Path...)
	var seen [numLevels]bool
	var vs []BucketView
	for _, p := range levels {
		lv, known := levelCode(p.Level)
		if !known || seen[lv] || p.ID == "" {
			continue
		}
		seen[lv] = true
		name := levelNames[lv] + ":" + p.ID
		if ok {
			if ni, exists := l.nodeIdx[nodeKey{si, lv, p.ID}]; exists {
				n := &l.st.Nodes[ni]
				for _, bs := range [2][]bucket{l.st.Buckets[n.First : n.First+n.N], l.st.Shadow[n.SFirst : n.SFirst+n.SN]} {
					for k := range bs {
						v := l.view(name, &bs[k], &l.cc.specs[bs[k].Spec], now)
						v.Before, v.After = v.After, 0
						vs = append(vs, v)
					}
				}
				continue
			}
		}
		for _, s := range l.cc.scopes[ci].specsFor(lv, p.ID) {
			sp := &l.cc.specs[s]
			full := sp.holdUnits
			vs = append(vs, BucketView{Node: name, Dimension: dimension(sp.dim), Refill: kindName(sp.kind), Capacity: sp.capacity,
				PeriodMs: sp.period, Max: sp.holdUnits, Before: full, Shadow: sp.shadow})
		}
	}
	return vs
}

// mergeViews pairs Before views with After views of the same bucket; the
// After list (the reservation's resolved path) gives the order and Needed.
func mergeViews(before, after []BucketView) []BucketView {
	if len(after) == 0 {
		return before
	}
	for i := range after {
		a := &after[i]
		a.Before = a.After
		for _, b := range before {
			if b.Node == a.Node && b.Dimension == a.Dimension && b.Shadow == a.Shadow {
				a.Before = b.Before
				break
			}
		}
	}
	return after
}

// feedbackNote says in words what a provider feedback record reported,
// naming no request or tenant.
func feedbackNote(ev *schemas.Event) string {
	if pr := ev.ProviderRejected; pr != nil {
		n := "provider answered " + strconv.Itoa(int(pr.HTTPStatus)) + " " + string(pr.Kind)
		if pr.RetryAfterMs > 0 {
			n += ", retry after " + strconv.FormatInt(pr.RetryAfterMs, 10) + " ms"
		}
		return n
	}
	if po := ev.ProviderObserved; po != nil {
		parts := make([]string, 0, len(po.Observations))
		for _, o := range po.Observations {
			parts = append(parts, string(o.Dimension)+" remaining "+strconv.FormatInt(o.Remaining, 10))
		}
		return "provider headers: " + strings.Join(parts, ", ")
	}
	return ""
}

func moved(vs []BucketView) bool {
	for _, v := range vs {
		if v.Before != v.After {
			return true
		}
	}
	return false
}

func markLimiting(vs []BucketView, limitPath string, dim schemas.Dimension) {
	if limitPath == "" {
		return
	}
	last := limitPath[strings.LastIndexByte(limitPath, '/')+1:]
	for i := range vs {
		if vs[i].Node == last && vs[i].Dimension == dim && !vs[i].Shadow {
			vs[i].Limiting = true
		}
	}
}

// queueView returns reservation ri's place in its scope's queue.
func (l *Ledger) queueView(ri int32) *QueueView {
	r := &l.st.Res[ri]
	sc := &l.st.Scopes[r.Scope]
	qv := &QueueView{Depth: len(sc.Queue)}
	if sc.Slow > 0 {
		qv.SlowStart = &SlowStartView{Window: sc.Slow, InFlight: sc.Flight}
	}
	for i, q := range sc.Queue {
		if q == ri {
			qv.Position = i
			break
		}
		qv.AheadTotal++
		if l.st.Res[q].Tenant != r.Tenant {
			qv.OtherTenantsAhead++
		}
		if len(qv.Ahead) < queueAheadMax {
			w := &l.st.Res[q]
			qv.Ahead = append(qv.Ahead, QueueEntry{RequestID: w.RequestID, Attempt: w.Attempt, Tenant: w.Tenant,
				KeyID: w.KeyID, Class: w.Class, WaitedMs: l.st.Now - w.EnqMs})
		}
	}
	return qv
}

// peekAvailable is available after a refill to log time now, computed
// without changing the bucket (refill mutates; an observer must not).
func (l *Ledger) peekAvailable(b *bucket, sp *spec, now int64) int64 {
	switch sp.kind {
	case kToken:
		lv := b.Level
		if now > b.LastMs {
			lv = fill(lv, now-b.LastMs, sp.capacity, sp.burst)
		}
		return floorDiv(lv, sp.period)
	case kRamp:
		rate := l.st.Ramps[b.Ext].Rate
		lv := b.Level
		if now > b.LastMs {
			lv = fill(lv, now-b.LastMs, rate, rampBurst(rate, sp.window))
		}
		return floorDiv(lv, sp.period)
	case kFixed:
		if floorDiv(now-sp.offset, sp.period) > b.LastMs {
			return sp.capacity + min(b.Level, 0)
		}
		return b.Level
	case kRolling:
		rs := &l.st.Rolls[b.Ext]
		sum, cur, n := rs.Sum, now/sp.slotMs, int64(len(rs.Ring))
		if cur > rs.Cur {
			if cur-rs.Cur >= n {
				sum = 0
			} else {
				for s := rs.Cur + 1; s <= cur; s++ {
					sum -= rs.Ring[s%n]
				}
			}
		}
		return sp.capacity - sum
	}
	return b.Level
}

// kindName is kindCode's inverse: the refill kind a compiled bucket spec
// runs.
func kindName(k uint8) Refill {
	switch k {
	case kFixed:
		return RefillFixed
	case kRolling:
		return RefillRolling
	case kConcurrency:
		return RefillConcurrency
	case kRamp:
		return RefillRamp
	}
	return RefillToken
}
