package gateway

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/admission/lifecycle"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/ledger/budget"
	"github.com/sluice-dev/sluice/schemas"
)

// The degraded mode's shell (docs/gateway.md, "Degraded mode"; the rule
// and the budget are admission/lifecycle's, degraded.go). At a request's
// answer bound, or when its reserve could not be produced, the gateway asks
// the budget whether the request fits its share of what the ledger last
// reported; the lifecycle then admits it locally, as an emergency
// ReserveRequested flagged degraded that the retry queue delivers once the
// broker takes it. The last known capacity is the ledger's newest
// partition snapshot, which the gateway already follows for
// /v1/sluice/usage (SnapshotLevels): each bucket of the request's path, its
// capacity and refill from the configuration in force, what was left at
// the snapshot projected by refill, and how many gateways the partition
// counted alive. No snapshot of the scope, no degraded admission.

// GatewayCounter is implemented by a LevelSource that also knows how many
// gateways the ledger last counted alive in a scope's partition
// (SnapshotLevels). Without it, a gateway counts itself alone, unless
// degraded.gateways says more.
type GatewayCounter interface {
	// LiveGateways counts the gateways alive in scope's partition at
	// atMs, self among them whether or not it had heartbeated there.
	LiveGateways(scope, self string, atMs int64) int
}

// degradedMode is the server's budget, shared by its requests.
type degradedMode struct {
	mu   sync.Mutex
	b    *lifecycle.Degraded
	conf lifecycle.DegradedConfig
	// active mirrors b.Active(): a ledger answer takes the lock only
	// while some scope is in an episode.
	active atomic.Bool
}

// budget returns the budget under cfg, a fresh one when the knobs changed
// (a reload). The caller holds mu.
func (m *degradedMode) budget(cfg *config.Config) *lifecycle.Degraded {
	dc := lifecycle.DegradedConfig{Share: cfg.Degraded.Share, MaxMs: cfg.Degraded.MaxMs}
	if m.b == nil || dc != m.conf {
		m.b, m.conf = lifecycle.NewDegraded(dc), dc
	}
	return m.b
}

// answered ends scope's episode: a ledger answered there.
func (m *degradedMode) answered(scope string) {
	if !m.active.Load() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b != nil {
		m.b.Answered(scope)
		m.active.Store(m.b.Active())
	}
}

// done gives back what an admitted request held of the budget.
func (m *degradedMode) done(bs []lifecycle.DegradedBucket) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b != nil {
		m.b.Done(bs)
	}
}

// degradedOK reports whether the current attempt, which the ledger left
// unanswered, is admitted locally in degraded mode, and takes its share if
// so. The lifecycle counts an admission; a refusal is counted here.
func (c *call) degradedOK(attempt int32) bool {
	dc := &c.cfg.Degraded
	if !dc.On() || c.degBuckets != nil || !c.lc.Awaiting(attempt) || c.ctx.Err() != nil {
		return false
	}
	if !dc.Admits(c.adm.Class) {
		c.s.m.degraded.WithLabelValues(c.adm.Class, "class_excluded").Inc()
		return false
	}
	t := &c.lreq.Targets[c.lc.Target()]
	now := time.Now().UnixMilli()
	bs, known := c.s.degradedBuckets(c.cfg, t, &c.lreq, now)
	gateways := max(1, dc.Gateways)
	if gc, ok := c.s.levels.(GatewayCounter); ok && known {
		gateways = max(gateways, gc.LiveGateways(t.Scope, c.cfg.Node, now))
	}
	m := &c.s.deg
	m.mu.Lock()
	b := m.budget(c.cfg)
	v := b.Admit(now, t.Scope, known, gateways, bs)
	m.active.Store(b.Active())
	m.mu.Unlock()
	if v != lifecycle.DegradedAdmitted {
		c.s.m.degraded.WithLabelValues(c.adm.Class, v.String()).Inc()
		return false
	}
	if bs == nil {
		bs = []lifecycle.DegradedBucket{} // admitted: non-nil
	}
	c.degBuckets = bs
	return true
}

// degradedBuckets lists the buckets of t's path as the ledger last
// reported them, with what the request needs of each; known is false when
// no snapshot reported the scope (or the gateway follows none).
func (s *Server) degradedBuckets(cfg *config.Config, t *lifecycle.Target, req *lifecycle.Request, nowMs int64) (bs []lifecycle.DegradedBucket, known bool) {
	doc := ledgerDoc(cfg)
	if doc == nil || s.levels == nil {
		return nil, false
	}
	sc := scopeConfig(doc, t.Scope)
	if sc == nil {
		return nil, false
	}
	for _, pl := range t.Path {
		buckets := bucketsOf(sc, pl.Level, pl.ID)
		if len(buckets) == 0 {
			continue
		}
		obs, _, scopeKnown := s.levels.Levels(t.Scope, pl.Level, pl.ID, nowMs)
		if !scopeKnown {
			return nil, false
		}
		for _, bc := range buckets {
			if bc.Shadow || sc.Shadow {
				continue // evaluated, never enforced
			}
			b, ok := degradedBucket(t.Scope, pl, &bc, obs)
			if !ok {
				continue
			}
			b.Need = degradedNeed(bc.Dimension, req, t)
			bs = append(bs, b)
		}
	}
	if doc.Budget != nil && len(doc.Budget.Budgets) > 0 {
		bbs, ok := s.degradedBudgets(doc, t, req)
		if !ok {
			return nil, false
		}
		bs = append(bs, bbs...)
	}
	return bs, true
}

