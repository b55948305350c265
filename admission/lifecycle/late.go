package lifecycle

import (
	"fmt"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/schemas"
)

// Late grants (DESIGN.md §11). The provider counts in wall time, the
// ledger in log time. After a stall (a ledger killed and taken over, a
// broker restart) the ledger works through the backlog at once, and grants
// it paced in log time reach their gateways within a few hundred
// milliseconds of wall time: dispatched, they hit the provider as a burst
// (11–26 provider 429s in the stall tests). So a grant that arrives more
// than the class's late-grant bound after the ledger decided it is not
// dispatched: the gateway releases it (reason late_grant) and reserves
// again, which the ledger decides at the current log time, or — when the
// deadline leaves no room or it already did so lateGrantRetriesMax times —
// answers the client with late_grant.

// lateGrantRetriesMax bounds the new reservations one request makes for
// late grants: a ledger that keeps answering late is refused, not chased.
const lateGrantRetriesMax = 2

// lateVerdict is what to do with a grant.
type lateVerdict int

const (
	grantInTime lateVerdict = iota // dispatch it
	lateReserve                    // release it and reserve again
	lateRefuse                     // release it and answer late_grant
)

// judgeGrant decides on grant d reaching the gateway at nowMs (unix ms,
// the gateway's clock, which shares the broker's log-append clock up to NTP
// skew). boundMs is the class's late-grant bound; deadlineAtMs is when the
// request's deadline passes (0: none); retries is how many late grants the
// request already reserved again for. A new reservation is worth it only if
// the deadline leaves at least one bound for it to come back.
func judgeGrant(d schemas.Decision, nowMs, boundMs, deadlineAtMs int64, retries int) lateVerdict {
	if d.Status != schemas.StatusGranted || d.LogTimeMs <= 0 || d.GatewayDecision == schemas.GDEmergencyAdmitted {
		return grantInTime // not the ledger's log-time decision
	}
	if nowMs-d.LogTimeMs <= boundMs {
		return grantInTime
	}
	if retries >= lateGrantRetriesMax || (deadlineAtMs > 0 && deadlineAtMs-nowMs <= boundMs) {
		return lateRefuse
	}
	return lateReserve
}

// lateGrantError is the error contract for a late grant that could not be
// replaced in time: the governor's own delay, so 503 with Retry-After.
func lateGrantError(lateMs, boundMs int64) *apierr.Error {
	e := apierr.New(503, apierr.CodeLateGrant,
		fmt.Sprintf("the quota ledger's grant reached the gateway %d ms after it was decided (bound %d ms): dispatching it late would burst the provider, and no new grant fits the request's deadline; retry shortly", lateMs, boundMs))
	e.Sluice.Type = "local_limit"
	e.Sluice.RetryAfterMs = 1000
	e.Sluice.GatewayDecision = schemas.GDLateGrant
	return e
}
