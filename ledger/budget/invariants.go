package budget

import (
	"fmt"

	"github.com/sluice-dev/sluice/internal/invariants"
)

// checkStep panics when the partition breaks an invariant after the step
// named step, in a build with -tags invariants; without the tag the call
// sits behind a false constant and compiles to nothing. The checks are
// what the partition itself guarantees whatever its holders report: the
// state's order (a snapshot must be byte-identical across replicas), the
// window bookkeeping, and counters that only grow.
func (p *Partition) checkStep(step string) {
	if err := p.checkInvariants(); err != nil {
		panic(fmt.Sprintf("budget partition invariant broken after %s at %d ms: %v", step, p.st.NowMs, err))
	}
}

func (p *Partition) checkInvariants() error {
	if len(p.idx) != len(p.st.Budgets) {
		return fmt.Errorf("index holds %d budgets, state %d", len(p.idx), len(p.st.Budgets))
	}
	for i, b := range p.st.Budgets {
		if i > 0 && p.st.Budgets[i-1].B.ID >= b.B.ID {
			return fmt.Errorf("budgets not in id order at %d (%q)", i, b.B.ID)
		}
		if p.idx[b.B.ID] != i {
			return fmt.Errorf("budget %q indexed at %d, stands at %d", b.B.ID, p.idx[b.B.ID], i)
		}
		if err := p.checkBudget(b); err != nil {
			return fmt.Errorf("budget %q: %w", b.B.ID, err)
		}
	}
	st := p.st.Stats
	if st.Requests < 0 || st.Returns < 0 || st.Stale < 0 || st.Unknown < 0 || st.Grants < 0 || st.GrantedTotal < 0 {
		return fmt.Errorf("a counter went negative: %+v", st)
	}
	return nil
}

func (p *Partition) checkBudget(b *budgetState) error {
	if b.Cur.EndMs != 0 && (b.Cur.StartMs >= b.Cur.EndMs || p.st.NowMs >= b.Cur.EndMs) {
		return fmt.Errorf("current window [%d, %d) does not lie ahead of now %d", b.Cur.StartMs, b.Cur.EndMs, p.st.NowMs)
	}
	if b.Prev != nil && b.Prev.EndMs != b.Cur.StartMs {
		return fmt.Errorf("previous window ends at %d, the current starts at %d", b.Prev.EndMs, b.Cur.StartMs)
	}
	if b.B.Window != WindowRolling && len(b.History) > 0 {
		return fmt.Errorf("a %s window keeps %d slots of history", b.B.Window, len(b.History))
	}
	if b.B.Window == WindowRolling && int64(len(b.History)) > b.B.Slots {
		return fmt.Errorf("history holds %d slots, a rolling window has %d", len(b.History), b.B.Slots)
	}
	for i, s := range b.History {
		if s.StartMs >= b.Cur.StartMs || (i > 0 && b.History[i-1].StartMs >= s.StartMs) {
			return fmt.Errorf("history slot %d (start %d) out of order", i, s.StartMs)
		}
	}
	for i := 1; i < len(b.Seqs); i++ {
		if b.Seqs[i-1].Holder >= b.Seqs[i].Holder {
			return fmt.Errorf("holder sequences not in name order at %d (%q)", i, b.Seqs[i].Holder)
		}
	}
	if err := p.checkWindow(&b.Cur); err != nil {
		return fmt.Errorf("current window: %w", err)
	}
	if b.Prev != nil {
		if err := p.checkWindow(b.Prev); err != nil {
			return fmt.Errorf("previous window: %w", err)
		}
	}
	return nil
}

func (p *Partition) checkWindow(w *windowState) error {
	if len(w.Holders) > p.cfg.HoldersMax {
		return fmt.Errorf("%d holders, holders_max %d", len(w.Holders), p.cfg.HoldersMax)
	}
	for i, h := range w.Holders {
		if i > 0 && w.Holders[i-1].Name >= h.Name {
			return fmt.Errorf("holders not in name order at %d (%q)", i, h.Name)
		}
		if h.Returned < 0 || h.Returned > h.Granted || h.Used < 0 {
			return fmt.Errorf("holder %q: granted %d, returned %d, used %d (returned only lags a grant)", h.Name, h.Granted, h.Returned, h.Used)
		}
	}
	return nil
}

// checkStep panics when the holder breaks an invariant after the step
// named step, in a build with -tags invariants (see Partition.checkStep).
func (h *Holder) checkStep(step string) {
	if err := h.checkInvariants(); err != nil {
		panic(fmt.Sprintf("budget holder %q invariant broken after %s at %d ms: %v", h.st.Name, step, h.st.NowMs, err))
	}
}

func (h *Holder) checkInvariants() error {
	if len(h.idx) != len(h.st.Leases) {
		return fmt.Errorf("index holds %d leases, state %d", len(h.idx), len(h.st.Leases))
	}
	for i, l := range h.st.Leases {
		if i > 0 && h.st.Leases[i-1].B.ID >= l.B.ID {
			return fmt.Errorf("leases not in budget order at %d (%q)", i, l.B.ID)
		}
		if h.idx[l.B.ID] != i {
			return fmt.Errorf("lease %q indexed at %d, stands at %d", l.B.ID, h.idx[l.B.ID], i)
		}
		switch {
		case l.EndMs != 0 && (l.StartMs >= l.EndMs || h.st.NowMs >= l.EndMs):
			return fmt.Errorf("lease %q: window [%d, %d) does not lie ahead of now %d", l.B.ID, l.StartMs, l.EndMs, h.st.NowMs)
		case l.Returned < 0 || l.Returned > l.Granted || l.Used < 0:
			return fmt.Errorf("lease %q: granted %d, returned %d, used %d (it returns only what it holds)", l.B.ID, l.Granted, l.Returned, l.Used)
		case l.Acked > l.Seq || l.Seq < 0:
			return fmt.Errorf("lease %q: acked %d beyond its last message %d", l.B.ID, l.Acked, l.Seq)
		case l.PrevReturned > l.PrevGranted:
			return fmt.Errorf("lease %q: previous window returned %d of %d granted", l.B.ID, l.PrevReturned, l.PrevGranted)
		}
	}
	return nil
}

// invariantsOn lets the hooks read `if invariantsOn { defer … }`: with the
// tag off the branch, defer and all, is dead code the compiler drops.
const invariantsOn = invariants.Enabled
