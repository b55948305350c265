package ledger

import (
	"slices"
	"strconv"

	"github.com/sluice-dev/sluice/schemas"
)

// Capacity learned from the provider (issue 20 item 3; README "Capacity
// learned from the provider").
//
// A provider bucket (a token bucket of a rate dimension on the deployment
// node, or on the scope root when the deployment level has none) enforces
// its effective capacity min(configured, reported, aimd):
//
//   - reported: the limit the provider's rate-limit headers report
//     (ProviderObserved, Observation.Limit, per minute), scaled to the
//     bucket's period and capped at the configured capacity. A lower one
//     is adopted at once; a higher one raises it back, to the configured
//     bound at most.
//   - aimd: after a refusal that the headers do not explain (a 429 or an
//     overload with no limit header on its response, or one whose headers
//     reported room for it), the capacity is multiplied by
//     DecreasePermille/1000, at most once per IntervalMs, never below
//     FloorPermille of the configured capacity nor 1 unit; each IntervalMs
//     of log time in which an attempt through the bucket reconciles with a
//     2xx and none is refused adds IncreasePermille of the configured
//     capacity, until it reaches its bound (min(configured, reported)),
//     when the aimd term ends.
//
// Everything is a function of the partition's records, so replay derives
// the same capacities; each change produces a schemas.CapacityLearned
// (LearnedOutputs), which the ledger service writes with the decisions of
// the input that caused it, and the state is in the snapshot (Learned).
//
// Mechanism: a learned bucket points at its own copy of its configured
// spec (compiled.specs[nBase+i] for Learned[i]) whose capacity, burst and
// hold are the effective ones; every other rule (refill, fits, debt,
// explain) then reads the learned capacity without a branch of its own.
// maxUnits stays the configured one, so a learned capacity never makes a
// request inadmissible: one above the learned window waits for a full
// bucket and leaves it in debt (README, "Requests larger than the window").

// learnedCap is one learned bucket: (node, dimension) with its terms.
type learnedCap struct {
	Node  int32 `json:"n"`
	Dim   uint8 `json:"d"`
	Base  int32 `json:"b"`            // the bucket's configured spec
	Conf  int64 `json:"cf"`           // configured capacity per period
	Hdr   int64 `json:"h,omitempty"`  // reported by headers, per period, ≤ Conf; 0 none
	Aimd  int64 `json:"a,omitempty"`  // AIMD capacity per period, < its bound; 0 none
	Eff   int64 `json:"e"`            // enforced: min(Conf, Hdr, Aimd)
	DecMs int64 `json:"dm,omitempty"` // log time of the last decrease
	IncMs int64 `json:"im,omitempty"` // log time of the last AIMD change
	Grow  int64 `json:"g,omitempty"`  // additive increase earned since IncMs, in 1/1000 units
	Peak  int64 `json:"pk,omitempty"` // the capacity before the last decrease
	Boost uint8 `json:"bo,omitempty"` // doublings of the increase since it passed Peak
	Safe  int64 `json:"sf,omitempty"` // the capacity the last bare cut past the gate set; 0 none
	// Bare: the last cut was a bare refusal's (no header explained it):
	// past Peak the increase stays additive (learnSuccess).
	Bare bool `json:"br,omitempty"`
	// Slide: the capacity was learned from remaining counts without a
	// limit (learnRemaining), so the bucket also checks every trailing
	// window of its grants, Win (slide.go).
	// Good is the capacity the provider took over a stretch of at least
	// learnGoodStretchMs without an unexplained refusal that ended where
	// the overload that began the AIMD term began (goodStretch,
	// learnTimeStep); 0 none.
	Good int64 `json:"gd,omitempty"`
	// Pace is extra delivery margin per grant, in ms, of a requests
	// bucket paced at one request per window (paceBound), learned from
	// refusals with room (learnPace); PaceMs is the log time it last
	// changed. 0: none.
	Pace   int64    `json:"pc,omitempty"`
	PaceMs int64    `json:"pm,omitempty"`
	Slide  bool     `json:"sl,omitempty"`
	Win    slideWin `json:"w,omitzero"`
}

// refusalRatio is a scope's provider refusal ratio over a trailing window
// (Google SRE's client-side adaptive throttling): attempts refused (Rej)
// by the provider, and granted (Sent), in the current and the previous
// interval (Win = the current one's index). An attempt counts as sent
// when it is granted, not when it reconciles: an LLM call takes seconds
// and a 429 milliseconds, so accepts counted at reconcile lag the
// refusals, and a burst of refusals early in an overload would look like
// a provider that accepts nothing (the ratio of the issue-20 defect).
// What was sent and not refused is accepted or still outstanding
// (accepted).
type refusalRatio struct {
	Win  int64    `json:"w,omitempty"`
	Rej  [2]int64 `json:"r,omitzero"`
	Sent [2]int64 `json:"s,omitzero"`
	Room [2]int64 `json:"rm,omitzero"` // of Rej: not bare 429s (headers reported room, or an overload)
}

// roll moves the trailing window to log time now.
func (q *refusalRatio) roll(now, interval int64) {
	w := now / interval
	switch {
	case w == q.Win:
		return
	case w == q.Win+1:
		q.Rej[1], q.Sent[1], q.Room[1] = q.Rej[0], q.Sent[0], q.Room[0]
	default:
		q.Rej[1], q.Sent[1], q.Room[1] = 0, 0, 0
	}
	q.Rej[0], q.Sent[0], q.Room[0] = 0, 0, 0
	q.Win = w
}

// window returns the trailing window's attempts and refusals: attempts
// is what was sent, at least what was refused (a refusal may answer a
// grant of an interval before the window), and accepted = attempts −
// refused.
func (q *refusalRatio) window() (attempts, refused, accepted int64) {
	refused = q.Rej[0] + q.Rej[1]
	attempts = max(q.Sent[0]+q.Sent[1], refused)
	return attempts, refused, attempts - refused
}

// sentSlotMs and sentSlots shape a scope's trailing minute of grants
// (sentWindow): 12 slots of 5 s, plus the current one, which is counted
// whole, so the sum never under-counts the last minute.
const (
	sentSlotMs = 5_000
	sentSlots  = 12
)

// sentWindow is what a scope's grants charged the provider over the
// trailing minute, per learnable dimension (requests, input, output,
// total tokens), in slots of sentSlotMs: Ring[Cur % len] is the current
// slot. A grant counts what the provider counts on arrival: one request,
// its input estimate, and for output and total tokens its max_tokens
// (MaxOut) when that is larger than the output estimate. It counts every
// grant, also those the provider will refuse or never see: an over-count
// only loosens the bound learnRemaining derives, never breaks it.
//
// Ref counts the provider's refusals that the headers do not explain
// (learnRefusal) per slot, by the time they arrive: refused ÷ sent
// requests over the trailing minute is the share the bare-429 gate
// (learnRefusal) reads.
type sentWindow struct {
	Cur  int64                   `json:"c,omitempty"`
	Ring [sentSlots + 1][4]int64 `json:"r,omitzero"`
	Ref  [sentSlots + 1]int64    `json:"f,omitzero"`
}

