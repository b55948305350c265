package budget

import (
	"encoding/json"
	"fmt"

	"github.com/sluice-dev/sluice/schemas"
)

// Holder is a scope partition's side of the budgets: the lease it holds
// of each, which it spends without a round trip. It lives inside the
// scope partition's pure state (one writer) and is not safe for
// concurrent use.
//
// The caller (the scope ledger) checks a request against every budget on
// its path with Check, charges it with Charge when it grants, gives back
// with Adjust when a hold is released or reconciled, states its queued
// demand with Want, applies the LeaseGranted records of its partition
// with Apply, and calls Tick as log time passes. Each of these appends
// the lease messages to send (LeaseRequested, LeaseReturned, keyed by
// budget id) to out.
type Holder struct {
	cfg Config
	st  holderState2
	idx map[string]int
}

type holderState2 struct {
	Name   string   `json:"name"`
	NowMs  int64    `json:"now_ms"`
	Leases []*lease `json:"leases"` // one per budget, by budget id
}

// lease is what the holder holds of one budget in one window.
type lease struct {
	B        Budget `json:"budget"`
	StartMs  int64  `json:"start_ms"` // window
	EndMs    int64  `json:"end_ms"`
	Granted  int64  `json:"granted"`
	Returned int64  `json:"returned"`
	Used     int64  `json:"used"`
	Target   int64  `json:"target"`
	// Available is the budget partition's last word on what the whole
	// budget has not used; UsedThen our Used as it knew it.
	Available int64 `json:"available"`
	UsedThen  int64 `json:"used_then"`
	// Told: Available is known for this window, as of ToldMs; it is
	// trusted for one term (then a request asks again, so that holds
	// released elsewhere are seen).
	Told   bool  `json:"told"`
	ToldMs int64 `json:"told_ms"`
	// Seq is our last message's; SentMs its log time; Acked the highest
	// of ours the budget partition has answered; GrantSeq the highest of
	// its messages applied.
	Seq      int64 `json:"seq"`
	SentMs   int64 `json:"sent_ms"`
	SentUsed int64 `json:"sent_used"`
	// UsedAt is the Used each of our last messages carried, by Seq
	// modulo its length: an answer to an older message knows that use.
	UsedAt   [8]int64 `json:"used_at"`
	Acked    int64    `json:"acked"`
	GrantSeq int64    `json:"grant_seq"`
	// TermEndMs ends the lease term; Charged is what was charged in it.
	TermEndMs int64 `json:"term_end_ms"`
	Charged   int64 `json:"charged"`
	// Queued and Need are the caller's last Want.
	Queued int64 `json:"queued"`
	Need   int64 `json:"need"`
	// Dry: the last answer granted nothing. The holder then asks again
	// only RetryMs after its last message (the budget partition sends
	// unasked when returns elsewhere cover the need), so that a scope that
	// pumps on every answer does not ask in a loop.
	Dry bool `json:"dry,omitempty"`
	// Prev is the previous window's counters, kept to answer a late grant
	// for it with a return.
	PrevStartMs  int64 `json:"prev_start_ms,omitempty"`
	PrevGranted  int64 `json:"prev_granted,omitempty"`
	PrevReturned int64 `json:"prev_returned,omitempty"`
	PrevUsed     int64 `json:"prev_used,omitempty"`
}

func (l *lease) free() int64 { return l.Granted - l.Returned - l.Used }

// Msg is one lease message to send: exactly one of its fields is set.
// Key Requested and Returned by their budget id (the budget partition's
// key), Granted by its holder (the scope partition's key).
type Msg struct {
	Requested *schemas.LeaseRequested
	Returned  *schemas.LeaseReturned
	Granted   *schemas.LeaseGranted
}

// Verdict is Check's answer for one budget.
type Verdict int

// Verdicts.
const (
	Fits      Verdict = iota // the lease covers it: grant and Charge
	Wait                     // the budget may have room; the lease does not (budget_lease)
	Exhausted                // the budget has less left than it costs (budget_exhausted)
	NoBudget                 // no budget of this id: nothing to check
)

// NewHolder returns the holder of scope name under cfg.
func NewHolder(name string, cfg Config) (*Holder, error) {
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("budget config: %w", err)
	}
	h := &Holder{cfg: cfg}
	h.st.Name = name
	for _, b := range sortedBudgets(&cfg) {
		h.st.Leases = append(h.st.Leases, &lease{B: b})
	}
	h.reindex()
	return h, nil
}

