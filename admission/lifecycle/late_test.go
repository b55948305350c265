package lifecycle

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/schemas"
)

// TestJudgeGrant: a grant is dispatched when it reaches the gateway within
// its bound of the ledger's log time; a later one is reserved again while
// the deadline leaves a bound's room and the request has not done so
// lateGrantRetriesMax times, and refused otherwise. Times are injected.
func TestJudgeGrant(t *testing.T) {
	granted := func(logMs int64) schemas.Decision {
		return schemas.Decision{Status: schemas.StatusGranted, LogTimeMs: logMs, GatewayDecision: schemas.GDQueuedThenAdmitted}
	}
	const bound = 300
	tests := []struct {
		name       string
		d          schemas.Decision
		nowMs      int64
		deadlineAt int64
		retries    int
		want       lateVerdict
	}{
		{"in time", granted(10_000), 10_050, 0, 0, grantInTime},
		{"at the bound", granted(10_000), 10_300, 0, 0, grantInTime},
		{"gateway clock behind the broker's", granted(10_000), 9_990, 0, 0, grantInTime},
		{"late, no deadline", granted(10_000), 10_301, 0, 0, lateReserve},
		{"late, deadline leaves room", granted(10_000), 12_000, 12_301, 0, lateReserve},
		{"late, deadline too close", granted(10_000), 12_000, 12_300, 0, lateRefuse},
		{"late, deadline passed", granted(10_000), 12_000, 11_000, 0, lateRefuse},
		{"late again after retries", granted(10_000), 12_000, 0, lateGrantRetriesMax, lateRefuse},
		{"late, one retry left", granted(10_000), 12_000, 0, lateGrantRetriesMax - 1, lateReserve},
		{"emergency grant has no log time", schemas.Decision{Status: schemas.StatusGranted, GatewayDecision: schemas.GDEmergencyAdmitted}, 12_000, 0, 0, grantInTime},
		{"not a grant", schemas.Decision{Status: schemas.StatusDenied, LogTimeMs: 1}, 12_000, 0, 0, grantInTime},
	}
	for _, tc := range tests {
		if got := judgeGrant(tc.d, tc.nowMs, bound, tc.deadlineAt, tc.retries); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	e := lateGrantError(2000, bound)
	if e.Status != 503 || e.Code != "late_grant" || e.Sluice.GatewayDecision != schemas.GDLateGrant || e.Sluice.RetryAfterMs <= 0 {
		t.Errorf("error contract %+v", e)
	}
}

// TestDecisionErrorStatus: a refusal no retry can fix is not a 429, so
// SDKs do not retry it; capacity and policy refusals are.
func TestDecisionErrorStatus(t *testing.T) {
	ev := &schemas.Event{Scope: "openai-main", Class: "interactive"}
	for _, tc := range []struct {
		name   string
		d      schemas.Decision
		status int
		code   string
	}{
		{"capacity", schemas.Decision{Status: schemas.StatusDenied, Reason: "over_limit", LimitDimension: schemas.DimRequests, RetryClass: schemas.RetryCapacity}, 429, apierr.CodeRateLimited},
		{"policy", schemas.Decision{Status: schemas.StatusDenied, Reason: "daily_quota", RetryClass: schemas.RetryPolicy}, 429, apierr.CodeInsufficientQuota},
		{"expired", schemas.Decision{Status: schemas.StatusExpired}, 429, apierr.CodeQueueTimeout},
		{"path missing level", schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonPathMissingLevel, LimitPath: "deployment", RetryClass: schemas.RetryRequestError}, 403, apierr.CodePathMissingLevel},
		{"deadline below service time", schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonDeadlineBelowService, Needed: 900, Available: 400, RetryClass: schemas.RetryDeadline}, 429, apierr.CodeDeadlineBelowService},
		// Queued until the deadline left less than the service time: the
		// same code, not a queue timeout.
		{"expired below service time", schemas.Decision{Status: schemas.StatusExpired, Reason: schemas.ReasonDeadlineBelowService, Needed: 1700, Available: 250, RetryClass: schemas.RetryDeadline, GatewayDecision: schemas.GDQueuedThenExpired}, 429, apierr.CodeDeadlineBelowService},
		{"expired on max wait", schemas.Decision{Status: schemas.StatusExpired, Reason: schemas.ReasonMaxWaitExceeded, RetryClass: schemas.RetryCapacity, GatewayDecision: schemas.GDQueuedThenExpired}, 429, apierr.CodeQueueTimeout},
		{"path unknown id", schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonPathUnknownID, LimitPath: "deployment:evil", RetryClass: schemas.RetryRequestError}, 403, apierr.CodePathUnknownID},
		// The ledger's entitlement refusals are the gateway's 403s.
		{"class not entitled", schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonClassNotEntitled, LimitPath: "tenant:batchco", RetryClass: schemas.RetryRequestError}, 403, apierr.CodeClassNotEntitled},
		{"priority not entitled", schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonPriorityNotEntitled, LimitPath: "team:etl", RetryClass: schemas.RetryRequestError}, 403, apierr.CodePriorityNotEntitled},
		{"model not allowed", schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonModelNotAllowed, LimitPath: "key:batch-key", RetryClass: schemas.RetryRequestError}, 403, apierr.CodeModelNotAllowed},
	} {
		e := decisionError(tc.d, ev)
		if e.Status != tc.status || e.Code != tc.code {
			t.Errorf("%s: got %d %s, want %d %s", tc.name, e.Status, e.Code, tc.status, tc.code)
		}
		if tc.status == 403 && (!e.Final() || SDKRetriesError(e) || e.Sluice.LimitPath != tc.d.LimitPath) {
			t.Errorf("%s: final %v, SDKs retry %v, limit_path %q: a 403 no retry can fix", tc.name, e.Final(), SDKRetriesError(e), e.Sluice.LimitPath)
		}
	}
	e := decisionError(schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonClassNotEntitled, LimitPath: "tenant:batchco"}, ev)
	if want := `class "interactive" is not among the classes tenant batchco may use`; !strings.Contains(e.Message, want) {
		t.Errorf("message %q, want it to name the holder (%s)", e.Message, want)
	}
}