// roll moves the window to log time now, clearing the slots it passes.
func (w *sentWindow) roll(now int64) {
	c := now / sentSlotMs
	if c <= w.Cur {
		return
	}
	for k := w.Cur + 1; k <= c && k <= w.Cur+sentSlots+1; k++ {
		w.Ring[k%(sentSlots+1)] = [4]int64{}
		w.Ref[k%(sentSlots+1)] = 0
	}
	w.Cur = c
}

// add counts grant r at log time now.
func (w *sentWindow) add(r *res, now int64) {
	w.roll(now)
	s := &w.Ring[w.Cur%(sentSlots+1)]
	out := max(r.Need[dOutput], r.MaxOut)
	s[dRequests] = min(maxAmount, s[dRequests]+1)
	s[dInput] = min(maxAmount, s[dInput]+r.Need[dInput])
	s[dOutput] = min(maxAmount, s[dOutput]+out)
	s[dTotal] = min(maxAmount, s[dTotal]+r.Need[dTotal]-r.Need[dOutput]+out)
}

// refused takes back the tokens of grant r, which the provider refused
// (at log time now), from the slot it was counted in, if still in the
// window: the ledger's own accounting holds that a refused attempt
// reached no token counter (settle, sent = false) but still counts as a
// request, so its request stays. Without this, the refusals of a first
// burst into a limit configured far too high (most of the burst) would
// inflate the bound by their tokens.
func (w *sentWindow) refused(r *res, now int64) {
	w.roll(now)
	g := r.GrantMs / sentSlotMs
	if g > w.Cur || g < w.Cur-sentSlots {
		return
	}
	s := &w.Ring[g%(sentSlots+1)]
	out := max(r.Need[dOutput], r.MaxOut)
	s[dInput] = max(0, s[dInput]-r.Need[dInput])
	s[dOutput] = max(0, s[dOutput]-out)
	s[dTotal] = max(0, s[dTotal]-(r.Need[dTotal]-r.Need[dOutput]+out))
}

// refusal counts a refusal the headers do not explain at log time now.
func (w *sentWindow) refusal(now int64) {
	w.roll(now)
	s := &w.Ref[w.Cur%(sentSlots+1)]
	*s = min(maxAmount, *s+1)
}

// refusedShare returns the refusals and the attempts (requests sent, at
// least the refusals) of the trailing minute at log time now.
func (w *sentWindow) refusedShare(now int64) (refused, attempts int64) {
	w.roll(now)
	for k := range w.Ref {
		refused = min(maxAmount, refused+w.Ref[k])
	}
	return refused, max(refused, w.sum(dRequests, now))
}

// goodStretch reports whether the window's trailing minute holds a run
// of whole slots, at least learnGoodStretchMs long, with a grant and
// without an unexplained refusal, that ends where the current overload's
// refusals begin: the slots with refusals that run back from the current
// one, which holds the refusal at log time now. Over such a stretch the
// scope was sending and the provider took it (learnedCap.Good). A clean
// slot counts only when the slot before it holds a grant or a refusal:
// the scope's first slot of sending may hold only its last moments
// (slots are of log time, not of the scope's start), and counted whole
// it made the first refusal of headerless, a second into its sending,
// look like the end of a clean 5 s whenever the start fell late in a
// slot (Good at the configured 6,000: 81 provider 429s of 1,246 in one
// run). Slots only shorten what is seen: a stretch counted is at least
// its slots long.
func (w *sentWindow) goodStretch(now int64) bool {
	w.roll(now)
	n := int64(len(w.Ref))
	lo := max(0, w.Cur-sentSlots)
	k := w.Cur
	for k >= lo && w.Ref[k%n] > 0 {
		k-- // the overload's refusals
	}
	var clean int64
	sent := false
	for ; k > lo && w.Ref[k%n] == 0; k-- {
		prev := k - 1
		if w.Ring[prev%n][dRequests] == 0 && w.Ref[prev%n] == 0 {
			break // the scope was not sending before this slot began
		}
		clean += sentSlotMs
		sent = sent || w.Ring[k%n][dRequests] > 0
	}
	return sent && clean >= learnGoodStretchMs
}

// sum is what the window counts for dimension d at log time now.
func (w *sentWindow) sum(d int, now int64) int64 {
	w.roll(now)
	var t int64
	for k := range w.Ring {
		t = min(maxAmount, t+w.Ring[k][d])
	}
	return t
}

// bound is the capacity AIMD grows back to.
//
// A reported limit is enforced at headroom/1000 of itself (a reported
// limit at or above the configured capacity leaves the configured one,
// which is already the user's own margin): the provider counts a grant
// when it arrives, and the time from the ledger's grant to the provider
// varies by a few tens of milliseconds (Kafka, the gateway, the network).
// At exactly the reported rate two grants spaced by the provider's refill
// can arrive closer than it, and a provider whose window holds about one
// request then refuses (README, "Capacity learned from the provider").
// In a requests window of at most one request the margin is kept per
// grant instead (paceBound).
func (e *learnedCap) bound(h headroom) int64 {
	switch {
	case e.Conf == 0: // headers only
		return h.of(e.Dim, e.Hdr)
	case e.Hdr > 0 && e.Hdr < e.Conf:
		return h.of(e.Dim, e.Hdr)
	}
	return e.Conf
}

// headroom is how a reported limit is enforced on one bucket: the share
// learn.headroom_permille and the bucket's period and window.
// paceMs is the extra per-grant margin of a bucket paced at one request
// per window (learnedCap.Pace).
type headroom struct{ permille, periodMs, windowMs, paceMs int64 }

// headroomOf is entry e's headroom.
func (l *Ledger) headroomOf(e *learnedCap) headroom {
	sp := l.baseSpec(e)
	return headroom{permille: l.st.Config.Learn.headroom(), periodMs: sp.period, windowMs: sp.window, paceMs: e.Pace}
}

// of is the capacity a reported limit rep of dimension d is enforced at.
func (h headroom) of(d uint8, rep int64) int64 {
	c := mulSat(rep, h.permille) / 1000
	if p := paceBound(rep, h); d == dRequests && p > 0 {
		if h.paceMs > 0 {
			c = p // the learned margin, even below the share's capacity
		} else {
			c = max(c, p)
		}
	}
	return max(1, c)
}

// paceBound is the capacity of a requests bucket whose window holds at
// most one request at the reported limit rep (rep × window ≤ period; 0
// otherwise). Such a bucket admits one request when full and paces the
// next one period/capacity later: the delivery margin is the difference
// of the two intervals, period/c − period/rep, a time per grant. The share
// of headroom keeps a margin of (1000 − permille)/1000 of the window (30 ms
// of a 1 s window at the default 970), and the same share of the longer
// interval kept more than that, and more again where the capacity
// truncates: 40 RPM over a 1 s window was enforced at 38 (1,579 ms
// between grants, 79 ms of margin per 1,500 ms), and
// noisy-neighbor-handwritten served 37 requests a minute instead of 38
// (services/loadtest/README.md, "Goodput at one request per window").
// paceBound is the largest c with period/c ≥ period/rep + margin, margin =
// (1000 − permille) × window / 1000: 39 there (1,538 ms, 38 ms). It is
// never below the share's capacity (period ≥ rep × window), and it is rep
// itself at permille 1000 — unless the bucket has learned an extra margin
// (h.paceMs, learnPace), which is added to the margin (then it may be).
func paceBound(rep int64, h headroom) int64 {
	if rep <= 0 || h.windowMs <= 0 || rep > h.periodMs/h.windowMs {
		return 0
	}
	// c = rep·period / (period + margin·rep), margin in 1/1000 ms. rep ≤
	// period/window ≤ period ≤ one day: rep·period·1000 < 7.5e18.
	num := mulSat(mulSat(rep, h.periodMs), 1000)
	den := 1000*h.periodMs + ((1000-h.permille)*h.windowMs+1000*min(h.paceMs, h.windowMs))*rep
	return max(1, num/den)
}