func (h *Holder) reindex() {
	h.idx = make(map[string]int, len(h.st.Leases))
	for i, l := range h.st.Leases {
		h.idx[l.B.ID] = i
	}
}

// Name is the holder's scope.
func (h *Holder) Name() string { return h.st.Name }

// Budgets returns the ids of the budgets a request with these path
// levels spends: every budget whose level and subject the path names.
func (h *Holder) Budgets(path []schemas.PathLevel, dst []string) []string {
	for _, l := range h.st.Leases {
		for _, p := range path {
			if p.Level == l.B.Level && p.ID == l.B.Subject {
				dst = append(dst, l.B.ID)
				break
			}
		}
	}
	return dst
}

// Unit returns budget id's unit ("" if there is none).
func (h *Holder) Unit(id string) Unit {
	if l := h.lease(id); l != nil {
		return l.B.Unit
	}
	return ""
}

func (h *Holder) lease(id string) *lease {
	if i, ok := h.idx[id]; ok {
		return h.st.Leases[i]
	}
	return nil
}

// clock advances the holder's clock and rolls leases whose window ended
// (returning what they held unused, reason window_rolled).
func (h *Holder) clock(nowMs int64, out []Msg) []Msg {
	if nowMs > h.st.NowMs {
		h.st.NowMs = nowMs
	}
	for _, l := range h.st.Leases {
		if h.st.NowMs < l.EndMs {
			continue // the hot path: no calendar arithmetic
		}
		if start, _ := windowOf(&l.B, h.st.NowMs); start > l.StartMs || l.EndMs == 0 {
			out = h.rollTo(l, start, out) // (EndMs 0: the first window, which may start at 0)
		}
	}
	return out
}

func (h *Holder) rollTo(l *lease, start int64, out []Msg) []Msg {
	if l.Granted > 0 {
		if f := l.free(); f > 0 {
			l.Returned += f
		}
		out = h.send(l, schemas.LeaseWindowRolled, out)
		// Not resent: if it is lost, the budget partition counts the
		// unused part against the next window until that one rolls too.
		l.Acked = l.Seq
	}
	l.PrevStartMs, l.PrevGranted, l.PrevReturned, l.PrevUsed = l.StartMs, l.Granted, l.Returned, l.Used
	_, end := windowOf(&l.B, start)
	seq, acked := l.Seq, l.Acked
	*l = lease{B: l.B, StartMs: start, EndMs: end, Seq: seq, Acked: acked, GrantSeq: l.GrantSeq,
		PrevStartMs: l.PrevStartMs, PrevGranted: l.PrevGranted, PrevReturned: l.PrevReturned, PrevUsed: l.PrevUsed}
	return out
}

// Check says whether a request costing cost fits budget id's lease now.
// It changes nothing but the clock (and a window roll, whose messages it
// appends to out).
func (h *Holder) Check(nowMs int64, id string, cost int64, out []Msg) (Verdict, []Msg) {
	if invariantsOn {
		defer h.checkStep("Check")
	}
	out = h.clock(nowMs, out)
	l := h.lease(id)
	switch {
	case l == nil:
		return NoBudget, out
	case cost <= l.free():
		return Fits, out
	case cost > l.B.Limit || l.Told && h.st.NowMs < l.ToldMs+h.cfg.TermMs && cost > l.Available-(l.Used-l.UsedThen):
		return Exhausted, out
	}
	return Wait, out
}

// Charge counts cost against budget id's lease (after Check said Fits)
// and returns the window it was charged in, which Adjust needs.
func (h *Holder) Charge(id string, cost int64) (windowMs int64) {
	if invariantsOn {
		defer h.checkStep("Charge")
	}
	l := h.lease(id)
	if l == nil {
		return 0
	}
	l.Used += cost
	l.Charged += cost
	return l.StartMs
}

// Adjust changes what a charge of window windowMs used by delta: negative
// when a hold is released or reconciled below its reservation, positive
// when a reconcile exceeds it (an overdraft, bounded by the estimate's
// error; README.md). A charge of an earlier window changes nothing: that
// window's lease is returned.
func (h *Holder) Adjust(id string, windowMs, delta int64) {
	if invariantsOn {
		defer h.checkStep("Adjust")
	}
	l := h.lease(id)
	if l == nil || windowMs != l.StartMs {
		return
	}
	l.Used = max(0, l.Used+delta)
}

