package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// BudgetReport is one cross-scope budget (ledger.budget) over a --brokers
// run, read from the committed log: the budget's config (the last
// ConfigChanged), the lease messages between its budget partition and the
// scope partitions that hold it, and the granted decisions of the requests
// it covers. It answers issue 23's questions: spent against the limit (0
// overspend), the share of the budget used, and how long each scope waited
// for its first lease after its first request (a demand shift's follow
// time).
type BudgetReport struct {
	ID    string `json:"id"`
	Unit  string `json:"unit"`
	Limit int64  `json:"limit"`
	// Spent is what the budget's holders reported as used: the sum over
	// holders and over the budget's windows of Used in their newest lease
	// message of the window (by Seq). A rolling budget (a split scope's
	// provider limit) counts in windows of one slot each, so the newest
	// message alone is one slot's use.
	Spent int64 `json:"spent"`
	// RollingMs is a rolling budget's period (0: a calendar window), and
	// PeakSpent the most the holders used in any RollingMs: what the
	// limit bounds, where Spent sums the whole run.
	RollingMs int64 `json:"rolling_ms,omitempty"`
	PeakSpent int64 `json:"peak_spent,omitempty"`
	// GrantedAttempts counts the granted attempts whose path names the
	// budget's level and subject and that were not given back (released
	// without usage, refused by the provider, retried, or their hold
	// expired): with unit requests, each is
	// one unit spent, a check on Spent that does not depend on the
	// holders' reports.
	GrantedAttempts int64 `json:"granted_attempts"`
	// Overspend is max(0, max(Spent, GrantedAttempts for unit requests) −
	// Limit) (a rolling budget: PeakSpent − Limit, as its attempts are not
	// counted by window): must be 0.
	Overspend int64 `json:"overspend"`
	// UsedPct is 100 × Spent ÷ Limit (a rolling budget: PeakSpent ÷ Limit).
	UsedPct float64 `json:"used_pct"`
	// Granted and Returned are the sums over holders of their cumulative
	// lease counters at the end of the log.
	Granted  int64 `json:"granted"`
	Returned int64 `json:"returned"`
	// LeaseMessages counts LeaseRequested, LeaseGranted, LeaseReturned.
	LeaseMessages int `json:"lease_messages"`
	// FallbackRequests counts the requests of the budget's subject whose
	// attempts went to more than one scope (a route's fallback), and
	// FallbackCharged the attempts among them charged to the budget
	// through a scope other than their first attempt's (granted, not
	// given back): each attempt spends the same budget, through the
	// lease of the scope it ran in.
	FallbackRequests int            `json:"fallback_requests"`
	FallbackCharged  int64          `json:"fallback_charged"`
	Holders          []BudgetHolder `json:"holders"`
}

// BudgetHolder is one scope's side of a budget.
type BudgetHolder struct {
	Scope           string `json:"scope"`
	Spent           int64  `json:"spent"`
	GrantedAttempts int64  `json:"granted_attempts"`
	Granted         int64  `json:"granted"`
	Returned        int64  `json:"returned"`
	// FallbackAttempts are the attempts on this scope that followed an
	// attempt of the same request on another scope; FallbackCharged
	// those granted and not given back (spent through this scope's
	// lease).
	FallbackAttempts int64 `json:"fallback_attempts"`
	FallbackCharged  int64 `json:"fallback_charged"`
	// FirstRequestMs is the first attempt of the budget's subject on the
	// scope, FirstLeaseMs the first LeaseGranted with an amount to it,
	// both from the run start (log time); FollowMs is their difference:
	// how long the scope's new demand waited for a share of the budget
	// (-1: no lease).
	FirstRequestMs int64 `json:"first_request_ms"`
	FirstLeaseMs   int64 `json:"first_lease_ms"`
	FollowMs       int64 `json:"follow_ms"`
}

// budgetAudit collects a run's budget records while the log is read.
type budgetAudit struct {
	start   time.Time
	ledger  []byte // the newest ConfigChanged's ledger document
	holders map[[2]string]*holderSeen
	msgs    map[string]int
	// paths of the run's attempts (request id, attempt) and their scope.
	paths   map[attemptKey]attemptPath
	granted map[attemptKey]bool
	// givenBack are granted attempts released without usage (or whose
	// hold expired): their charge went back to the lease.
	givenBack map[attemptKey]bool
	// retries are attempts that carry no path of their own: they take
	// their previous attempt's.
	retries []retryOf
}