// learnPace widens the per-grant margin of node ni's requests bucket
// after a 429 whose headers reported room, when that bucket is paced at
// one request per window (paceBound): the provider refused a grant the
// ledger spaced by its learned interval, so it arrived closer to the
// last than that, and the delivery's jitter is larger than the margin
// (services/loadtest/README.md: 112 ms against 38). The extra margin
// doubles from the headroom's share of the window (30 ms of 1 s at 970)
// up to learnPaceMaxDiv of the window, and halves after each
// learnGoodMs without such a refusal (learnPaceDecay). Every change is a
// CapacityLearned, so replay derives the same margin.
func (l *Ledger) learnPace(ni int32) {
	if l.st.Config.Learn.Off || ni < 0 {
		return
	}
	i := l.learnedIdx(ni, dRequests)
	if i < 0 {
		return
	}
	e := &l.st.Learned[i]
	h := l.headroomOf(e)
	if e.Hdr <= 0 || paceBound(e.Hdr, h) == 0 {
		return
	}
	base := max(1, (1000-h.permille)*h.windowMs/1000)
	e.Pace = min(h.windowMs/learnPaceMaxDiv, max(base, 2*e.Pace))
	e.PaceMs = max(1, l.st.Now)
	if bi := l.learnBucket(ni, dRequests); bi >= 0 {
		l.applyLearned(i, bi, schemas.LearnedRefusal)
	}
}

// learnPaceMaxDiv bounds the extra pace margin at window/learnPaceMaxDiv
// (125 ms of a 1 s window).
const learnPaceMaxDiv = 8

// learnPaceDecay halves entry i's extra pace margin once learnGoodMs have
// passed since it last changed (called on an accept through it).
func (l *Ledger) learnPaceDecay(i int, now int64) {
	e := &l.st.Learned[i]
	if e.Pace == 0 || now-e.PaceMs < learnGoodMs {
		return
	}
	e.Pace /= 2
	if e.Pace < 2 {
		e.Pace = 0
	}
	e.PaceMs = max(1, now)
	if bi := l.learnBucket(e.Node, int(e.Dim)); bi >= 0 {
		l.applyLearned(i, bi, schemas.LearnedSuccess)
	}
}

// scale is what the AIMD floor and step are fractions of: the configured
// capacity, or the reported limit of a headers-only bucket.
func (e *learnedCap) scale() int64 {
	if e.Conf == 0 {
		return e.Hdr
	}
	return e.Conf
}

func (e *learnedCap) effective(h headroom) int64 {
	v := e.bound(h)
	if e.Aimd > 0 {
		v = min(v, e.Aimd)
	}
	return max(1, v)
}

// LearnedOutput is one CapacityLearned record produced by the last Apply.
type LearnedOutput struct {
	Scope   string
	Index   int32 // position among the learned records of its input
	Learned schemas.CapacityLearned
}

// ID returns the record's deterministic event id
// "c-<partition>-<input offset>-<index>".
func (o *LearnedOutput) ID() string {
	b := make([]byte, 0, 40)
	b = append(b, "c-"...)
	b = strconv.AppendInt(b, int64(o.Learned.InputPartition), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, o.Learned.InputOffset, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(o.Index), 10)
	return string(b)
}

// Event converts o to a wire event (ProducedAtMs is the log time, so a
// replay encodes it byte for byte).
func (o *LearnedOutput) Event() *schemas.Event {
	c := o.Learned
	return &schemas.Event{V: schemas.Version, Type: schemas.TypeCapacityLearned, ID: o.ID(),
		ProducedAtMs: c.LogTimeMs, Scope: o.Scope, CapacityLearned: &c}
}

// LearnedOutputs returns the CapacityLearned records of the last Apply, in
// order (valid until the next Apply).
func (l *Ledger) LearnedOutputs() []LearnedOutput { return l.learnedOut }

// LearnedBucket is a learned bucket's state, for the usage views.
type LearnedBucket struct {
	Scope      string            `json:"scope"`
	Level      string            `json:"level"`
	ID         string            `json:"id"`
	Dimension  schemas.Dimension `json:"dimension"`
	PeriodMs   int64             `json:"period_ms"`
	Configured int64             `json:"configured_capacity"`
	Learned    int64             `json:"learned_capacity"`
	Reported   int64             `json:"reported_limit,omitempty"`
}

// LearnedBuckets lists every learned bucket, in the order they were first
// learned.
func (l *Ledger) LearnedBuckets() []LearnedBucket {
	out := make([]LearnedBucket, 0, len(l.st.Learned))
	for i := range l.st.Learned {
		e := &l.st.Learned[i]
		n := &l.st.Nodes[e.Node]
		out = append(out, LearnedBucket{Scope: l.st.Scopes[n.Scope].Name, Level: levelNames[n.Lvl], ID: n.ID,
			Dimension: schemas.Dimensions[e.Dim], PeriodMs: l.cc.specs[l.cc.nBase+i].period, Configured: e.Conf,
			Learned: e.Eff, Reported: e.Hdr})
	}
	return out
}

// learnable reports whether a bucket's capacity may be learned: an
// enforced token bucket of a per-period rate dimension.
func learnable(sp *spec) bool {
	return !sp.shadow && sp.kind == kToken && learnableDim(int(sp.dim))
}

func learnableDim(d int) bool {
	switch d {
	case dRequests, dInput, dOutput, dTotal:
		return true
	}
	return false
}

// learnRateMin is the number of attempts in the trailing window below
// which the rate of accepts says too little to bound the capacity by.
const learnRateMin = 8

// learnBoostMax bounds the doublings of the additive increase past the
// last refusal's capacity (2^6 × 3 ‰ = 19 % per accept).
const learnBoostMax = 6

// headersPeriodMs and headersWindowMs shape a bucket the headers alone
// set: the providers' per-minute limits, paced over the config's default
// 1 s window.
const (
	headersPeriodMs = 60_000
	headersWindowMs = 1_000
)

// headersSpec is the base spec of a bucket the headers alone set, at the
// reported limit hdr per minute. It counts like a reconcile bucket (the
// headers do not say how the provider counts); a request above the
// reported limit is beyond what the provider takes (exceeds_capacity).
func headersSpec(d uint8, hdr int64) spec {
	return spec{kind: kToken, dim: d, capacity: hdr, period: headersPeriodMs, window: headersWindowMs,
		burst: hdr * headersWindowMs, maxUnits: hdr, holdUnits: hdr * headersWindowMs / headersPeriodMs}
}