// Want states the holder's queued demand of budget id: the sum and the
// smallest of the costs of its requests waiting for the lease. When the
// lease cannot cover them and no request is in flight, it asks; when it
// covers them but is running low, it asks ahead (ahead).
func (h *Holder) Want(nowMs int64, id string, queued, need int64, out []Msg) []Msg {
	if invariantsOn {
		defer h.checkStep("Want")
	}
	out = h.clock(nowMs, out)
	l := h.lease(id)
	if l == nil {
		return out
	}
	l.Queued, l.Need = max(0, queued), max(0, need)
	switch {
	case l.short() && (!l.Dry || h.st.NowMs-l.SentMs >= h.cfg.RetryMs):
		out = h.send(l, "", out)
	case h.ahead(l):
		out = h.sendDemand(l, "", l.aheadDemand(h.st.NowMs, h.cfg.TermMs), out)
	case givesBack(l):
		out = h.send(l, "", out)
	}
	return out
}

// short: requests wait that the lease cannot cover, and nothing is in
// flight.
func (l *lease) short() bool { return l.Need > 0 && l.free() < l.Need && l.Acked >= l.Seq }

// WantAll states the queued demand of every budget at once: ids[i] has
// sum[i] queued, need[i] the smallest; a budget not named has none.
func (h *Holder) WantAll(nowMs int64, ids []string, sum, need []int64, out []Msg) []Msg {
	if invariantsOn {
		defer h.checkStep("WantAll")
	}
	out = h.clock(nowMs, out)
	for _, l := range h.st.Leases {
		q, n := int64(0), int64(0)
		for i, id := range ids {
			if id == l.B.ID {
				q, n = sum[i], need[i]
				break
			}
		}
		if q == 0 && l.Queued == 0 && l.Need == 0 {
			if !h.ahead(l) && !givesBack(l) {
				continue
			}
		}
		out = h.Want(nowMs, l.B.ID, q, n, out)
	}
	return out
}

// ahead says whether l should ask for more before it runs out: nothing
// waits for it, but less is left of it than its term has charged so far
// (more than half of what the last grant left it is spent, at the rate
// that grant was sized for), and nothing is in flight. Asking then keeps
// the lease round trip off the requests' path: the answer comes while
// the rest is being spent. A dry answer (the budget has nothing to give)
// holds the next ask back RetryMs, as for a queued request.
func (h *Holder) ahead(l *lease) bool {
	now := h.st.NowMs
	return l.Charged > 0 && l.TermEndMs > now && l.free() < l.Charged && l.Acked >= l.Seq &&
		(!l.Dry || now-l.SentMs >= h.cfg.RetryMs)
}

// givesBack says whether l should report its counters at once because
// its Used fell (a hold released, refused by the provider or reconciled
// below its reservation) by more than the budget partition, by its last
// answer, thinks is left of the budget. The partition counts each
// holder's last reported Used as spent, so until this report it would
// tell a scope waiting for the last of the budget that the budget cannot
// cover it (budget_exhausted) for what was never spent: a fallback after
// a refused attempt, at the end of a budget. Far from the end the report
// waits for the next ask, as before (no message per release). Nothing in
// flight: an answer to it refreshes Available, and this is asked again.
func givesBack(l *lease) bool {
	d := l.SentUsed - l.Used
	return d > 0 && l.Told && l.Acked >= l.Seq && l.Available-(l.SentUsed-l.UsedThen) < d
}

// aheadRatioMax bounds an early ask's demand at this many times what its
// term charged so far (a burst just after a grant must not claim the
// budget for a whole term at its rate).
const aheadRatioMax = 4

// aheadDemand is an early ask's demand: what the term has charged so
// far, scaled to a whole term (the rate it is spent at, for one term
// ahead), at most aheadRatioMax times it, plus what is queued. A grant
// restarts the term (Apply), so under steady demand the lease holds
// about one term of traffic and asks twice a term.
func (l *lease) aheadDemand(nowMs, termMs int64) int64 {
	elapsed := max(nowMs-(l.TermEndMs-termMs), termMs/aheadRatioMax, 1)
	proj := l.Charged
	if l.Charged <= amountMax/termMs { // no overflow: else the cap applies
		proj = l.Charged * termMs / elapsed
	}
	return min(amountMax, l.Queued+max(proj, l.Charged))
}

