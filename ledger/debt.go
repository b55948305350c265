package ledger

import "github.com/sluice-dev/sluice/schemas"

// Usage on a reservation this log did not grant (docs/ledger-service.md,
// "Acting on produced decisions"). Gateways act on a decision as soon as it
// is produced, before its transaction commits. If that transaction aborts,
// the next owner re-derives the round; a ledger of the same version decides
// identically, but one of another version may not: the gateway may then
// have dispatched on a grant that the committed log denies, queues, or
// cancels. Its usage was spent at the provider all the same, so the
// ledger charges it to the reservation's buckets, which may go below zero
// (debt, paid back by refill like any overage), and counts it in
// Stats.UngrantedUsage. The re-deriving ledger applies the same
// ReserveRequested, so it knows the reservation unless its version refuses
// the request before creating one (a malformed or unknown-scope refusal):
// such a reconcile has no path to charge and is ignored, as any reconcile of
// an unknown reservation is (applying it twice must change nothing, so it
// cannot be counted in the state either).

// fUsageCharged marks a never-granted reservation whose reported usage was
// charged, so that a redelivered Reconciled charges nothing more.
const fUsageCharged uint16 = 1 << 15

// neverGranted reports whether r ended (or waits) without this log ever
// granting it: a grant sets HoldExpMs, and nothing clears it.
func neverGranted(r *res) bool {
	switch r.State {
	case stQueued, stDenied, stCancelled:
		return true
	case stExpired:
		return r.HoldExpMs == 0 // queued past its wait, not an abandoned hold
	}
	return false
}

// chargeUngranted charges the usage rc reported on reservation ri, which
// this log never granted, to every bucket of its path.
func (l *Ledger) chargeUngranted(ri int32, rc *schemas.Reconciled) {
	r := &l.st.Res[ri]
	if r.Flags&fUsageCharged != 0 {
		return // redelivered
	}
	r.Flags |= fUsageCharged
	l.st.Stats.UngrantedUsage++
	in := max(0, min(rc.InputTokens, maxAmount))
	o := max(0, min(rc.OutputTokens, maxAmount))
	cached := max(0, min(rc.CachedInputTokens, in))
	actual := [numDims]int64{
		dRequests: 1, dInput: in, dOutput: o, dTotal: in + o,
		dRequestsPerDay: 1, dSpend: max(0, min(rc.SpendMicros, maxAmount)), dRamp: 1,
	}
	now := l.st.Now
	for _, ni := range r.Path[:r.NPath] {
		n := &l.st.Nodes[ni]
		for bi := n.First; bi < n.First+n.N; bi++ {
			b := &l.st.Buckets[bi]
			sp := &l.cc.specs[b.Spec]
			act := actual[sp.dim]
			if sp.exclCached {
				act = max(0, act-cached)
			}
			if act <= 0 {
				continue
			}
			l.refill(b, sp, now)
			l.debit(b, sp, act, now)
		}
	}
	if len(r.Bud) > 0 {
		l.budgetChargeUngranted(r, &actual)
	}
	l.st.Scopes[r.Scope].Dirty = true
}