// headersOnly reports whether every enforced bucket of node ni was set by
// the headers alone.
func (l *Ledger) headersOnly(ni int32) bool {
	n := &l.st.Nodes[ni]
	for bi := n.First; bi < n.First+n.N; bi++ {
		i := int(l.st.Buckets[bi].Spec) - l.cc.nBase
		if i < 0 || i >= len(l.st.Learned) || l.st.Learned[i].Base >= 0 {
			return false
		}
	}
	return true
}

// headersNode returns the node a headers-only bucket goes on: the
// deployment's, else the scope root; created (without buckets) when it
// does not exist yet, -1 at the node limit.
func (l *Ledger) headersNode(si int32, deployment string) int32 {
	lv, id := uint8(6), deployment
	if deployment == "" || len(deployment) > maxStrLen {
		lv, id = 0, l.st.Scopes[si].Name
	}
	if ni, ok := l.nodeIdx[nodeKey{si, lv, id}]; ok {
		return ni
	}
	if len(l.st.Nodes) >= l.st.Config.NodesMax {
		return noIdx
	}
	ni := int32(len(l.st.Nodes))
	l.st.Nodes = append(l.st.Nodes, node{Scope: si, Lvl: lv, ID: id, First: int32(len(l.st.Buckets))})
	l.nodeIdx[nodeKey{si, lv, id}] = ni
	l.paths = nil // paths now pass the node
	return ni
}

// addHeadersBucket adds to node ni a bucket of dimension d set by the
// headers alone (learned bucket without a configured bound), full to what
// they report remaining. It starts a new generation, so that no grant
// made before it is settled against it.
func (l *Ledger) addHeadersBucket(ni int32, d int, ob schemas.Observation) {
	rep := max(1, min(ob.Limit, maxAmount))
	n := &l.st.Nodes[ni]
	pos := n.First + n.N
	for j := range l.st.Nodes {
		if int32(j) != ni && l.st.Nodes[j].First >= pos {
			l.st.Nodes[j].First++
		}
	}
	i := len(l.st.Learned)
	l.st.Learned = append(l.st.Learned, learnedCap{Node: ni, Dim: uint8(d), Base: -1, Hdr: rep})
	base := headersSpec(uint8(d), rep)
	var sp spec
	l.cc.learnedSpec(&sp, &base, rep)
	l.cc.specs = append(l.cc.specs, sp)
	l.st.Gen++
	b := l.newBucket(int32(l.cc.nBase+i), n.Scope)
	if ob.Remaining >= 0 {
		b.Level = min(b.Level, mulSat(min(ob.Remaining, maxAmount), headersPeriodMs))
	}
	l.st.Buckets = slices.Insert(l.st.Buckets, int(pos), b)
	n.N++
	l.paths = nil
	l.applyLearned(i, pos, schemas.LearnedHeaders)
}

// learnNode is the node provider feedback about deployment applies to:
// the deployment's node if it has enforced buckets, else the scope root.
func (l *Ledger) learnNode(si int32, deployment string) int32 {
	if deployment != "" {
		if ni, ok := l.nodeIdx[nodeKey{si, 6, deployment}]; ok && l.st.Nodes[ni].N > 0 {
			return ni
		}
	}
	if ni, ok := l.nodeIdx[nodeKey{si, 0, l.st.Scopes[si].Name}]; ok {
		return ni
	}
	return noIdx
}

// learnedIdx finds the entry of (node, dim), or -1.
func (l *Ledger) learnedIdx(ni int32, d int) int {
	for i := range l.st.Learned {
		if e := &l.st.Learned[i]; e.Node == ni && int(e.Dim) == d {
			return i
		}
	}
	return -1
}

// learnBucket returns the learnable enforced bucket of dimension d on node
// ni, or -1.
func (l *Ledger) learnBucket(ni int32, d int) int32 {
	n := &l.st.Nodes[ni]
	for bi := n.First; bi < n.First+n.N; bi++ {
		if sp := &l.cc.specs[l.st.Buckets[bi].Spec]; int(sp.dim) == d && learnable(sp) {
			return bi
		}
	}
	return noIdx
}

// entry returns the entry of (ni, d), creating it (with its spec copy) for
// bucket bi when missing.
func (l *Ledger) entry(ni int32, d int, bi int32) int {
	if i := l.learnedIdx(ni, d); i >= 0 {
		return i
	}
	b := &l.st.Buckets[bi]
	sp := l.cc.specs[b.Spec]
	l.st.Learned = append(l.st.Learned, learnedCap{Node: ni, Dim: uint8(d), Base: b.Spec, Conf: sp.capacity, Eff: sp.capacity})
	l.cc.specs = append(l.cc.specs, sp)
	b.Spec = int32(len(l.cc.specs) - 1)
	return len(l.st.Learned) - 1
}

// baseSpec is the spec entry e's copy derives from: its bucket's
// configured one, or a headers-only bucket's at the reported limit.
func (l *Ledger) baseSpec(e *learnedCap) spec {
	if e.Base < 0 {
		return headersSpec(e.Dim, e.Hdr)
	}
	return l.cc.specs[e.Base]
}

// learnedSpec sets spec copy sp (of base) to effective capacity eff. It is
// the one place a learned capacity changes a spec, so it keeps
// compiled.anyPace true when the new capacity paces (onePerWindow).
func (cc *compiled) learnedSpec(sp *spec, base *spec, eff int64) {
	*sp = *base
	sp.capacity = eff
	sp.burst = eff * sp.window
	sp.holdUnits = sp.burst / sp.period
	if sp.guaranteed > eff {
		sp.guaranteed, sp.gBurst = eff, eff*sp.window
	}
	if onePerWindow(sp) {
		cc.anyPace = true
	}
}

// apply brings entry i's bucket to its (re)computed effective capacity,
// recording the change as source.
func (l *Ledger) applyLearned(i int, bi int32, source string) {
	e := &l.st.Learned[i]
	eff := e.effective(l.headroomOf(e))
	if eff == e.Eff {
		return
	}
	b := &l.st.Buckets[bi]
	sp := &l.cc.specs[b.Spec]
	l.refill(b, sp, l.st.Now) // the time so far at the old rate
	base := l.baseSpec(e)
	l.cc.learnedSpec(sp, &base, eff)
	sp.slide = e.Slide
	b.Level = min(b.Level, sp.burst)
	b.Base = min(b.Base, sp.gBurst)
	n := &l.st.Nodes[e.Node]
	l.st.Scopes[n.Scope].Dirty = true
	c := schemas.CapacityLearned{Level: levelNames[n.Lvl], ID: n.ID, Dimension: schemas.Dimensions[e.Dim],
		PeriodMs: sp.period, ConfiguredCapacity: e.Conf, PreviousCapacity: e.Eff, LearnedCapacity: eff, Source: source,
		InputPartition: l.st.Partition, InputOffset: l.offset, LogTimeMs: l.st.Now}
	if source == schemas.LearnedHeaders || source == schemas.LearnedRemaining {
		c.ReportedLimit = e.Hdr
	}
	e.Eff = eff
	l.learnedOut = append(l.learnedOut, LearnedOutput{Scope: l.st.Scopes[n.Scope].Name,
		Index: int32(len(l.learnedOut)), Learned: c})
}

