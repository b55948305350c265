package budget

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/sluice-dev/sluice/schemas"
)

// Partition is the state of one budget partition: the single writer of
// the budgets it owns. It is not safe for concurrent use.
type Partition struct {
	cfg Config
	st  partState
	idx map[string]int // budget id → index in st.Budgets
}

// partState is everything a snapshot must carry; slices in a fixed order
// (budgets by id, holders by name), never map order.
type partState struct {
	NowMs   int64          `json:"now_ms"`
	Budgets []*budgetState `json:"budgets"`
	Stats   Stats          `json:"stats"`
}

// Stats counts what the partition did.
type Stats struct {
	Requests, Returns, Stale, Unknown int64 // messages applied, ignored as stale, for unknown budgets
	Grants                            int64 // LeaseGranted messages sent
	GrantedTotal                      int64 // sum of Amount over them
}

type budgetState struct {
	B    Budget       `json:"budget"`
	Cur  windowState  `json:"cur"`
	Prev *windowState `json:"prev,omitempty"`
	// History holds the used amount of the closed slots of a rolling
	// budget, newest last, at most Slots−1 of them.
	History []slotUsed `json:"history,omitempty"`
	// Seqs is the last applied holder Seq and the last sent Seq, per
	// holder, across windows.
	Seqs []holderSeq `json:"seqs"`
}

type slotUsed struct {
	StartMs int64 `json:"start_ms"`
	Used    int64 `json:"used"`
}

type holderSeq struct {
	Holder string `json:"holder"`
	In     int64  `json:"in"`
	Out    int64  `json:"out"`
}

type windowState struct {
	StartMs int64          `json:"start_ms"`
	EndMs   int64          `json:"end_ms"`
	Holders []*holderState `json:"holders"`
}

// holderState is the budget partition's view of one holder's lease.
// Granted is the partition's own count; Returned and Used are the
// holder's last report (never smaller than the truth for Granted −
// Returned, because a holder counts a return before it sends it).
type holderState struct {
	Name     string `json:"name"`
	Granted  int64  `json:"granted"`
	Returned int64  `json:"returned"`
	Used     int64  `json:"used"`
	Demand   int64  `json:"demand"`
	Need     int64  `json:"need"`
	HeardMs  int64  `json:"heard_ms"` // log time of its last message
	Target   int64  `json:"target"`   // its share, as Granted − Returned
	// Told and AvailTold are the Target and avail last sent to it: a
	// holder is told again only when they change (no chatter).
	Told      int64 `json:"told"`
	AvailTold int64 `json:"avail_told"`
}

// committed is what the holder may have spent or may still spend.
func (h *holderState) committed() int64 { return max(h.Granted-h.Returned, h.Used) }

// Output is one LeaseGranted for a holder (key it by Holder).
type Output struct {
	Grant schemas.LeaseGranted
}

// NewPartition returns an empty budget partition running cfg. An invalid
// cfg is an error: the caller keeps the running one.
func NewPartition(cfg Config) (*Partition, error) {
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("budget config: %w", err)
	}
	p := &Partition{cfg: cfg}
	for _, b := range sortedBudgets(&cfg) {
		p.st.Budgets = append(p.st.Budgets, &budgetState{B: b})
	}
	p.reindex()
	return p, nil
}

func (p *Partition) reindex() {
	p.idx = make(map[string]int, len(p.st.Budgets))
	for i, b := range p.st.Budgets {
		p.idx[b.B.ID] = i
	}
}

// Active reports whether any holder has been heard of: before that, a
// clock advance has nothing to do.
func (p *Partition) Active() bool {
	for _, b := range p.st.Budgets {
		if len(b.Cur.Holders) > 0 || b.Prev != nil {
			return true
		}
	}
	return false
}

// NowMs is the partition's clock: the greatest log time applied.
func (p *Partition) NowMs() int64 { return p.st.NowMs }

// Stats returns the counters.
func (p *Partition) Stats() Stats { return p.st.Stats }