// demand is what the lease asks to hold unused for its next term: what
// is queued plus what the last term charged (the recent rate).
func (l *lease) demand() int64 { return min(amountMax, l.Queued+l.Charged) }

// send appends l's counters as a LeaseRequested (reason "") or a
// LeaseReturned.
func (h *Holder) send(l *lease, reason string, out []Msg) []Msg {
	return h.sendDemand(l, reason, l.demand(), out)
}

// sendDemand is send with the demand a LeaseRequested states.
func (h *Holder) sendDemand(l *lease, reason string, demand int64, out []Msg) []Msg {
	l.Seq++
	l.SentMs, l.SentUsed = h.st.NowMs, l.Used
	l.UsedAt[l.Seq%int64(len(l.UsedAt))] = l.Used
	if reason == "" {
		return append(out, Msg{Requested: &schemas.LeaseRequested{Budget: l.B.ID, Holder: h.st.Name, WindowStartMs: l.StartMs,
			Seq: l.Seq, Granted: l.Granted, Returned: l.Returned, Used: l.Used, Demand: demand, Need: l.Need}})
	}
	return append(out, Msg{Returned: &schemas.LeaseReturned{Budget: l.B.ID, Holder: h.st.Name, WindowStartMs: l.StartMs,
		Seq: l.Seq, Granted: l.Granted, Returned: l.Returned, Used: l.Used, Reason: reason}})
}

// Apply applies a LeaseGranted record of the holder's partition. A grant
// for another holder, an unknown budget or an old message changes
// nothing.
func (h *Holder) Apply(nowMs int64, g *schemas.LeaseGranted, out []Msg) []Msg {
	if invariantsOn {
		defer h.checkStep("Apply")
	}
	out = h.clock(nowMs, out)
	l := h.lease(g.Budget)
	if l == nil || g.Holder != h.st.Name || g.Granted < 0 || g.Granted > amountMax {
		return out
	}
	if g.WindowStartMs > l.StartMs {
		if start, _ := windowOf(&l.B, g.WindowStartMs); start == g.WindowStartMs {
			out = h.rollTo(l, start, out) // the budget partition's clock is ahead of ours
		}
	}
	if g.WindowStartMs != l.StartMs {
		// A late grant for the window we rolled away from: give back what
		// it added, so that it is not stranded there.
		if g.WindowStartMs == l.PrevStartMs && g.Granted > l.PrevGranted {
			l.PrevReturned += g.Granted - l.PrevGranted
			l.PrevGranted = g.Granted
			l.Seq++
			l.UsedAt[l.Seq%int64(len(l.UsedAt))] = 0 // says nothing of this window
			out = append(out, Msg{Returned: &schemas.LeaseReturned{Budget: l.B.ID, Holder: h.st.Name, WindowStartMs: l.PrevStartMs,
				Seq: l.Seq, Granted: l.PrevGranted, Returned: l.PrevReturned, Used: l.PrevUsed, Reason: schemas.LeaseWindowRolled}})
		}
		return out
	}
	if g.Seq <= l.GrantSeq {
		return out
	}
	l.GrantSeq = g.Seq
	l.Acked = max(l.Acked, min(g.AckSeq, l.Seq))
	if g.Granted > l.Granted {
		l.Granted = g.Granted
	}
	l.Target = g.Target
	l.Dry = g.Amount == 0
	l.Available, l.UsedThen, l.Told, l.ToldMs = g.Available, l.SentUsed, true, h.st.NowMs
	if g.AckSeq < l.Seq {
		// It answered an older report: the use that one carried, if it
		// is still in the ring; else assume it knew nothing of ours.
		l.UsedThen = 0
		if g.AckSeq > 0 && l.Seq-g.AckSeq < int64(len(l.UsedAt)) {
			l.UsedThen = l.UsedAt[g.AckSeq%int64(len(l.UsedAt))]
		}
	}
	if l.TermEndMs <= h.st.NowMs || g.Amount > 0 {
		l.TermEndMs = h.st.NowMs + g.TermMs
		l.Charged = 0
	}
	// Above the share: give the excess back at once. A share revised
	// below what is used is answered too: the budget partition learns the
	// use it did not know of (and may tell a waiting holder the budget is
	// spent).
	if excess := (l.Granted - l.Returned) - max(l.Target, l.Used); excess > 0 {
		l.Returned += excess
		out = h.send(l, schemas.LeaseShareRevised, out)
	} else if l.Target < l.Granted-l.Returned && l.Used != l.SentUsed && l.Acked >= l.Seq {
		out = h.send(l, schemas.LeaseShareRevised, out)
	} else if l.Need > 0 && l.free() < l.Need && l.Acked >= l.Seq && g.Amount > 0 {
		out = h.send(l, "", out) // still short: ask again
	}
	return out
}