// learnHeaders adopts the limits the provider's headers report: on node
// enf (the node ProviderObserved lowers) when it has a provider bucket of
// the dimension, else on a bucket the headers alone set (headers only:
// nothing configured for that dimension), on the deployment's node
// (created if need be) or, without a deployment, the scope root.
func (l *Ledger) learnHeaders(si, enf int32, deployment string, obs []schemas.Observation) {
	if l.st.Config.Learn.Off {
		return
	}
	for _, ob := range obs {
		d, ok := dimIndex(ob.Dimension)
		if !ok || !learnableDim(d) {
			continue
		}
		if ob.Limit <= 0 {
			if ob.Remaining >= 0 && enf >= 0 {
				l.learnRemaining(si, enf, d, ob.Remaining)
			}
			continue
		}
		ni, bi := enf, noIdx
		if ni >= 0 {
			bi = l.learnBucket(ni, d)
		}
		if bi < 0 {
			if ni = l.headersNode(si, deployment); ni < 0 {
				continue
			}
			if bi = l.learnBucket(ni, d); bi < 0 {
				l.addHeadersBucket(ni, d, ob)
				continue
			}
		}
		i := l.learnedIdx(ni, d)
		conf := l.cc.specs[l.st.Buckets[bi].Spec].capacity
		if i >= 0 {
			conf = l.st.Learned[i].Conf
		}
		sp := &l.cc.specs[l.st.Buckets[bi].Spec]
		// Header limits are per minute (OpenAI, Anthropic).
		rep := max(1, mulSat(min(ob.Limit, maxAmount), sp.period)/60_000)
		hdr := rep
		if conf > 0 {
			hdr = min(rep, conf)
		}
		if i < 0 && hdr == conf {
			continue // at the configured bound: nothing learned
		}
		i = l.entry(ni, d, bi)
		e := &l.st.Learned[i]
		e.Hdr = hdr
		// A limit header says what the provider enforces: no window to
		// guess (slide.go).
		if e.Slide {
			e.Slide, e.Win = false, slideWin{}
			l.cc.specs[l.st.Buckets[bi].Spec].slide = false
			l.st.Scopes[l.st.Nodes[ni].Scope].Dirty = true // its waiters may fit now
		}
		if e.Aimd >= e.bound(l.headroomOf(e)) {
			e.Aimd, e.Safe = 0, 0
		}
		l.applyLearned(i, bi, schemas.LearnedHeaders)
	}
}

// learnRemaining bounds the capacity of node ni's provider bucket of
// dimension d by a report of what remains without a limit (Azure OpenAI
// sends x-ratelimit-remaining-* only). Whatever the provider's per-minute
// counter (a bucket refilled continuously, a fixed or a sliding minute),
// its limit is at most what it reports remaining plus what arrived in
// its last minute, which is at most what the scope granted in the
// trailing minute (sentWindow): if its bucket was full at some time in
// that minute, it has lost at most the arrivals since; if it never was,
// the minute refilled a whole limit and the level did not fall below 0.
// Each such report is an upper bound, so the ledger keeps the least
// (Hdr, enforced at the headroom as a reported limit is); it is tight
// at the start of a burst into a full bucket, which is when a fallback's
// first answers come. A report of more remaining than the bound proves
// the limit has risen: the bound becomes that remaining count (a lower
// bound on the new limit), and the next reports tighten it again. Only a
// configured bucket is bounded (the configured capacity caps it);
// without a limit a headers-only bucket has nothing to set it.
//
// Each report also bounds the bucket's level (remainingLevel).
func (l *Ledger) learnRemaining(si, ni int32, d int, remaining int64) {
	bi := l.learnBucket(ni, d)
	if bi < 0 {
		return
	}
	i := l.learnedIdx(ni, d)
	sp := &l.cc.specs[l.st.Buckets[bi].Spec]
	conf := sp.capacity
	if i >= 0 {
		conf = l.st.Learned[i].Conf
	}
	if conf <= 0 {
		return
	}
	rem := min(remaining, maxAmount)
	est := min(maxAmount, rem+l.st.Scopes[si].Sent.sum(d, l.st.Now))
	// Per minute, scaled to the bucket's period (as a header limit is).
	rep := min(conf, max(1, mulSat(est, sp.period)/60_000))
	remP := min(conf, mulSat(rem, sp.period)/60_000)
	if i < 0 {
		if rep >= conf {
			return // at the configured bound: nothing learned
		}
		i = l.entry(ni, d, bi)
	}
	e := &l.st.Learned[i]
	seed := false
	if spb := &l.cc.specs[l.st.Buckets[bi].Spec]; spb.kind == kToken && !e.Slide {
		e.Slide, spb.slide, seed = true, true, true
	}
	changed := true
	switch {
	case e.Hdr == 0 || rep < e.Hdr:
		e.Hdr = rep
	case remP > e.Hdr:
		e.Hdr = remP
	default:
		changed = false
	}
	if changed {
		if e.Aimd >= e.bound(l.headroomOf(e)) {
			e.Aimd, e.Safe = 0, 0
		}
		l.applyLearned(i, bi, schemas.LearnedRemaining)
	}
	used := l.remainingLevel(bi, e.Hdr, rem)
	if seed {
		// The grants before this report were not counted in the window:
		// what the minute has lost stands for them (slide.go).
		sp := &l.cc.specs[l.st.Buckets[bi].Spec]
		l.slideCharge(ni, sp, min(used, sp.holdUnits))
	}
}

// remainingLevel lowers the level of learned bucket bi (its reported
// term hdr, per period) after a report of rem remaining per minute. A
// provider that enforces its per-minute limit L also over a shorter
// window (Azure evaluates RPM over 1 or 10 s; the simulator's window)
// charges both counters alike and refills them at the same rate from
// full, so the short window has lost what the minute has: L − rem.
// Without this the level after a lowering was what the configured, 10×
// faster refill had restored, and the grants after a fallback's first
// answer went into a window it had used (noisy-neighbor-handwritten's
// Azure fallback); and the ledger's estimate of a grant's tokens, below
// what the provider counted, let the window drift ahead of the
// provider's. hdr bounds L from above, so hdr − rem over-counts the
// loss. The level is never raised. For a provider that counts the minute
// alone, L − rem is the whole minute's deficit: a window smaller than it
// waits until the minute has refilled below it (once: pacing at the
// learned rate keeps it there), which costs at most one window.
//
// It returns what the minute has lost, in the bucket's units.
func (l *Ledger) remainingLevel(bi int32, hdr, rem int64) int64 {
	b := &l.st.Buckets[bi]
	sp := &l.cc.specs[b.Spec]
	l.refill(b, sp, l.st.Now)
	limit := mulSat(hdr, 60_000) / sp.period // per minute, as remaining
	used := min(maxAmount, max(0, limit-rem))
	b.Level = min(b.Level, clampSat(sp.burst-mulSat(used, sp.period)))
	return used
}