// Apply applies one record of the partition at log time logTimeMs and
// appends the LeaseGranted messages it causes to out. LeaseRequested and
// LeaseReturned are applied; a Tick (or any record) advances the clock,
// rolls windows and lets pending holders be served; other types change
// nothing else. Apply never panics on bad input.
func (p *Partition) Apply(logTimeMs int64, ev *schemas.Event, out []Output) []Output {
	if invariantsOn {
		defer p.checkStep("Apply")
	}
	if logTimeMs > p.st.NowMs {
		p.st.NowMs = logTimeMs
	}
	for _, b := range p.st.Budgets {
		p.roll(b, p.st.NowMs)
	}
	if ev == nil {
		return p.serveAll(out)
	}
	switch {
	case ev.Type == schemas.TypeLeaseRequested && ev.LeaseRequested != nil:
		r := ev.LeaseRequested
		return p.report(r.Budget, r.Holder, r.WindowStartMs, r.Seq, r.Granted, r.Returned, r.Used, r.Demand, r.Need, "", out)
	case ev.Type == schemas.TypeLeaseReturned && ev.LeaseReturned != nil:
		r := ev.LeaseReturned
		return p.report(r.Budget, r.Holder, r.WindowStartMs, r.Seq, r.Granted, r.Returned, r.Used, -1, -1, r.Reason, out)
	}
	return p.serveAll(out)
}

// roll moves b's current window on until it contains nowMs. The previous
// window is kept for one window: its holders may still hold lease they
// could spend (their clock is not ours), so its unused lease stays
// counted against the new window until they return it.
func (p *Partition) roll(b *budgetState, nowMs int64) {
	if nowMs < b.Cur.EndMs && nowMs >= b.Cur.StartMs {
		return // the hot path: no calendar arithmetic
	}
	start, end := windowOf(&b.B, nowMs)
	if b.Cur.EndMs != 0 && start <= b.Cur.StartMs {
		return
	}
	if b.Cur.EndMs != 0 {
		rolling := b.B.Window == WindowRolling
		if rolling && b.Prev != nil {
			b.History = append(b.History, slotUsed{StartMs: b.Prev.StartMs, Used: b.Prev.committed()})
		}
		if b.Cur.EndMs == start {
			prev := b.Cur
			b.Prev = &prev
		} else {
			if rolling {
				b.History = append(b.History, slotUsed{StartMs: b.Cur.StartMs, Used: b.Cur.committed()})
			}
			b.Prev = nil // more than a window passed: nobody may still spend it
		}
	}
	b.Cur = windowState{StartMs: start, EndMs: end}
	if b.B.Window == WindowRolling {
		keep := b.History[:0]
		for _, s := range b.History {
			if s.StartMs > start-b.B.RollingMs {
				keep = append(keep, s)
			}
		}
		b.History = keep
	}
}

// pool is what b may lease in its current window: the limit less what
// earlier slots of a rolling window used and less the previous window's
// lease not yet returned.
func (b *budgetState) pool() int64 {
	pool := b.B.Limit
	for _, s := range b.History {
		pool -= s.Used
	}
	if b.Prev != nil {
		for _, h := range b.Prev.Holders {
			if b.B.Window == WindowRolling {
				pool -= h.committed() // the slot before this one counts whole
			} else {
				pool -= max(0, h.Granted-h.Returned-h.Used) // only what may still be spent
			}
		}
	}
	return pool
}

// committed sums the holders' committed amounts.
func (w *windowState) committed() int64 {
	var n int64
	for _, h := range w.Holders {
		n += h.committed()
	}
	return n
}

func (p *Partition) seq(b *budgetState, holder string) *holderSeq {
	i := sort.Search(len(b.Seqs), func(i int) bool { return b.Seqs[i].Holder >= holder })
	if i < len(b.Seqs) && b.Seqs[i].Holder == holder {
		return &b.Seqs[i]
	}
	if len(b.Seqs) >= 4*p.cfg.HoldersMax {
		return nil
	}
	b.Seqs = append(b.Seqs, holderSeq{})
	copy(b.Seqs[i+1:], b.Seqs[i:])
	b.Seqs[i] = holderSeq{Holder: holder}
	return &b.Seqs[i]
}

func (p *Partition) holder(w *windowState, name string, create bool) *holderState {
	i := sort.Search(len(w.Holders), func(i int) bool { return w.Holders[i].Name >= name })
	if i < len(w.Holders) && w.Holders[i].Name == name {
		return w.Holders[i]
	}
	if !create || len(w.Holders) >= p.cfg.HoldersMax {
		return nil
	}
	w.Holders = append(w.Holders, nil)
	copy(w.Holders[i+1:], w.Holders[i:])
	w.Holders[i] = &holderState{Name: name}
	return w.Holders[i]
}

