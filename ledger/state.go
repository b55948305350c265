package ledger

import (
	"encoding/json"
	"github.com/sluice-dev/sluice/schemas"
)

// Dimension indices; dimIndex maps schemas.Dimension onto them.
const (
	dRequests = iota
	dInput
	dOutput
	dTotal
	dConcurrency
	dRequestsPerDay
	dSpend
	dRamp
	numDims
)

func dimIndex(d schemas.Dimension) (int, bool) {
	switch d {
	case schemas.DimRequests:
		return dRequests, true
	case schemas.DimInputTokens:
		return dInput, true
	case schemas.DimOutputTokens:
		return dOutput, true
	case schemas.DimTotalTokens:
		return dTotal, true
	case schemas.DimConcurrency:
		return dConcurrency, true
	case schemas.DimRequestsPerDay:
		return dRequestsPerDay, true
	case schemas.DimSpend:
		return dSpend, true
	case schemas.DimRamp:
		return dRamp, true
	}
	return 0, false
}

// Refill kind codes.
const (
	kToken uint8 = iota
	kFixed
	kRolling
	kConcurrency
	kRamp
)

func kindCode(s Refill) uint8 {
	switch s {
	case RefillFixed:
		return kFixed
	case RefillRolling:
		return kRolling
	case RefillConcurrency:
		return kConcurrency
	case RefillRamp:
		return kRamp
	}
	return kToken
}

// Reservation states. Words have exactly the meaning of schemas.Status.
const (
	stFree uint8 = iota
	stQueued
	stGranted
	stReconciled
	stReleased
	stExpired // queued past its wait, or granted and abandoned
	stDenied
	stCancelled
)

// Reservation flags.
const (
	fStreaming uint16 = 1 << iota
	fBorrowed
	fWasQueued
	fFallback
	fRejected
	fEmergency
	fRetry
	fGuard   // granted ahead of an earlier-expiring higher-class waiter by the starvation guard
	fOwnWait // the request named its own max wait: a provider cooldown does not extend it
	// fShadowHeld: the grant was charged to the shadow buckets on its path
	// (every one of them covered it), so its settlement credits them back.
	fShadowHeld
	// fRoom: the provider's rate-limit headers on this attempt's response
	// (its ProviderObserved) reported room for it on every dimension they
	// named, so a 429 on it is not explained by the provider's counters.
	fRoom
	// fWaitedOut: a provider pause (cooldown, storm hold) moved this
	// waiter's queue expiry from its max wait to its deadline; a waiter
	// queued behind it for capacity gets the same (visit).
	fWaitedOut
	// fLimitSeen: this attempt's response carried a rate-limit header
	// reporting a limit (ProviderObserved with Limit > 0): a refusal on it
	// is explained by the headers, not a reason for the AIMD decrease
	// (learn.go), unless they also reported room for it (fRoom).
	fLimitSeen
)

// maxPath is the most nodes a path can have: the scope root plus one per
// configured level.
const maxPath = numLevels

// bucket is one (node, dimension) bucket. Units: token and ramp levels are
// scaled by the period (units × PeriodMs) so that continuous refill is exact
// integer arithmetic (capacity scaled-units per ms); fixed and concurrency
// levels are plain units; rolling buckets keep their sums in Rolls.
type bucket struct {
	Spec   int32  `json:"s"`
	Gen    int32  `json:"g"` // config generation the bucket was created in
	Ext    int32  `json:"x"` // index into Rolls (rolling) or Ramps (ramp), else -1
	mark   uint32 // pump epoch that last found the bucket short (fills padding: 48 bytes)
	Level  int64  `json:"l"`
	LastMs int64  `json:"t"` // last refill time (token, ramp) or window index (fixed)
	Base   int64  `json:"b"` // guaranteed-baseline level, scaled like Level
	Held   int64  `json:"h"` // units held by outstanding grants (conservation)
}

