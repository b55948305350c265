package ledger

import (
	"strconv"

	"github.com/sluice-dev/sluice/schemas"
)

// Degraded admissions (docs/ledger-service.md, "Degraded admissions").
// While no ledger answered, a gateway may have admitted a request itself,
// within its share of the capacity this ledger last reported
// (admission/lifecycle, degraded.go). It tells the ledger with an
// emergency ReserveRequested flagged Degraded, produced when the broker
// takes it again (the gateway's retry queue holds it until then). The
// ledger charges it like any emergency admission: granted whatever the
// buckets hold, the estimate debited into debt if need be at the log time
// it is read, and then settled by the request's Reconciled (actual usage
// replaces the estimate; overage is debt like any other, paid back by
// refill). The gateway keeps a request's reports in order through its
// retry queue (admission/reserve), so the Reconciled follows its
// reservation in the log; one that came first would name a reservation the
// log does not know and be ignored, as any such reconcile is. Everything
// is in the log, so replay and explain see it; the decision names it
// (GDDegradedAdmitted, reason ReasonDegradedMode).

// fDegraded marks an emergency admission made in the gateway's degraded
// mode. A high bit, clear of state.go's iota list.
const fDegraded uint16 = 1 << 14

// emitDegraded emits the grant of degraded admission ri, already charged.
func (l *Ledger) emitDegraded(out []Output, ri int32) []Output {
	l.st.Res[ri].Flags |= fDegraded
	out = l.emitGrant(out, ri, schemas.GDDegradedAdmitted)
	out[len(out)-1].Decision.Reason = schemas.ReasonDegradedMode
	return out
}

// LiveNodes is how many gateways this partition counts alive at atMs —
// those whose last heartbeat is within node_liveness_ms of it (or of the
// ledger's own time, if later) — with self counted alive too (a gateway
// asks for itself, and must count even if it had not heartbeated here
// yet). A gateway in degraded mode divides its share of the capacity by
// it.
func (l *Ledger) LiveNodes(atMs int64, self string) int {
	now := max(atMs, l.st.Now)
	n, selfSeen := 0, self == ""
	for _, ln := range l.st.Live {
		if now-ln.LastMs < l.st.Config.NodeLivenessMs {
			n++
			selfSeen = selfSeen || ln.Node == self
		}
	}
	if !selfSeen {
		n++
	}
	return n
}

// degradedNote says in words what a degraded admission's reservation was,
// for explain: when the gateway admitted it, and that the ledger charged
// it when it read it.
func degradedNote(ev *schemas.Event, logMs int64) string {
	rr := ev.ReserveRequested
	if rr == nil || !rr.Degraded {
		return ""
	}
	s := "degraded admission: gateway " + ev.Node + " admitted it itself while no ledger answered"
	if ev.ProducedAtMs > 0 && logMs >= ev.ProducedAtMs {
		s += ", " + strconv.FormatInt(logMs-ev.ProducedAtMs, 10) + " ms before this ledger read it"
	}
	return s + "; charged now, into debt if its buckets cannot cover it"
}