// learnRefusal applies the multiplicative decrease after a refusal the
// headers do not explain, to dimension d of node ni (every learnable
// dimension when !dimKnown). bare: a 429 whose response carried no
// rate-limit header at all, so nothing says the provider had room;
// otherwise its headers reported room for the attempt (fRoom), or it is an
// overload (503, 529: the provider's own state as much as our rate).
func (l *Ledger) learnRefusal(si, ni int32, d int, dimKnown, bare bool) {
	if l.st.Config.Learn.Off {
		return
	}
	lc := l.st.Config.Learn
	now := l.st.Now
	sc := &l.st.Scopes[si]
	q := &sc.Ratio
	q.roll(now, lc.interval())
	q.Rej[0]++
	sc.RefusedMs = max(1, now)
	if !bare {
		q.Room[0]++
	}
	sc.Sent.refusal(now)
	attempts, rej, acc := q.window()
	// Google SRE's rule: act when requests > K × accepts over the
	// trailing window. A provider that refuses a fixed share of whatever
	// it is sent (at most 1 − 1/K) is not short of capacity: lowering the
	// rate would not lower the share. That is what a refusal whose
	// headers reported room looks like (the counter storm), and an
	// overload may be (a 503 says the provider is busy, not that we
	// sent too much: ungated, the storm scenario's three 503s cut the
	// deployment to a third, TestModelStorm served 186 of 260). A bare
	// 429 says nothing of the kind — unless the window also holds the
	// others, when the provider is refusing for reasons of its own — and
	// is gated by the share refused over the trailing minute instead
	// (bareGate): a provider that refuses a few percent of what it is
	// sent whatever the rate (Vertex AI's shared quota) is not cut down
	// to the floor, one whose limit is far below the configured one
	// (most of a first burst refused) still is at once.
	bare = bare && q.Room[0]+q.Room[1] == 0
	// The ratio is read over a minimum sample (learnSample): a window
	// that holds only the refused attempt (one grant every 1.5 s) reads
	// 1 refused of 1, and one refusal with room cut the capacity ×0.7
	// for the ~30 s its climb back took.
	sAtt, sAcc := l.learnSample(sc, now, attempts, rej)
	if ni < 0 || (!bare && sAtt*1000 <= lc.ratioK()*sAcc) {
		return
	}
	// below: a bare 429 under the gate. It may still cut, but never
	// below Safe, the capacity the last cut past the gate set (and
	// not at all without one): once the share refused has shown that
	// the provider limits our rate, a capacity probing back above that
	// level is cut as before (any bare 429: about one in 120 calls of a
	// sustained overload), while a provider refusing a few percent at
	// random is never cut by them below what its real overload showed.
	below := false
	if bare {
		ref, sent := sc.Sent.refusedShare(now)
		below = ref*1000 < lc.bareGate()*max(sent, learnSampleMin)
	}
	c := refusalCut{now: now, attempts: attempts, acc: acc, bare: bare, below: below}
	winMs := max(lc.interval(), now-(q.Win-1)*lc.interval())
	for dd := range numDims {
		if dimKnown && dd != d {
			continue
		}
		bi := l.learnBucket(ni, dd)
		if bi < 0 {
			continue
		}
		l.cutBucket(ni, dd, bi, &c, rej, winMs)
	}
}

// cutBucket is a refusal's cut of node ni's learned bucket bi of
// dimension dd (learnRefusal): which rule applies, given the trailing
// window's refusals rej over winMs and what c already holds.
func (l *Ledger) cutBucket(ni int32, dd int, bi int32, c *refusalCut, rej, winMs int64) {
	attempts, acc, bare, below, now := c.attempts, c.acc, c.bare, c.below, c.now
	// More than 2/3 refused: the capacity is about the share
	// accepted of what was sent, far below ×0.7 when the configured
	// limit is 10–50× the real one (TCP's slow start ends the same
	// way: at what got through). An attempt counts as accepted
	// from its grant until it is refused, so the share is not
	// understated while the accepts' answers are still streaming;
	// the +1 keeps the estimate above zero.
	c.share = rej > 2*acc
	// At least half of a bare provider's attempts refused, and
	// enough of them to show a rate (learnRateMin): the provider took
	// about what it accepted, so the rate of accepts over the window
	// (per the bucket's period) bounds the capacity too. It is what
	// ends the first overload of a limit configured 10× too high in
	// one step where the share sent, at a demand below the configured
	// rate, overestimates it.
	// (Requests only: the window counts attempts, not tokens; a token
	// bucket takes the other rows.)
	c.rate = -1
	if bare && dd == dRequests && rej >= acc && attempts >= learnRateMin {
		c.rate = mulSat(acc+1, l.cc.specs[l.st.Buckets[bi].Spec].period) / winMs
	}
	// The first bare refusal of a bucket never cut, with at least
	// learnRateMin attempts in the window: to the rate accepted over
	// the window (+1, per the bucket's period), gate or not, when
	// that is below the capacity. Under the gate it cut nothing:
	// the headerless scenario's first refusal is 1 of ~20 sent, and
	// at the cooldown's end the queue was released into the
	// configured 6,000 RPM window (README, "The first bare
	// refusal").
	c.first = bare && dd == dRequests && attempts >= learnRateMin && l.neverCut(ni, dd)
	if c.first {
		sp := &l.cc.specs[l.st.Buckets[bi].Spec]
		if r := mulSat(acc+1, sp.period) / winMs; r < sp.capacity {
			c.rate = r
		} else {
			c.first = false // it took at least the capacity: the rules below
		}
	}
	switch {
	case c.first:
		l.cutFirst(ni, dd, bi, c)
	case below:
		l.cutBelowGate(ni, dd, bi, now)
	case l.cutThisInterval(ni, dd, now):
		l.cutAgain(ni, dd, bi, c)
	default:
		l.cutFirst(ni, dd, bi, c)
	}
}

// refusalCut is what a refusal's cut of one learned bucket goes by: the
// trailing window's attempts and accepts, whether most were refused
// (share), the rate of accepts of a bare provider (rate, -1 if not
// shown), and the kind of refusal.
type refusalCut struct {
	now           int64
	attempts, acc int64
	rate          int64
	share         bool
	bare, below   bool
	first         bool // the first bare refusal of a bucket never cut
}

// learnSampleMin is the least number of attempts a refusal ratio is read
// over (learnSample, and the bare gate's trailing minute).
const learnSampleMin = 20

// learnSample returns the attempts and accepts the refusal ratio reads
// at log time now, given the trailing window's attempts and refusals
// (rej): the window when it holds at least learnSampleMin attempts; else
// the scope's trailing minute (sentWindow: requests granted, refusals the
// headers do not explain), at least the window's; and when the minute
// too holds fewer than learnSampleMin, the missing attempts count as
// accepted. A scope that sends a few requests a minute then needs more
// than 2/3 of learnSampleMin refused to be cut (K = 3): one refusal
// proves nothing about a rate, and its cooldown still applies.
func (l *Ledger) learnSample(sc *scopeState, now, attempts, rej int64) (att, acc int64) {
	if attempts >= learnSampleMin {
		return attempts, attempts - rej
	}
	refM, sentM := sc.Sent.refusedShare(now)
	refM, sentM = max(refM, rej), max(sentM, attempts)
	att = max(sentM, learnSampleMin)
	return att, att - refM
}

// neverCut reports whether the learned capacity of (ni, dd) has never been
// lowered by a refusal (no entry, or no decrease recorded). A capacity
// restored to its bound keeps its DecMs, so the rule of the first bare
// refusal (learnRefusal, c.first) applies once per learned bucket.
func (l *Ledger) neverCut(ni int32, dd int) bool {
	i := l.learnedIdx(ni, dd)
	return i < 0 || l.st.Learned[i].DecMs == 0
}