// rollState is a rolling window's ring of Slots+1 slot sums: a charge stays
// counted until its whole slot has left the window, so the sum never
// under-counts the last PeriodMs.
type rollState struct {
	Cur  int64   `json:"c"` // absolute index of the newest slot
	Sum  int64   `json:"s"`
	Ring []int64 `json:"r"`
}

// rampState is a ramp governor's current admitted rate and its stress
// statistics over the current and previous period.
type rampState struct {
	Scope   int32        `json:"s"`
	Rate    int64        `json:"r"` // admitted units per period now
	GrowMs  int64        `json:"g"` // un-paused time not yet turned into growth
	Period  int64        `json:"p"` // absolute index of the current stats period
	Grants  [2]int64     `json:"n"` // [current, previous]
	Rejects [2]int64     `json:"j"`
	Lat     [2][16]int64 `json:"h"` // log2 histogram of reconciled total_ms
}

// node is one (scope, level, id) of the hierarchy with its enforced buckets
// Buckets[First : First+N] and its shadow buckets Shadow[SFirst :
// SFirst+SN]. Shadow buckets live in their own slice so that no loop that
// enforces (check, grant, settle, feedback) can ever read them.
type node struct {
	Scope  int32  `json:"s"`
	Lvl    uint8  `json:"v"`
	ID     string `json:"i"`
	First  int32  `json:"f"`
	N      int32  `json:"n"`
	SFirst int32  `json:"sf,omitempty"`
	SN     int32  `json:"sn,omitempty"`
}

type nodeKey struct {
	scope int32
	lvl   uint8
	id    string
}

type resKey struct {
	id      string
	attempt int32
}

// res is one reservation (one attempt of a logical request).
type res struct {
	RequestID string `json:"rid,omitempty"`
	Attempt   int32  `json:"a,omitempty"`
	// rh is resHash(RequestID, Attempt) as reserve computed it, kept in
	// what was padding so that evictDone need not hash the id again; 0
	// (a restored snapshot, never in one) means "hash it".
	rh        uint32
	Node      string         `json:"nd,omitempty"`
	Tenant    string         `json:"tn,omitempty"`
	KeyID     string         `json:"k,omitempty"`
	Team      string         `json:"tm,omitempty"` // the path's team id, for a retry's entitlement check
	Route     string         `json:"rt,omitempty"`
	Class     string         `json:"c,omitempty"`
	Scope     int32          `json:"sc,omitempty"`
	ClassIdx  int32          `json:"ci,omitempty"`
	State     uint8          `json:"st"`
	Flags     uint16         `json:"f,omitempty"`
	NPath     uint8          `json:"np,omitempty"`
	Path      [maxPath]int32 `json:"p"`
	Need      [numDims]int64 `json:"nd8"`
	Cached    int64          `json:"ca,omitempty"`
	MaxOut    int64          `json:"mo,omitempty"` // output a max_tokens_on_arrival bucket charges, ≥ Need[dOutput] (0 in old snapshots: Need[dOutput])
	FP        uint64         `json:"fp,omitempty"`
	Seq       int64          `json:"q,omitempty"`
	Key       int64          `json:"key,omitempty"` // queue order, µs
	Priority  int32          `json:"pr,omitempty"`
	EnqMs     int64          `json:"eq,omitempty"`
	ExpireMs  int64          `json:"ex,omitempty"` // queue deadline
	NotBefore int64          `json:"nb,omitempty"` // retry backoff
	GrantMs   int64          `json:"gm,omitempty"`
	HoldExpMs int64          `json:"he,omitempty"`
	DoneMs    int64          `json:"dm,omitempty"`
	FirstMs   int64          `json:"fm,omitempty"` // log time of the logical request's first attempt
	Deadline  int64          `json:"dl,omitempty"` // absolute, 0 = none
	// SvcMs is the route's expected service time when the attempt arrived
	// (service.go), 0 unknown: it is granted only until Deadline − SvcMs
	// (grantBy). A waiter that arrived unknown takes the route's time when
	// the pump next visits it with the time known (visit).
	SvcMs int64 `json:"sv,omitempty"`
	// FitMs is when the waiter's buckets would next hold it, as the pump
	// last found it waiting (0: unknown or never waited): lateExpiry
	// judges a waiter whose expiry a log-time jump passed by it.
	FitMs  int64 `json:"ft,omitempty"`
	MaxAtt int32 `json:"ma,omitempty"`
	Gen    int32 `json:"g,omitempty"`
	// Bud lists the cross-scope budgets the request spends (budgets.go);
	// nil for the requests of a document without budgets, so that a
	// reservation slot grows by a slice header only.
	Bud  []budRef `json:"bd,omitempty"`
	List int32    `json:"l,omitempty"` // hold list index
	Prev int32    `json:"pv,omitempty"`
	Next int32    `json:"nx,omitempty"`
	// Pump scratch (see pumpPass), never in a snapshot: the pump epoch that
	// visited r, and the one that found r aged ahead of an earlier-expiring
	// waiter of a higher class.
	walked, deferred uint32
}

