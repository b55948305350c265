package gateway

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/apierr/httperr"
	"github.com/sluice-dev/sluice/internal/httpmux"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/ledger/budget"
)

// BudgetSource is what a LevelSource also offers when it can tell the
// state of cross-scope budgets (SnapshotLevels does): for budget id, what
// its budget partition counts as outstanding (used plus leased unused;
// ok false when no snapshot holds the budget partition's state), and what
// each of scopes holds of it by the newest snapshot of its partition.
type BudgetSource interface {
	Budget(id string, scopes []string) (outstanding int64, leases []budget.Lease, leaseScopes []string, observedAtMs int64, ok bool)
}

// UsageBudget is one budget (ledger.budget) that names the caller's
// tenant, team or key: its limit over every provider, what is spent, and
// the leases each provider scope holds of it (shares it may spend
// without asking the budget partition).
type UsageBudget struct {
	ID      string `json:"id"`
	Level   string `json:"level"`
	Subject string `json:"subject"`
	Unit    string `json:"unit"`
	Window  string `json:"window"`
	Limit   int64  `json:"limit"`
	// Spent is the sum over scopes of what their leases report used;
	// Remaining is Limit − Spent (absent with Spent, when no snapshot
	// holds a lease of the budget).
	Spent     *int64 `json:"spent,omitempty"`
	Remaining *int64 `json:"remaining,omitempty"`
	// Outstanding is the budget partition's conservation sum: used plus
	// leased and not yet spent (never above Limit).
	Outstanding *int64 `json:"outstanding,omitempty"`
	// Leases are the scopes' leases, in scope order.
	Leases       []UsageLease `json:"leases"`
	ObservedAtMs int64        `json:"observed_at_ms,omitempty"`
	// Source: ledger_snapshot, or unobserved (no snapshot holds it).
	Source string `json:"source"`
}

// UsageLease is what one provider scope holds of a budget.
type UsageLease struct {
	Scope    string `json:"scope"`
	Granted  int64  `json:"granted"`
	Returned int64  `json:"returned"`
	Used     int64  `json:"used"`
	// Held is Granted − Returned − Used: leased and not yet spent.
	Held   int64 `json:"held"`
	Target int64 `json:"target"`
}

// usageBudgets lists doc's budgets at the caller's tenant, team or key
// level (never org: an org's budget is shared by tenants that must not
// see each other's use), observed through s.levels when it can.
func (s *Server) usageBudgets(doc *ledger.Config, tenant, team, key string, scopes []string) []UsageBudget {
	return s.budgets(doc, scopes, func(b *budget.Budget) bool {
		return b.Level == ledger.LevelTenant && b.Subject == tenant ||
			b.Level == ledger.LevelTeam && team != "" && b.Subject == team ||
			b.Level == ledger.LevelKey && b.Subject == key
	})
}

// budgets lists doc's budgets that keep selects, observed through
// s.levels when it can.
func (s *Server) budgets(doc *ledger.Config, scopes []string, keep func(*budget.Budget) bool) []UsageBudget {
	out := []UsageBudget{}
	if doc.Budget == nil {
		return out
	}
	src, _ := s.levels.(BudgetSource)
	for i := range doc.Budget.Budgets {
		b := &doc.Budget.Budgets[i]
		if !keep(b) {
			continue
		}
		ub := UsageBudget{ID: b.ID, Level: b.Level, Subject: b.Subject, Unit: string(b.Unit), Window: string(b.Window), Limit: b.Limit, Leases: []UsageLease{}, Source: "unobserved"}
		if src != nil && s.levels != nil {
			outstanding, leases, ls, at, ok := src.Budget(b.ID, scopes)
			if ok {
				ub.Outstanding = &outstanding
			}
			if len(leases) > 0 || ok {
				var spent int64
				for i, l := range leases {
					spent += l.Used
					ub.Leases = append(ub.Leases, UsageLease{Scope: ls[i], Granted: l.Granted, Returned: l.Returned, Used: l.Used,
						Held: max(0, l.Granted-l.Returned-l.Used), Target: l.Target})
				}
				rem := b.Limit - spent
				ub.Spent, ub.Remaining, ub.ObservedAtMs, ub.Source = &spent, &rem, at, "ledger_snapshot"
			}
		}
		slices.SortFunc(ub.Leases, func(a, b UsageLease) int {
			switch {
			case a.Scope < b.Scope:
				return -1
			case a.Scope > b.Scope:
				return 1
			}
			return 0
		})
		out = append(out, ub)
	}
	return out
}

// AdminBudgets is the body of GET /admin/v1/budgets.
type AdminBudgets struct {
	Object  string        `json:"object"` // "sluice.budgets"
	NowMs   int64         `json:"now_ms"`
	Budgets []UsageBudget `json:"budgets"`
}

// handleAdminBudgets answers GET /admin/v1/budgets to the operator: every
// budget across providers (any level, org included), with its leases per
// scope, as /v1/sluice/usage shows a tenant its own.
func (s *Server) handleAdminBudgets(w http.ResponseWriter, r *http.Request) {
	tok := s.operatorToken.Load()
	if tok == nil || *tok == "" {
		httperr.Write(w, apierr.New(http.StatusNotFound, apierr.CodeNotFound,
			"the admin API is off on this gateway: start it with an operator token (SLUICE_ADMIN_TOKEN or --admin-token-file)"), false)
		return
	}
	got, ok := httpmux.BearerToken(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
		httperr.Write(w, apierr.New(http.StatusUnauthorized, apierr.CodeMissingAdminToken, "the budgets need the operator token: send Authorization: Bearer <operator token>"), false)
		return
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(*tok)) != 1 {
		httperr.Write(w, apierr.New(http.StatusUnauthorized, apierr.CodeInvalidAdminToken, "invalid operator token"), false)
		return
	}
	cfg := s.cfg.Load()
	out := AdminBudgets{Object: "sluice.budgets", NowMs: time.Now().UnixMilli(), Budgets: []UsageBudget{}}
	if doc := ledgerDoc(cfg); doc != nil {
		out.Budgets = s.budgets(doc, scopes(cfg), func(*budget.Budget) bool { return true })
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}

// Budget implements BudgetSource over the newest snapshot of every
// partition: the budget partition's outstanding sum, and each scope's
// lease from the newest snapshot that holds the scope.
func (s *SnapshotLevels) Budget(id string, scopes []string) (outstanding int64, leases []budget.Lease, leaseScopes []string, observedAtMs int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.parts {
		p.restore(s.log)
		if p.l == nil {
			continue
		}
		if o, _, found := p.l.BudgetOutstanding(id); found {
			outstanding, ok = o, true
			observedAtMs = max(observedAtMs, p.lAtMs)
		}
	}
	for _, scope := range scopes {
		best, at := s.newest(scope)
		if best == nil {
			continue
		}
		if l, found := best.BudgetLease(scope, id); found {
			leases, leaseScopes = append(leases, l), append(leaseScopes, scope)
			observedAtMs = max(observedAtMs, at)
		}
	}
	return outstanding, leases, leaseScopes, observedAtMs, ok
}