// cutBelowGate is a bare 429 under the gate: it may still cut, but never
// below Safe, and at most once an interval.
func (l *Ledger) cutBelowGate(ni int32, dd int, bi int32, now int64) {
	lc := l.st.Config.Learn
	i := l.learnedIdx(ni, dd)
	if i < 0 {
		return
	}
	e := &l.st.Learned[i]
	if e.Safe == 0 || e.Aimd == 0 || e.Aimd <= e.Safe || (e.DecMs > 0 && now-e.DecMs < lc.interval()) {
		return
	}
	if len(l.st.Scopes[l.st.Nodes[ni].Scope].Queue) == 0 {
		// Nothing waits: the capacity is not what holds the scope's
		// demand back, and a refusal under the gate is the provider's
		// own (a few percent at random), not our rate.
		return
	}
	e.Aimd, e.Peak, e.Boost, e.Bare = max(e.Safe, e.Eff*lc.decrease()/1000), e.Eff, 0, true
	e.DecMs, e.IncMs, e.Grow = max(1, now), now, 0
	l.applyLearned(i, bi, schemas.LearnedRefusal)
}

// cutThisInterval reports whether the bucket was cut less than an
// interval ago.
func (l *Ledger) cutThisInterval(ni int32, dd int, now int64) bool {
	i := l.learnedIdx(ni, dd)
	return i >= 0 && l.st.Learned[i].DecMs > 0 && now-l.st.Learned[i].DecMs < l.st.Config.Learn.interval()
}

// cutAgain: one decrease per interval, so the refusals of one overload
// count once, except that the share accepted, as more refusals of the
// same interval come in, may say less.
func (l *Ledger) cutAgain(ni int32, dd int, bi int32, c *refusalCut) {
	i := l.learnedIdx(ni, dd)
	e := &l.st.Learned[i]
	if (!c.share && c.rate < 0) || e.Aimd == 0 {
		return
	}
	next := e.Peak
	if c.share {
		next = mulSat(e.Peak, c.acc+1) / c.attempts
	}
	if c.rate >= 0 {
		next = min(next, c.rate)
	}
	next = max(1, e.scale()*l.st.Config.Learn.floor()/1000, next)
	if next < e.Aimd {
		e.Aimd = next
		if c.bare {
			e.Safe, e.Bare = next, true
		}
		l.applyLearned(i, bi, schemas.LearnedRefusal)
	}
}

// cutFirst is the interval's first cut: multiplicative decrease, or to
// the share accepted or the rate accepted when they say less, never below
// the floor.
func (l *Ledger) cutFirst(ni int32, dd int, bi int32, c *refusalCut) {
	lc := l.st.Config.Learn
	i := l.entry(ni, dd, bi)
	e := &l.st.Learned[i]
	floor := max(1, e.scale()*lc.floor()/1000)
	next := e.Eff * lc.decrease() / 1000
	if c.first {
		next = c.rate // the rate accepted, not ×0.7
	}
	if c.share {
		next = min(next, mulSat(e.Eff, c.acc+1)/c.attempts)
	}
	if c.rate >= 0 {
		next = min(next, c.rate)
	}
	if e.Aimd == 0 {
		e.Good = 0
		if l.st.Scopes[l.st.Nodes[ni].Scope].Sent.goodStretch(c.now) {
			e.Good = e.Eff
		}
	}
	e.Aimd, e.Peak, e.Boost, e.Bare = max(floor, next), e.Eff, 0, c.bare
	if c.bare {
		e.Safe = e.Aimd
	}
	if c.first {
		// The rate accepted over a window that began with the
		// provider's bucket full over-counts its refill by that burst
		// (615 of a 600 RPM provider, TestLearnProviderModel): with
		// Safe there, the capacity sat above the limit and each
		// cooldown's end was refused again. Bare refusals under the gate
		// may take it down to ×0.7 of it.
		e.Safe = max(floor, e.Aimd*lc.decrease()/1000)
	}
	if !c.bare {
		// The headers said there was room, or the provider is
		// overloaded: what it refuses is not shown to be our rate.
		// Back off, and probe back at once (growth past Peak doubles
		// each interval) instead of climbing for hundreds of accepts
		// toward a limit that was never hit.
		e.Peak = e.Aimd
	}
	e.DecMs, e.IncMs, e.Grow = max(1, c.now), c.now, 0
	l.applyLearned(i, bi, schemas.LearnedRefusal)
}

// learnSuccess applies the additive increase after an attempt through r's
// path reconciled with a 2xx: each such accept earns increase/1000 of the
// current capacity, applied at most once per interval (one event), and
// only while the trailing window holds no refusal. Growth per accept, not
// per interval of time, makes the climb back to the last refusal take the
// same number of calls whatever the rate (TCP grows its window per ACK):
// at the default 3 ‰ about 120 accepts from ×0.7 back to where the
// provider refused, so a provider whose real limit is below the bound
// refuses about one call in 120 of a sustained overload.
func (l *Ledger) learnSuccess(r *res) {
	lc := &l.st.Config.Learn // a pointer: the copy showed in the profile
	if lc.Off {
		return
	}
	now := l.st.Now
	q := &l.st.Scopes[r.Scope].Ratio
	q.roll(now, lc.interval())
	if len(l.st.Learned) == 0 || q.Rej[0]+q.Rej[1] > 0 {
		return // additive increase only without a refusal in the window
	}
	for i := range l.st.Learned {
		e := &l.st.Learned[i]
		if e.Pace > 0 && r.onPath(e.Node) {
			l.learnPaceDecay(i, now)
		}
		if e.Aimd == 0 || !r.onPath(e.Node) {
			continue
		}
		e.Grow = min(maxAmount, e.Grow+max(1, mulSat(e.Eff, lc.increase())<<e.Boost))
		if now-e.IncMs < lc.interval() {
			continue
		}
		step := e.Grow / 1000
		quiet := l.st.Scopes[r.Scope].RefusedMs > 0 && now-l.st.Scopes[r.Scope].RefusedMs >= learnQuietIntervals*lc.interval()
		if t := learnTimeStep(e, quiet && e.Aimd < e.Good); t > step {
			step, e.Grow = t, 0
		} else {
			e.Grow %= 1000
		}
		if step < 1 {
			continue
		}
		e.Aimd = min(maxAmount, e.Aimd+step)
		if ((e.Aimd >= e.Peak && !e.Bare) || (quiet && e.Aimd < e.Good)) && e.Boost < learnBoostMax {
			// Past the capacity where the provider last refused, and
			// accepted: it has more now (a storm has ended). Like
			// CUBIC's convex phase, the step doubles each interval, so
			// that the full rate is back within a few seconds instead of
			// hundreds of accepts. Not after a bare cut (e.Bare): that
			// was the provider's limit as far as anything shows, and the
			// doubling overshot headerless's 600 RPM to 790–875 every
			// 15–20 s; past Peak it stays the per-accept step (ledger
			// README, "The increase").
			e.Boost++
		}
		if e.Aimd >= e.bound(l.headroomOf(e)) {
			e.Aimd, e.Grow, e.Boost, e.Safe, e.Bare = 0, 0, 0, 0, false
		}
		e.IncMs = now
		if bi := l.learnBucket(e.Node, int(e.Dim)); bi >= 0 {
			l.applyLearned(i, bi, schemas.LearnedSuccess)
		}
	}
}