// report applies one holder message (demand < 0: a return, which keeps
// the demand unless the term ended or the window rolled).
func (p *Partition) report(id, name string, windowMs, seq, granted, returned, used, demand, need int64, reason string, out []Output) []Output {
	i, ok := p.idx[id]
	if !ok || name == "" || len(name) > idLenMax || seq <= 0 || returned < 0 || used < 0 || demand > amountMax ||
		need > amountMax || granted > amountMax || returned > amountMax || used > amountMax {
		p.st.Stats.Unknown++
		return out
	}
	b := p.st.Budgets[i]
	if start, _ := windowOf(&b.B, windowMs); start == windowMs && windowMs >= b.Cur.EndMs {
		p.roll(b, windowMs) // the holder's clock is ahead of ours
	}
	var w *windowState
	switch {
	case windowMs == b.Cur.StartMs:
		w = &b.Cur
	case b.Prev != nil && windowMs == b.Prev.StartMs:
		w = b.Prev
	default:
		p.st.Stats.Stale++
		return out
	}
	sq := p.seq(b, name)
	h := p.holder(w, name, true)
	if sq == nil || h == nil {
		p.st.Stats.Unknown++
		return out
	}
	if seq <= sq.In {
		p.st.Stats.Stale++
		// A repeat of the last message: its answer may be what was lost.
		if seq == sq.In && w == &b.Cur {
			return p.send(b, h, sq, 0, out)
		}
		return out
	}
	sq.In = seq
	if demand >= 0 {
		p.st.Stats.Requests++
		h.Demand, h.Need = demand, need
	} else {
		p.st.Stats.Returns++
		if reason != schemas.LeaseShareRevised {
			h.Demand, h.Need = 0, 0
		}
	}
	// Returned only grows; a report can lag a grant, never lead it.
	h.Returned = max(h.Returned, min(returned, h.Granted))
	h.Used = used
	h.HeardMs = p.st.NowMs
	if w != &b.Cur {
		return p.send(b, h, sq, 0, out) // an acknowledgement; the old window grants nothing
	}
	return p.serve(b, h, true, out)
}

// serveAll lets every holder with an unmet need be served (after a clock
// advance: demand that went stale frees shares).
func (p *Partition) serveAll(out []Output) []Output {
	for _, b := range p.st.Budgets {
		for _, h := range b.Cur.Holders {
			if h.Need > 0 && h.Granted-h.Returned-h.Used < h.Need {
				out = p.serve(b, h, false, out)
			}
		}
	}
	return out
}

// serve recomputes b's shares, grants the asking holder what its share
// allows (always answering it when answer is set), then tells every other
// holder whose share fell below what it holds, and serves every other
// holder with an unmet need that the free budget now covers.
func (p *Partition) serve(b *budgetState, asker *holderState, answer bool, out []Output) []Output {
	p.shares(b)
	free := b.pool()
	for _, h := range b.Cur.Holders {
		free -= h.committed()
	}
	if g := min(max(0, asker.Target-(asker.Granted-asker.Returned)), max(0, free)); g > 0 || answer {
		asker.Granted += g
		free -= g
		out = p.send(b, asker, p.seq(b, asker.Name), g, out)
	}
	avail := b.avail()
	for _, h := range b.Cur.Holders {
		if h == asker {
			continue
		}
		hold := h.Granted - h.Returned
		unmet := h.Need > 0 && hold-h.Used < h.Need
		g := int64(0)
		if unmet {
			g = min(max(0, h.Target-hold), max(0, free))
		}
		switch {
		case g > 0:
			h.Granted += g
			free -= g
		case hold > max(h.Target, h.Used) && h.Target != h.Told:
		case unmet && avail < h.Need && h.AvailTold != avail:
		default:
			continue
		}
		out = p.send(b, h, p.seq(b, h.Name), g, out)
	}
	return out
}

// avail is what b's current window has not used, by every holder's last
// report: the most any one request could still be granted.
func (b *budgetState) avail() int64 {
	a := b.pool()
	for _, h := range b.Cur.Holders {
		a -= h.Used
	}
	return max(0, a)
}