// holdList links granted reservations of one hold TTL in grant order, which
// is also expiry order.
type holdList struct {
	TTL  int64 `json:"ttl"`
	Head int32 `json:"h"`
	Tail int32 `json:"t"`
}

type flowKey struct {
	class  int32
	tenant string
}

// flowEntry is a flow's virtual finish time in a snapshot.
type flowEntry struct {
	Class  int32  `json:"c"`
	Tenant string `json:"t"`
	LastUs int64  `json:"l"`
}

// scopeState is one provider scope's queue, cooldowns and retry budget.
type scopeState struct {
	Name  string  `json:"name"`
	Queue []int32 `json:"queue"` // reservations sorted by (Key, Seq)
	Depth []int32 `json:"depth"` // queued per class
	// Cooldowns (absolute log ms). Policy closes (quota exhausted) deny;
	// the others make requests wait.
	CoolAll int64 `json:"cool_all,omitempty"`
	// CoolAllOverload: CoolAll was set by a 503 (overload), not a 429.
	CoolAllOverload bool           `json:"cool_all_overload,omitempty"`
	CoolDim         [numDims]int64 `json:"cool_dim"`
	CoolPolicy      int64          `json:"cool_policy,omitempty"`
	RetryMilli      int64          `json:"retry_milli"` // retry credits × 1000
	WakeMs          int64          `json:"wake_ms"`     // next time a pump may change something; 0 none
	Dirty           bool           `json:"dirty,omitempty"`
	// RecoverMs: until then the scope recovers from a provider 429 and
	// holds back waiters whose deadline leaves more than RecoverSlackMs
	// (the storm hold, Config.Cooldown.StormHoldAttempts).
	RecoverMs      int64 `json:"recover_ms,omitempty"`
	RecoverSlackMs int64 `json:"recover_slack_ms,omitempty"`
	// Rescued counts grants made, since an aged waiter of a lower class was
	// last granted, to higher-class waiters that went ahead of it because
	// their expiry was earlier (deadline rescue; at most Config.RescueMax).
	Rescued int32 `json:"rescued,omitempty"`
	// Ratio is the provider's refusal ratio over a trailing window
	// (learn.go).
	Ratio refusalRatio `json:"ratio,omitzero"`
	// Sent is what the scope's grants charge the provider over the
	// trailing minute (learn.go, learnRemaining).
	Sent sentWindow `json:"sent,omitzero"`
	// Flight counts the scope's granted attempts not yet settled.
	Flight int64 `json:"flight,omitempty"`
	// Slow is the scope's slow-start window (learn.go, slowArm): while
	// it is > 0, at most Slow attempts are in flight. 0: none.
	Slow int64 `json:"slow,omitempty"`
	// RefusedMs is the log time of the scope's last refusal that the
	// headers do not explain (learnRefusal); 0: none.
	RefusedMs int64 `json:"refused_ms,omitempty"`
	// Answered: the provider has answered one of the scope's attempts
	// (headers, a 2xx, a refusal), so its capacity is no longer only
	// the configured guess and slow start is not armed.
	Answered    bool        `json:"answered,omitempty"`
	Flows       []flowEntry `json:"flows,omitempty"` // snapshot only
	flows       map[flowKey]int64
	flowsPruned int
}