type retryOf struct {
	key  attemptKey
	prev int32
	at   attemptPath
}

type attemptKey struct {
	id string
	n  int32
}

type attemptPath struct {
	scope string
	path  []schemas.PathLevel
	ms    int64
}

// holderSeen is one holder's lease counters of a budget, window by
// window (by WindowStartMs: the counters start again in each).
type holderSeen struct {
	windows      map[int64]*windowSeen
	firstLeaseMs int64
}

type windowSeen struct {
	seq                    int64
	used, returned, grantd int64
}

func (h *holderSeen) window(startMs int64) *windowSeen {
	w := h.windows[startMs]
	if w == nil {
		w = &windowSeen{}
		h.windows[startMs] = w
	}
	return w
}

func newBudgetAudit(start time.Time) *budgetAudit {
	return &budgetAudit{start: start, holders: map[[2]string]*holderSeen{}, msgs: map[string]int{},
		paths: map[attemptKey]attemptPath{}, granted: map[attemptKey]bool{},
		givenBack: map[attemptKey]bool{}}
}

func (b *budgetAudit) holder(budget, scope string) *holderSeen {
	k := [2]string{budget, scope}
	h := b.holders[k]
	if h == nil {
		h = &holderSeen{windows: map[int64]*windowSeen{}, firstLeaseMs: -1}
		b.holders[k] = h
	}
	return h
}

// add takes one committed record (its log time ts).
func (b *budgetAudit) add(ev *schemas.Event, ts time.Time) {
	ms := ts.Sub(b.start).Milliseconds()
	switch {
	case ev.ConfigChanged != nil:
		b.ledger = ev.ConfigChanged.Ledger
	case ev.ReserveRequested != nil:
		b.paths[attemptKey{ev.RequestID, ev.Attempt}] = attemptPath{scope: ev.Scope, path: ev.ReserveRequested.Path, ms: ms}
	case ev.Released != nil:
		// A release without usage gives the attempt's charge back
		// (Holder.Adjust); one with partial usage keeps it.
		if ev.Released.InputTokens == 0 && ev.Released.OutputTokens == 0 {
			b.givenBack[attemptKey{ev.RequestID, ev.Attempt}] = true
		}
	case ev.ProviderRejected != nil:
		// A provider refusal settles the grant as never sent: the
		// ledger gives its charge back to the lease (settle, sent
		// false).
		b.givenBack[attemptKey{ev.RequestID, ev.Attempt}] = true
	case ev.RetryRequested != nil:
		b.givenBack[attemptKey{ev.RequestID, ev.RetryRequested.PreviousAttempt}] = true
		b.retries = append(b.retries, retryOf{attemptKey{ev.RequestID, ev.Attempt}, ev.RetryRequested.PreviousAttempt, attemptPath{scope: ev.Scope, ms: ms}})
	case ev.Decision != nil:
		switch k := (attemptKey{ev.RequestID, ev.Attempt}); ev.Decision.Status {
		case schemas.StatusGranted:
			b.granted[k] = true
		case schemas.StatusHoldExpired:
			b.givenBack[k] = true
		}
	case ev.LeaseRequested != nil:
		m := ev.LeaseRequested
		b.msgs[m.Budget]++
		if w := b.holder(m.Budget, m.Holder).window(m.WindowStartMs); m.Seq > w.seq {
			w.seq, w.used, w.returned = m.Seq, m.Used, m.Returned
		}
	case ev.LeaseReturned != nil:
		m := ev.LeaseReturned
		b.msgs[m.Budget]++
		if w := b.holder(m.Budget, m.Holder).window(m.WindowStartMs); m.Seq > w.seq {
			w.seq, w.used, w.returned = m.Seq, m.Used, m.Returned
		}
	case ev.LeaseGranted != nil:
		m := ev.LeaseGranted
		b.msgs[m.Budget]++
		h := b.holder(m.Budget, m.Holder)
		w := h.window(m.WindowStartMs)
		w.grantd = max(w.grantd, m.Granted)
		if m.Amount > 0 && (h.firstLeaseMs < 0 || ms < h.firstLeaseMs) {
			h.firstLeaseMs = ms
		}
	}
}