// shares sets every current holder's Target. The rule: the window's
// unused budget (avail) goes to the holders with demand (heard from
// within 2 terms). First each gets its need (the smallest request it has
// queued), smallest need first, while that fits: every scope can admit
// something before any scope gets more. Then the rest is divided by
// max-min fairness over the demands still unmet, smallest first: each
// gets that demand or an equal part of what is left, whichever is
// smaller. Ties go by holder name (the state's order). A holder without
// demand gets a target of what it used: it returns the rest.
func (p *Partition) shares(b *budgetState) {
	rest := b.avail()
	var active []*holderState
	for _, h := range b.Cur.Holders {
		h.Target = h.Used
		if h.Demand > 0 && p.st.NowMs-h.HeardMs <= 2*p.cfg.TermMs {
			active = append(active, h)
		}
	}
	sort.SliceStable(active, func(i, j int) bool { return active[i].Need < active[j].Need })
	for _, h := range active {
		give := min(max(0, h.Need), h.Demand, rest)
		h.Target += give
		rest -= give
	}
	sort.SliceStable(active, func(i, j int) bool {
		return active[i].Demand-(active[i].Target-active[i].Used) < active[j].Demand-(active[j].Target-active[j].Used)
	})
	for i, h := range active {
		give := min(h.Demand-(h.Target-h.Used), rest/int64(len(active)-i))
		h.Target += max(0, give)
		rest -= max(0, give)
	}
}

func (p *Partition) send(b *budgetState, h *holderState, sq *holderSeq, amount int64, out []Output) []Output {
	if sq == nil {
		return out
	}
	sq.Out++
	avail := b.avail()
	h.AvailTold, h.Told = avail, h.Target
	p.st.Stats.Grants++
	p.st.Stats.GrantedTotal += amount
	w := &b.Cur
	if b.Prev != nil && p.holder(b.Prev, h.Name, false) == h {
		w = b.Prev
	}
	return append(out, Output{Grant: schemas.LeaseGranted{
		Budget: b.B.ID, Holder: h.Name, WindowStartMs: w.StartMs, Seq: sq.Out, AckSeq: sq.In,
		Granted: h.Granted, Amount: amount, Target: h.Target, Available: avail,
		TermMs: p.cfg.TermMs, WindowEndMs: w.EndMs,
	}})
}

// Outstanding is the conservation sum of budget id's current window as
// the partition sees it: what holders used or may still spend, plus what
// earlier windows and slots still count (the invariant is Outstanding ≤
// Limit, or a holder overdrew its lease by a reconcile larger than its
// reservation).
func (p *Partition) Outstanding(id string) (outstanding, limit int64, ok bool) {
	i, ok := p.idx[id]
	if !ok {
		return 0, 0, false
	}
	b := p.st.Budgets[i]
	outstanding = b.B.Limit - b.pool()
	for _, h := range b.Cur.Holders {
		outstanding += h.committed()
	}
	return outstanding, b.B.Limit, true
}

// Granted returns what the partition has granted holder of budget id in
// its current window, and the window's start.
func (p *Partition) Granted(id, holder string) (granted, windowStartMs int64, ok bool) {
	i, ok := p.idx[id]
	if !ok {
		return 0, 0, false
	}
	b := p.st.Budgets[i]
	if h := p.holder(&b.Cur, holder, false); h != nil {
		return h.Granted, b.Cur.StartMs, true
	}
	return 0, b.Cur.StartMs, true
}

// MarshalSnapshot returns the partition's state; RestorePartition with
// the same config continues exactly like an uninterrupted run.
func (p *Partition) MarshalSnapshot() ([]byte, error) { return json.Marshal(&p.st) }

// RestorePartition returns the partition of a snapshot under cfg.
func RestorePartition(cfg Config, snap []byte) (*Partition, error) {
	p, err := NewPartition(cfg)
	if err != nil {
		return nil, err
	}
	var st partState
	if err := json.Unmarshal(snap, &st); err != nil {
		return nil, fmt.Errorf("budget snapshot: %w", err)
	}
	// The config decides which budgets exist and their limits; the
	// snapshot, what each has leased.
	have := map[string]*budgetState{}
	for _, b := range st.Budgets {
		have[b.B.ID] = b
	}
	for i, b := range p.st.Budgets {
		if old, ok := have[b.B.ID]; ok {
			old.B = b.B
			p.st.Budgets[i] = old
		}
	}
	p.st.NowMs, p.st.Stats = st.NowMs, st.Stats
	p.reindex()
	return p, nil
}