// Tick advances the clock: ends lease terms (refreshing a lease with
// demand, returning an idle one's unused part) and resends counters the
// budget partition has not answered within RetryMs.
func (h *Holder) Tick(nowMs int64, out []Msg) []Msg {
	if invariantsOn {
		defer h.checkStep("Tick")
	}
	out = h.clock(nowMs, out)
	now := h.st.NowMs
	for _, l := range h.st.Leases {
		switch {
		case l.Acked < l.Seq && now-l.SentMs >= h.cfg.RetryMs:
			// Lost, or its answer was: the same Seq again, with the
			// counters as they are now. The budget partition applies it if
			// it never saw it, else answers it again.
			l.Seq--
			out = h.resend(l, out)
		case l.Dry && l.short() && now-l.SentMs >= h.cfg.RetryMs:
			out = h.send(l, "", out)
		case l.TermEndMs > 0 && now >= l.TermEndMs && l.Acked >= l.Seq:
			l.TermEndMs = 0
			if l.demand() > 0 {
				out = h.send(l, "", out)
				l.Charged = 0
			} else if l.free() > 0 {
				l.Returned += l.free()
				out = h.send(l, schemas.LeaseTermEnded, out)
			}
		}
	}
	return out
}

func (h *Holder) resend(l *lease, out []Msg) []Msg {
	reason := ""
	if l.demand() == 0 && l.Need == 0 {
		reason = schemas.LeaseTermEnded
	}
	return h.send(l, reason, out)
}

// NextWakeMs is when Tick next has work (0, false: none): a resend, a
// term's end, a retry after a dry answer.
func (h *Holder) NextWakeMs() (int64, bool) {
	var next int64
	for _, l := range h.st.Leases {
		t := int64(0)
		if l.Acked < l.Seq || l.Dry && l.short() {
			t = l.SentMs + h.cfg.RetryMs
		} else if l.TermEndMs > 0 {
			t = l.TermEndMs
		}
		if t > 0 && (next == 0 || t < next) {
			next = t
		}
		// No wake at the window's end: the first record after it rolls
		// the lease (its unused part counts against the next window until
		// then), and a day-long wake would keep an idle partition ticking.
	}
	return next, next > 0
}

// Lease describes what the holder holds of budget id, for explain and the
// auditor.
type Lease struct {
	Budget                  string
	WindowStartMs           int64
	Granted, Returned, Used int64
	Target, Available       int64
}

// Lease returns the holder's lease of budget id.
func (h *Holder) Lease(id string) (Lease, bool) {
	l := h.lease(id)
	if l == nil {
		return Lease{}, false
	}
	return Lease{Budget: id, WindowStartMs: l.StartMs, Granted: l.Granted, Returned: l.Returned, Used: l.Used,
		Target: l.Target, Available: l.Available}, true
}

// MarshalSnapshot returns the holder's state.
func (h *Holder) MarshalSnapshot() ([]byte, error) { return json.Marshal(&h.st) }

// RestoreHolder returns the holder of a snapshot under cfg.
func RestoreHolder(cfg Config, snap []byte) (*Holder, error) {
	var st holderState2
	if err := json.Unmarshal(snap, &st); err != nil {
		return nil, fmt.Errorf("budget holder snapshot: %w", err)
	}
	h, err := NewHolder(st.Name, cfg)
	if err != nil {
		return nil, err
	}
	have := map[string]*lease{}
	for _, l := range st.Leases {
		have[l.B.ID] = l
	}
	for i, l := range h.st.Leases {
		if old, ok := have[l.B.ID]; ok {
			old.B = l.B
			h.st.Leases[i] = old
		}
	}
	h.st.NowMs = st.NowMs
	h.reindex()
	return h, nil
}