// budgetDef is one budget of the run's ledger config, as far as the
// audit needs it.
type budgetDef struct {
	ID      string `json:"id"`
	Level   string `json:"level"`
	Subject string `json:"subject"`
	Unit    string `json:"unit"`
	Limit   int64  `json:"limit"`
	// Window and RollingMs: a rolling budget counts over any RollingMs.
	Window    string `json:"window"`
	RollingMs int64  `json:"rolling_ms"`
}

// reports builds the budget reports (nil when the run has no budget).
func (b *budgetAudit) reports() []BudgetReport {
	var doc struct {
		Budget *struct {
			Budgets []budgetDef `json:"budgets"`
		} `json:"budget"`
	}
	if len(b.ledger) == 0 || json.Unmarshal(b.ledger, &doc) != nil || doc.Budget == nil {
		return nil
	}
	b.resolveRetryPaths()
	var out []BudgetReport
	for _, bc := range doc.Budget.Budgets {
		out = append(out, b.report(bc))
	}
	return out
}

// resolveRetryPaths gives each retry the path of the attempt it retried,
// which only the first attempt's request carried.
func (b *budgetAudit) resolveRetryPaths() {
	for _, r := range b.retries {
		if prev, ok := b.paths[attemptKey{r.key.id, r.prev}]; ok {
			r.at.path = prev.path
			b.paths[r.key] = r.at
		}
	}
	b.retries = nil
}

// report is one budget's report: each holder scope's leases and requests,
// the fallbacks, the sums over the holders and the overspend.
func (b *budgetAudit) report(bc budgetDef) BudgetReport {
	r := BudgetReport{ID: bc.ID, Unit: bc.Unit, Limit: bc.Limit, LeaseMessages: b.msgs[bc.ID]}
	hs := map[string]*BudgetHolder{}
	get := func(scope string) *BudgetHolder {
		h := hs[scope]
		if h == nil {
			h = &BudgetHolder{Scope: scope, FirstRequestMs: -1, FirstLeaseMs: -1, FollowMs: -1}
			hs[scope] = h
		}
		return h
	}
	b.fillHolders(bc, get)
	r.FallbackRequests = b.fallbacks(bc.Level, bc.Subject, get)
	for _, h := range hs {
		r.FallbackCharged += h.FallbackCharged
		if h.FirstLeaseMs >= 0 && h.FirstRequestMs >= 0 {
			h.FollowMs = max(0, h.FirstLeaseMs-h.FirstRequestMs)
		}
		r.Spent += h.Spent
		r.GrantedAttempts += h.GrantedAttempts
		r.Granted += h.Granted
		r.Returned += h.Returned
		r.Holders = append(r.Holders, *h)
	}
	sort.Slice(r.Holders, func(i, j int) bool { return r.Holders[i].Scope < r.Holders[j].Scope })
	spent := r.Spent
	if bc.Window == "rolling" && bc.RollingMs > 0 {
		r.RollingMs, r.PeakSpent = bc.RollingMs, b.peakSpent(bc)
		spent = r.PeakSpent
	} else if bc.Unit == "requests" {
		spent = max(spent, r.GrantedAttempts)
	}
	r.Overspend = max(0, spent-r.Limit)
	if r.Limit > 0 {
		r.UsedPct = 100 * float64(spent) / float64(r.Limit)
	}
	return r
}

// peakSpent is the most rolling budget bc's holders used in any of its
// periods: for each window start s, the use of the windows of every
// holder that start in (s − RollingMs, s].
func (b *budgetAudit) peakSpent(bc budgetDef) int64 {
	used := map[int64]int64{} // window start → used, over holders
	for k, h := range b.holders {
		if k[0] != bc.ID {
			continue
		}
		for start, w := range h.windows {
			used[start] += w.used
		}
	}
	var peak int64
	for s := range used {
		var sum int64
		for start, u := range used {
			if start > s-bc.RollingMs && start <= s {
				sum += u
			}
		}
		peak = max(peak, sum)
	}
	return peak
}