// learnGoodMs is how long after its last change a learned pace margin
// is halved (learnPaceDecay).
const learnGoodMs = 10_000

// learnGoodStretchMs is how long a scope must have sent without an
// unexplained refusal, up to the first refusal of an overload, for the
// capacity it had then to count as one the provider takes
// (learnedCap.Good, sentWindow.goodStretch). Judged against the
// overload's start, not as the slots that ended 10 s before the cut all
// clean: in capacity-storm-bare the storm comes 10 s into the run, so
// those slots were the run's first seconds, or held the learning's own
// earlier refusals; Good stayed 0 and the recovery after the storm was
// the per-accept climb (capacity_storm.recovered_s -1 in most runs).
const learnGoodStretchMs = 5_000

// learnQuietIntervals is how many learn intervals without a refusal the
// headers do not explain make a scope quiet (learnTimeStep).
const learnQuietIntervals = 3

// learnTimeStep is the growth an interval earns entry e by time alone,
// beside the per-accept step, once its scope is quiet (no unexplained
// refusal for learnQuietIntervals): 2^Boost/16 of the capacity, Boost
// doubling each interval (×1.06, ×1.125, ×1.25, ×1.5, ×2, …), whether
// or not it is past Peak. Per accept alone, a capacity that a storm cut
// to 30 % climbs as slowly as the provider takes calls at 30 %: the
// bare-dialect capacity storm was not back to its full rate within the
// run (about 120 accepts at ~3 a second to regain Peak, then steps of a
// few requests doubled). Once refusals stop, the provider has more than
// it showed, and what it takes is probed geometrically (multiplicative
// increase, as a TCP that saw no loss). A provider at a steady limit
// below the learned capacity refuses again within a few intervals of
// each cut (about one call in 120 at the per-accept rate), so it is
// rarely quiet and keeps the per-accept climb: with the climb to Peak
// bounded by time instead (8 intervals), headerless refused 70 of 1,231
// calls (5.7 %).
func learnTimeStep(e *learnedCap, quiet bool) int64 {
	if !quiet {
		return 0
	}
	return mulSat(e.Aimd, 1<<e.Boost) / 16
}

// learnGrant counts grant r, at log time now, as sent: in the scope's
// trailing minute (sentWindow) and its refusal ratio's window.
func (l *Ledger) learnGrant(r *res, now int64) {
	sc := &l.st.Scopes[r.Scope]
	sc.Sent.add(r, now)
	sc.Ratio.roll(now, l.st.Config.Learn.interval())
	sc.Ratio.Sent[0] = min(maxAmount, sc.Ratio.Sent[0]+1)
}

func (r *res) onPath(ni int32) bool {
	for i := 0; i < int(r.NPath); i++ {
		if r.Path[i] == ni {
			return true
		}
	}
	return false
}

// relearn rebuilds the spec copies of the learned buckets after compile
// (New, Restore, install) and points their buckets at them.
func (l *Ledger) relearn() bool {
	l.cc.specs = l.cc.specs[:l.cc.nBase]
	for i := range l.st.Learned {
		e := &l.st.Learned[i]
		if e.Node < 0 || int(e.Node) >= len(l.st.Nodes) || e.Base < -1 || int(e.Base) >= l.cc.nBase ||
			!learnableDim(int(e.Dim)) || e.Eff < 1 || e.Hdr < 0 || e.Aimd < 0 || e.Safe < 0 || e.Good < 0 || e.Grow < 0 || e.Peak < 0 || e.Boost > learnBoostMax || e.Pace < 0 || e.PaceMs < 0 ||
			(e.Base >= 0 && !learnable(&l.cc.specs[e.Base])) || (e.Base < 0 && (e.Hdr < 1 || e.Hdr > maxAmount || e.Conf != 0)) {
			return false
		}
		var sp spec
		base := l.baseSpec(e)
		l.cc.learnedSpec(&sp, &base, e.Eff)
		sp.slide = e.Slide && sp.kind == kToken
		l.cc.specs = append(l.cc.specs, sp)
		n := &l.st.Nodes[e.Node]
		found := false
		for bi := n.First; bi < n.First+n.N && int(bi) < len(l.st.Buckets); bi++ {
			b := &l.st.Buckets[bi]
			if b.Spec == e.Base || b.Spec == int32(l.cc.nBase+i) {
				b.Spec, found = int32(l.cc.nBase+i), true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// rebaseLearned follows a config change: each learned bucket takes its
// new configured spec and capacity (its terms capped by it); one whose
// bucket the new config removed is forgotten. A config change is itself
// the event, so this records nothing.
func (l *Ledger) rebaseLearned() {
	kept := l.st.Learned[:0]
	for _, e := range l.st.Learned {
		bi := l.learnBucket(e.Node, int(e.Dim))
		if bi < 0 {
			continue
		}
		sp := &l.cc.specs[l.st.Buckets[bi].Spec]
		e.Base, e.Conf = l.st.Buckets[bi].Spec, sp.capacity
		e.Hdr = min(e.Hdr, e.Conf)
		if e.Aimd > 0 {
			e.Aimd = max(e.Aimd, max(1, e.scale()*l.st.Config.Learn.floor()/1000))
		}
		if e.Aimd >= e.bound(l.headroomOf(&e)) {
			e.Aimd, e.Safe = 0, 0
		}
		e.Eff = e.effective(l.headroomOf(&e))
		kept = append(kept, e)
	}
	l.st.Learned = kept
	l.relearn()
	for i := range l.st.Learned {
		e := &l.st.Learned[i]
		if bi := l.learnBucket(e.Node, int(e.Dim)); bi >= 0 {
			b := &l.st.Buckets[bi]
			sp := &l.cc.specs[b.Spec]
			b.Level = min(b.Level, sp.burst)
			b.Base = min(b.Base, sp.gBurst)
		}
	}
}

// slowStartMax ends a scope's slow start: once this many attempts may be
// in flight, the buckets alone decide (2^6: six accepted answers).
const slowStartMax = 64

// slowArm starts slow start in scope sc when an attempt after the first
// (a fallback, which the gateway reserves as the request's next attempt)
// reaches it before the provider has answered any of its attempts: its
// configured capacity is then only a guess, often 10× the real one, and
// a fallback arrives as a burst (the overload that moved it). Without it
// the burst was granted at the configured window before the first
// answer's headers could say anything (noisy-neighbor-handwritten: the
// Azure fallback's 429s). One attempt may be in flight; each accepted
// answer doubles that (slowAccepted), up to slowStartMax; a refusal ends
// it, leaving the learned capacity to AIMD (TCP's slow start, per answer
// rather than per round trip). A scope whose primary traffic came first
// is already answered and never slows down.
func (l *Ledger) slowArm(sc *scopeState) {
	if sc.Answered || sc.Slow > 0 || l.st.Config.Learn.Off {
		return
	}
	sc.Slow = 1
}

// slowAccepted follows a 2xx answer of one of sc's attempts.
func slowAccepted(sc *scopeState) {
	sc.Answered = true
	if sc.Slow == 0 {
		return
	}
	if sc.Slow *= 2; sc.Slow >= slowStartMax {
		sc.Slow = 0
	}
}