// Stats counts decisions and lifecycle events since the ledger started.
type Stats struct {
	Granted    int64 `json:"granted"`
	Queued     int64 `json:"queued"`
	Denied     int64 `json:"denied"`
	Expired    int64 `json:"expired"` // queued past max wait
	Abandoned  int64 `json:"abandoned"`
	Cancelled  int64 `json:"cancelled"`
	Conflicts  int64 `json:"conflicts"`
	Reconciled int64 `json:"reconciled"`
	Released   int64 `json:"released"`
	Duplicates int64 `json:"duplicates"`
	Ignored    int64 `json:"ignored"` // events that changed nothing (unknown, bad, stale)
	Borrowed   int64 `json:"borrowed"`
	Retries    int64 `json:"retries"`
	BadConfigs int64 `json:"bad_configs"`
	// NodeLost counts reservations expired because their gateway stopped
	// heartbeating; NodesLost the nodes that were lost holding any.
	NodeLost  int64 `json:"node_lost,omitempty"`
	NodesLost int64 `json:"nodes_lost,omitempty"`
	// UngrantedUsage counts reconciles on reservations this log never
	// granted, whose usage was charged as debt (debt.go).
	UngrantedUsage int64 `json:"ungranted_usage,omitempty"`
}

// state is everything a snapshot holds. Maps are derived indexes rebuilt on
// restore; everything here is slices so that encoding is deterministic.
type state struct {
	Partition int32  `json:"partition"`
	Next      int64  `json:"next_offset"`
	Now       int64  `json:"now_ms"`
	Gen       int32  `json:"gen"`
	Seq       int64  `json:"seq"`
	Config    Config `json:"config"`
	ConfigErr string `json:"config_err,omitempty"`
	// ConfigSeq is the signed sequence of the change in force (0 if it
	// was not signed); an older signed change is refused (snapshot.go).
	ConfigSeq uint64   `json:"config_seq,omitempty"`
	Nodes     []node   `json:"nodes"`
	Buckets   []bucket `json:"buckets"`
	// Shadow holds the shadow buckets (evaluated, never enforced; see
	// shadow.go).
	Shadow []bucket     `json:"shadow,omitempty"`
	Rolls  []rollState  `json:"rolls"`
	Ramps  []rampState  `json:"ramps"`
	Res    []res        `json:"res"`
	Free   []int32      `json:"free"`
	Lists  []holdList   `json:"lists"`
	Done   []int32      `json:"done"` // finished reservations in DoneMs order
	Scopes []scopeState `json:"scopes"`
	Stats  Stats        `json:"stats"`
	// Live lists the nodes that have heartbeated, in first-heartbeat
	// order (liveness.go).
	Live []liveNode `json:"live,omitempty"`
	// Services holds each route's learned service time (service.go), in
	// first-reconcile order.
	Services []serviceStat `json:"services,omitempty"`
	// Learned holds the buckets whose capacity was learned from the
	// provider (learn.go), in first-learned order.
	Learned []learnedCap `json:"learned,omitempty"`
	// BudgetHolders are the scopes' leases of cross-scope budgets
	// (budgets.go), encoded by Freeze; nil in the live state, which keeps
	// them in Ledger.bud.
	BudgetHolders []json.RawMessage `json:"budget_holders,omitempty"`
	// BudgetPartition is the state of the budgets this partition of the
	// request log is the budget partition of, encoded by Freeze.
	BudgetPartition json.RawMessage `json:"budget_partition,omitempty"`
}