// fillHolders gives each holder of budget bc (got through get) its lease
// counters, its first request under the budget and its granted attempts
// that were not given back.
func (b *budgetAudit) fillHolders(bc budgetDef, get func(scope string) *BudgetHolder) {
	for k, h := range b.holders {
		if k[0] != bc.ID {
			continue
		}
		bh := get(k[1])
		bh.FirstLeaseMs = h.firstLeaseMs
		for _, w := range h.windows {
			bh.Spent += w.used
			bh.Granted += w.grantd
			bh.Returned += w.returned
		}
	}
	for k, ap := range b.paths {
		if !pathNames(ap.path, bc.Level, bc.Subject) {
			continue
		}
		bh := get(ap.scope)
		if bh.FirstRequestMs < 0 || ap.ms < bh.FirstRequestMs {
			bh.FirstRequestMs = ap.ms
		}
		if b.granted[k] && !b.givenBack[k] {
			bh.GrantedAttempts++
		}
	}
}

// pathNames reports whether a request's path names level/subject.
func pathNames(path []schemas.PathLevel, level, subject string) bool {
	for _, l := range path {
		if string(l.Level) == level && l.ID == subject {
			return true
		}
	}
	return false
}

// fallbacks counts the requests naming level/subject whose attempts ran
// in more than one scope, and credits each later attempt to its scope's
// holder (get): an attempt is a fallback when its scope differs from the
// request's first attempt's.
func (b *budgetAudit) fallbacks(level, subject string, get func(string) *BudgetHolder) int {
	first := map[string]attemptKey{}
	for k, ap := range b.paths {
		if !pathNames(ap.path, level, subject) {
			continue
		}
		if f, ok := first[k.id]; !ok || k.n < f.n {
			first[k.id] = k
		}
	}
	fell := map[string]bool{}
	for k, ap := range b.paths {
		f, ok := first[k.id]
		if !ok || ap.scope == b.paths[f].scope {
			continue
		}
		fell[k.id] = true
		h := get(ap.scope)
		h.FallbackAttempts++
		if b.granted[k] && !b.givenBack[k] {
			h.FallbackCharged++
		}
	}
	return len(fell)
}

// readBudgets reads a run's committed requests and decisions topics on
// brokers into budget reports (the --embedded run's log, which the stack
// audit does not read).
func readBudgets(ctx context.Context, brokers []string, names bus.Names, start time.Time) ([]BudgetReport, error) {
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ba := newBudgetAudit(start)
	for _, topic := range []string{names.Requests, names.Decisions} {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", topic, err)
		}
		for _, p := range td[topic].Partitions.Numbers() {
			var ev schemas.Event
			err := ledgerd.ReadPartition(ctx, brokers, topic, p, kgo.NewOffset().AtStart(), -1, func(r *kgo.Record) error {
				if schemas.Decode(r.Value, &ev) == nil {
					ba.add(&ev, r.Timestamp)
				}
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("read %s/%d: %w", topic, p, err)
			}
		}
	}
	return ba.reports(), nil
}

// writeBudgets prints budget reports in the text report.
func writeBudgets(b *strings.Builder, budgets []BudgetReport) {
	for _, bu := range budgets {
		of := fmt.Sprintf("spent %d of %d %s", bu.Spent, bu.Limit, bu.Unit)
		if bu.RollingMs > 0 {
			of = fmt.Sprintf("spent %d %s, at most %d of %d in any %d ms", bu.Spent, bu.Unit, bu.PeakSpent, bu.Limit, bu.RollingMs)
		}
		fmt.Fprintf(b, "  budget %s: %s (%.1f %%) · overspend %d · granted attempts %d · leased %d, returned %d · %d lease messages · fallbacks %d (%d charged through the fallback's lease)\n",
			bu.ID, of, bu.UsedPct, bu.Overspend, bu.GrantedAttempts, bu.Granted, bu.Returned, bu.LeaseMessages, bu.FallbackRequests, bu.FallbackCharged)
		for _, h := range bu.Holders {
			fmt.Fprintf(b, "    lease %s: spent %d · granted attempts %d · fallback attempts %d (%d charged) · leased %d, returned %d · first request %d ms, first lease %d ms (follow %d ms)\n",
				h.Scope, h.Spent, h.GrantedAttempts, h.FallbackAttempts, h.FallbackCharged, h.Granted, h.Returned, h.FirstRequestMs, h.FirstLeaseMs, h.FollowMs)
		}
	}
}
