package schemas

// The lease protocol of cross-scope budgets (DESIGN.md §2, ledger/budget).
//
// A budget (a tenant's daily spend over every provider, say) has exactly
// one writer, its budget partition. Scope partitions, which decide the
// requests of one provider scope each, hold leases: shares of a budget
// that they spend without a round trip. Every message carries cumulative
// counters of the current window, never deltas, so a lost, duplicated or
// reordered message is healed by the next one: the receiver keeps the
// newest (highest Seq) and a counter never has to be added twice.
//
// The conservation rule the counters serve: a holder may charge only while
// Used ≤ Granted − Returned, and the budget partition grants only while the
// sum over holders of max(Granted − Returned, Used) stays within the
// budget's limit. A holder counts a return before it is sent and the
// budget partition counts a grant before it is sent, so each side's view
// of what is outstanding is never smaller than the truth.

// LeaseRequested is a scope partition asking a budget partition for (more
// of) a budget, with its counters. Key: the budget partition's key (the
// budget id).
type LeaseRequested struct {
	Budget string `json:"budget"` // budget id (ledger/budget Budget.ID)
	Holder string `json:"holder"` // the scope that holds the lease
	// WindowStartMs is the start of the budget window the counters are
	// for, in the holder's log time.
	WindowStartMs int64 `json:"window_start_ms"`
	// Seq numbers the holder's lease messages for this budget (monotone
	// over the holder's life, across windows); the budget partition ignores
	// a message whose Seq is not above the last it applied.
	Seq int64 `json:"seq"`
	// Granted is the highest LeaseGranted.Granted the holder has applied
	// in this window; Returned what it has returned in it (cumulative);
	// Used what it has charged in it and not released (holds plus
	// reconciled usage).
	Granted  int64 `json:"granted"`
	Returned int64 `json:"returned"`
	Used     int64 `json:"used"`
	// Demand is how much the holder wants to hold unused for its next
	// lease term (queued requests plus its recent rate), in budget units.
	Demand int64 `json:"demand"`
	// Need is the smallest cost among the holder's queued requests (0:
	// none): what it must hold to admit anything at all.
	Need int64 `json:"need,omitempty"`
}

// LeaseGranted is a budget partition's answer to a holder: the holder's
// cumulative grant and fair share. It also acknowledges returns, revises a
// share down (the holder then returns what it holds above Target) and says
// when the budget has nothing left for the holder's need. Key: the
// holder's scope, so it lands in the scope partition that holds the lease.
type LeaseGranted struct {
	Budget        string `json:"budget"`
	Holder        string `json:"holder"`
	WindowStartMs int64  `json:"window_start_ms"`
	// Seq numbers the budget partition's messages to this holder.
	Seq int64 `json:"seq"`
	// AckSeq is the highest holder Seq the budget partition has applied:
	// a holder resends its counters while AckSeq is behind them.
	AckSeq int64 `json:"ack_seq"`
	// Granted is the cumulative amount granted to the holder in this
	// window after this message; Amount is what this message added.
	Granted int64 `json:"granted"`
	Amount  int64 `json:"amount,omitempty"`
	// Target is the holder's fair share as Granted − Returned: what it
	// holds above max(Target, Used) it returns at once.
	Target int64 `json:"target"`
	// Available is what the whole budget had not used (by every holder's
	// last report) when this was sent: a request that costs more is denied
	// budget_exhausted without another round trip.
	Available int64 `json:"available"`
	// TermMs is the lease term: the holder returns what it holds unused
	// TermMs of its log time after applying this, unless it has demand.
	TermMs int64 `json:"term_ms"`
	// WindowEndMs is when the window ends (holders roll their counters
	// then, by their own log time).
	WindowEndMs int64 `json:"window_end_ms"`
}

// LeaseReturned is a holder giving back what it holds unused (its term
// ended without demand, its share was revised down, or the window rolled),
// with its counters after the return. Key: the budget id.
type LeaseReturned struct {
	Budget        string `json:"budget"`
	Holder        string `json:"holder"`
	WindowStartMs int64  `json:"window_start_ms"`
	Seq           int64  `json:"seq"`
	Granted       int64  `json:"granted"`
	Returned      int64  `json:"returned"`
	Used          int64  `json:"used"`
	// Reason: term_ended, share_revised, window_rolled.
	Reason string `json:"reason,omitempty"`
}

// Lease return reasons (LeaseReturned.Reason).
const (
	LeaseTermEnded    = "term_ended"
	LeaseShareRevised = "share_revised"
	LeaseWindowRolled = "window_rolled"
)