// degradedBudgets bounds a degraded admission by the cross-scope budgets
// its path spends (ledger.budget): each is a bucket holding what the
// scope's lease still held at the newest snapshot of its partition
// (granted − returned − used), with no refill, since only the budget
// partition grants more. The local share of it (Share ÷ gateways) is what
// this gateway may spend of the budget while no ledger answers, so the
// gateways together spend at most Share of the lease, and the lease is
// within the budget (ledger/budget README, bounds). ok is false when a
// budget applies and no snapshot holds the scope's lease of it: an
// unreachable ledger then leaves the scope nothing of that budget.
func (s *Server) degradedBudgets(doc *ledger.Config, t *lifecycle.Target, req *lifecycle.Request) (bs []lifecycle.DegradedBucket, ok bool) {
	src, _ := s.levels.(BudgetSource)
	for i := range doc.Budget.Budgets {
		b := &doc.Budget.Budgets[i]
		if !pathNames(t.Path, b.Level, b.Subject) {
			continue
		}
		if src == nil {
			return nil, false
		}
		_, leases, _, _, _ := src.Budget(b.ID, []string{t.Scope})
		if len(leases) == 0 {
			return nil, false
		}
		l := leases[0]
		held := max(0, l.Granted-l.Returned-l.Used)
		dim := schemas.DimSpend
		switch b.Unit {
		case budget.UnitRequests:
			dim = schemas.DimRequests
		case budget.UnitTokens:
			dim = schemas.DimTotalTokens
		case budget.UnitInputTokens:
			dim = schemas.DimInputTokens
		case budget.UnitOutputTokens:
			dim = schemas.DimOutputTokens
		}
		bs = append(bs, lifecycle.DegradedBucket{Key: "budget:" + b.ID + "/lease:" + t.Scope, BurstUnits: held, Remaining: held,
			Need: degradedNeed(dim, req, t)})
	}
	return bs, true
}

// pathNames reports whether path names level/subject (a budget's holder
// test, ledger/budget Holder.Budgets).
func pathNames(path []schemas.PathLevel, level, subject string) bool {
	for _, pl := range path {
		if pl.Level == level && pl.ID == subject {
			return true
		}
	}
	return false
}

// degradedBucket is bc as the local budget sees it: its capacity, refill
// and burst (the most the ledger lets out at once), and what the snapshot
// said was left (untouched buckets are full). Ramp buckets govern growth,
// not capacity, and are left to the ledger.
func degradedBucket(scope string, pl schemas.PathLevel, bc *ledger.BucketConfig, obs []ledger.BucketLevel) (lifecycle.DegradedBucket, bool) {
	refill := bc.Refill
	if refill == "" {
		switch bc.Dimension {
		case schemas.DimConcurrency:
			refill = ledger.RefillConcurrency
		case schemas.DimRequestsPerDay:
			refill = ledger.RefillFixed
		case schemas.DimSpend:
			refill = ledger.RefillRolling
		case schemas.DimRamp:
			refill = ledger.RefillRamp
		default:
			refill = ledger.RefillToken
		}
	}
	b := lifecycle.DegradedBucket{Key: scope + "/" + pl.Level + ":" + pl.ID + "/" + string(bc.Dimension), Capacity: bc.Capacity, PeriodMs: bc.PeriodMs}
	switch refill {
	case ledger.RefillRamp:
		return b, false
	case ledger.RefillConcurrency:
		b.Concurrency = true
		b.Remaining = bc.Capacity
	case ledger.RefillToken:
		if b.PeriodMs <= 0 {
			b.PeriodMs = 60_000
		}
		w := bc.WindowMs
		if w <= 0 {
			w = 1000
		}
		b.BurstUnits = bc.Capacity * min(w, b.PeriodMs) / b.PeriodMs
	default: // fixed and rolling windows: the whole period's capacity
		if b.PeriodMs <= 0 {
			b.PeriodMs = 86_400_000
		}
		b.BurstUnits = bc.Capacity
	}
	if !b.Concurrency {
		b.Remaining = b.BurstUnits // untouched: full
	}
	for _, o := range obs {
		if o.Dimension == bc.Dimension {
			b.Remaining = o.Remaining
		}
	}
	return b, true
}

// degradedNeed is what the request takes of a bucket of dimension dim, as
// the ledger would charge its estimate.
func degradedNeed(dim schemas.Dimension, req *lifecycle.Request, t *lifecycle.Target) int64 {
	e := &req.Estimate
	switch dim {
	case schemas.DimRequests, schemas.DimConcurrency, schemas.DimRequestsPerDay:
		return 1
	case schemas.DimInputTokens:
		return e.InputTokens
	case schemas.DimOutputTokens:
		return max(e.OutputTokens, req.MaxOutputTokens)
	case schemas.DimTotalTokens:
		return e.InputTokens + max(e.OutputTokens, req.MaxOutputTokens)
	case schemas.DimSpend:
		return t.SpendMicros(e.InputTokens, e.OutputTokens)
	}
	return 0
}

// LiveGateways implements GatewayCounter: the gateways the newest
// snapshot of scope's partition counted alive at its own time (atMs is
// not used to age them: during an outage no heartbeat reaches the log,
// and every gateway would look dead), self included.
func (s *SnapshotLevels) LiveGateways(scope, self string, atMs int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, bestAt := s.newest(scope)
	if best == nil {
		return 1
	}
	return best.LiveNodes(bestAt, self)
}

func newDegradedMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_gateway_degraded_total",
		Help: "Requests the ledger left unanswered that degraded mode admitted locally (verdict admitted) or not (class_excluded, unknown_capacity, over_share, expired), by class."},
		[]string{"class", "verdict"})
}
