package ledger

import (
	"strings"

	"github.com/sluice-dev/sluice/schemas"
)

// Shadow limits. A bucket (or every bucket of a scope) marked shadow is
// stamped into its node's Shadow range instead of Buckets, so the loops that
// enforce (check, grantFast, grant, settle, drain, pump marks) never see it.
// At each grant the shadow buckets on the path are evaluated in path order:
// if every one covers the grant, all of them are debited and the
// reservation is flagged fShadowHeld, so that its reconcile, release or
// expiry credits them as settle does the enforced ones; if one cannot, none
// is debited (all-or-nothing, as an enforced grant) and the decision records
// which one and why. The shadow level is thus the level the bucket would
// have if enforced, given the grants that really happened.

// shadowGrant evaluates and charges the shadow buckets on the path of the
// just-granted reservation ri. It returns nil when the path has none.
// Emergency admissions are charged whatever the verdict, as their enforced
// buckets are.
func (l *Ledger) shadowGrant(ri int32) *schemas.ShadowVerdict {
	r := &l.st.Res[ri]
	now := l.st.Now
	var sv *schemas.ShadowVerdict
	var count int32
	for _, ni := range r.Path[:r.NPath] {
		n := &l.st.Nodes[ni]
		for bi := n.SFirst; bi < n.SFirst+n.SN; bi++ {
			b := &l.st.Shadow[bi]
			sp := &l.cc.specs[b.Spec]
			l.refill(b, sp, now)
			a := sp.amount(r)
			if a <= 0 {
				continue
			}
			count++
			if sv != nil {
				continue
			}
			switch {
			case a > sp.maxUnits:
				sv = l.shadowLimited(r, ni, sp, schemas.ReasonExceedsCapacity, a, sp.maxUnits)
			case !l.fits(b, sp, a, 0):
				sv = l.shadowLimited(r, ni, sp, schemas.ReasonCapacity, a, l.available(b, sp))
			}
		}
	}
	if count == 0 {
		return nil
	}
	if sv == nil {
		sv = &schemas.ShadowVerdict{}
	}
	sv.Buckets = count
	if !sv.Limited || r.Flags&fEmergency != 0 {
		l.shadowDebit(r)
	}
	return sv
}

func (l *Ledger) shadowLimited(r *res, ni int32, sp *spec, why schemas.Reason, needed, avail int64) *schemas.ShadowVerdict {
	return &schemas.ShadowVerdict{
		Limited: true, Reason: why, LimitPath: l.shadowPath(r, ni),
		LimitDimension: dimension(sp.dim), Needed: needed, Available: avail,
	}
}

// shadowDebit charges every shadow bucket on r's path and flags r so that
// its settlement credits them back.
func (l *Ledger) shadowDebit(r *res) {
	now := l.st.Now
	for _, ni := range r.Path[:r.NPath] {
		n := &l.st.Nodes[ni]
		for bi := n.SFirst; bi < n.SFirst+n.SN; bi++ {
			b := &l.st.Shadow[bi]
			sp := &l.cc.specs[b.Spec]
			if a := sp.amount(r); a > 0 {
				b.Held += a
				l.debit(b, sp, min(a, sp.maxUnits), now)
			}
		}
	}
	r.Flags |= fShadowHeld
}

// shadowSettle is settle for the shadow buckets of a grant that charged
// them: each gets back its estimate minus the actual usage.
func (l *Ledger) shadowSettle(r *res, actual *[numDims]int64, cached int64, sent bool) {
	now := l.st.Now
	for _, ni := range r.Path[:r.NPath] {
		n := &l.st.Nodes[ni]
		for bi := n.SFirst; bi < n.SFirst+n.SN; bi++ {
			b := &l.st.Shadow[bi]
			if b.Gen > r.Gen {
				continue // created after the grant: never debited
			}
			sp := &l.cc.specs[b.Spec]
			a := sp.amount(r)
			if a <= 0 {
				continue
			}
			act := actual[sp.dim]
			if sp.exclCached {
				act = max(0, act-cached)
			}
			// As settle counts for the enforced buckets.
			if sp.arrival && sent {
				act = max(act, a)
			}
			if sp.refundUnsent && !sent {
				act = 0
			}
			b.Held -= a
			l.refill(b, sp, now)
			l.credit(b, sp, a-act, r.GrantMs, now)
		}
	}
	r.Flags &^= fShadowHeld
}

// shadowPath renders r's path up to node ni with every node, including
// those that hold shadow buckets only.
func (l *Ledger) shadowPath(r *res, ni int32) string {
	var sb strings.Builder
	for i := 0; i < int(r.NPath); i++ {
		n := &l.st.Nodes[r.Path[i]]
		if i > 0 {
			sb.WriteByte('/')
		}
		sb.WriteString(levelNames[n.Lvl])
		sb.WriteByte(':')
		sb.WriteString(n.ID)
		if r.Path[i] == ni {
			break
		}
	}
	return sb.String()
}
