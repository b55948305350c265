package ledger

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/internal/problems"
	"github.com/sluice-dev/sluice/ledger/budget"
	"github.com/sluice-dev/sluice/schemas"
)

// A hot scope split over partitions (ScopeConfig.Partitions, issue 23
// item 5). One scope is one partition of sluice.requests and so one
// writer; when one deployment's traffic is more than one partition can
// decide, its scope is split into Partitions sub-scopes "<name>#<i>",
// which hash to different partitions and so to different ledgers. The
// deployment's provider limits must still hold over their sum, so they
// also become budgets of the budget partitions (ledger/budget): a
// requests, input_tokens, output_tokens or total_tokens limit (budget
// units requests, input_tokens, output_tokens, tokens: each charged as
// the bucket of its dimension is, reserved then settled to what was
// used) of Capacity per PeriodMs becomes a
// rolling budget of Capacity over any splitSlots+1 slots of
// PeriodMs/splitSlots, which each sub-scope spends through its lease, so
// that Σ over sub-scopes of what they grant in any PeriodMs never exceeds
// Capacity (ledger/budget/README.md, "Hot scopes"). Each sub-scope keeps
// the bucket as well, its window divided by Partitions (splitBurst), so
// that the sub-scopes' bursts add up to the deployment's.
// A concurrency limit is split statically: sub-scope i holds
// Capacity/Partitions, the remainder going to the lowest indexes, so the
// parts sum to Capacity (a capacity below Partitions is refused). The limits above the key level (scope, org,
// tenant, team, profile) are split statically the same way (splitShare):
// they apply to requests of many keys, which the gateway spreads over the
// sub-scopes by key (PartitionScope), so a whole copy in each would hold
// Partitions times over. A key's limits are copied to each sub-scope:
// its requests all go to one of them. Shadow limits are copied (they
// change no decision).

// SplitSep separates a split scope's name from its sub-scope index.
const SplitSep = schemas.SubScopeSep

// partitionsMax bounds ScopeConfig.Partitions (a budget's holders are
// bounded too: budget.Config.HoldersMax).
const partitionsMax = schemas.SubScopesMax

// PartitionScope returns the sub-scope of scope that decides a request
// of key when the scope is split over n partitions (n ≤ 1: scope
// itself). It is a pure function of its arguments (FNV-1a of key), so
// every gateway sends a key to the same sub-scope.
func PartitionScope(scope string, n int, key string) string {
	if n <= 1 {
		return scope
	}
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return SubScope(scope, int(h%uint32(n)))
}

// SubScope is the name of sub-scope i of a split scope.
func SubScope(scope string, i int) string { return scope + SplitSep + strconv.Itoa(i) }

// SplitOf returns the split scope that name is a sub-scope of (ok false:
// name is not "<scope>#<i>" with one "#", a non-empty scope and i a
// decimal index below partitionsMax without leading zeros, so it is a
// scope of its own), for views that show a split scope as one. It is the
// one definition of a sub-scope's name: the partitioner of
// sluice.requests (through schemas.SplitScopeOf, on the floor below), the
// views and the CLI read names with it.
func SplitOf(name string) (scope string, i int, ok bool) { return schemas.SplitScopeOf(name) }

// ScopePartitions returns how many sub-scopes scope was split into (1:
// not split), as a gateway needs it to choose one (PartitionScope).
func (c *Config) ScopePartitions(scope string) int {
	n := 0
	for n < partitionsMax && c.scopeIndex(SubScope(scope, n)) >= 0 {
		n++
	}
	return max(n, 1)
}

func (c *Config) scopeIndex(name string) int {
	for i := range c.Scopes {
		if c.Scopes[i].Name == name {
			return i
		}
	}
	return -1
}

// SplitBudgetID is the id of the budget that holds deployment dep's
// limit of dimension d of split scope scope.
func SplitBudgetID(scope, dep string, d schemas.Dimension) string {
	return "split:" + scope + ":" + dep + ":" + string(d)
}

// splitScopes replaces every scope with Partitions > 1 by its
// sub-scopes, and its deployment limits by budgets, after fillDefaults
// and before validate. A scope whose limits cannot be split is left
// whole and its problems are added to p, at the scope's place in the
// document. Running it again changes nothing (sub-scopes have
// Partitions 0), so a document that went through it parses the same.
func (c *Config) splitScopes(p *problems.List) {
	var out []ScopeConfig
	for si := range c.Scopes {
		s := c.Scopes[si]
		if s.Partitions <= 1 {
			if s.Partitions < 0 {
				p.Add(problems.Index("scopes", si)+".partitions", "%d out of [0, %d]", s.Partitions, partitionsMax)
			}
			out = append(out, s)
			continue
		}
		subs, buds, ok := splitScope(problems.Index("scopes", si), s, p)
		if !ok {
			out = append(out, s)
			continue
		}
		out = append(out, subs...)
		if c.Budget == nil {
			c.Budget = &budget.Config{}
		}
		c.Budget.Budgets = append(c.Budget.Budgets, buds...)
		c.Budget.FillDefaults()
	}
	c.Scopes = out
}

// splitScope returns the sub-scopes of s and the budgets of its
// deployment limits (ok false: a problem, added to p).
func splitScope(loc string, s ScopeConfig, p *problems.List) (subs []ScopeConfig, buds []budget.Budget, ok bool) {
	n := s.Partitions
	before := p.Len()
	if n > partitionsMax {
		p.Add(loc+".partitions", "%d out of [0, %d]", n, partitionsMax)
	}
	if s.Name == "*" || strings.Contains(s.Name, SplitSep) {
		p.Add(loc+".partitions", "scope %q cannot be split: name one scope, without %q", s.Name, SplitSep)
	}
	var kept []BucketConfig   // copied to every sub-scope
	var shared []BucketConfig // split statically: Capacity/n each
	for bi, b := range s.Buckets {
		bloc := fmt.Sprintf("%s.buckets[%d]", loc, bi)
		if b.Level != LevelDeployment {
			switch _, why := SplitLimit(b, n, 0); {
			case b.Level == LevelKey || b.Shadow || s.Shadow:
				kept = append(kept, b) // a key's requests all go to one sub-scope; a shadow limit decides nothing
			case why != "":
				p.Add(bloc, "%s", why)
			default:
				shared = append(shared, b)
			}
			continue
		}
		if b.ID == "*" || b.Shadow || s.Shadow {
			p.Add(bloc, "a split scope's deployment limit must name its deployment and be enforced (not \"*\", not shadow)")
			continue
		}
		if b.Dimension == schemas.DimConcurrency {
			// Divided as the limits above the key level are: SplitLimit
			// leaves a limit it cannot divide whole, which in every
			// sub-scope would hold n times over.
			if _, why := SplitLimit(b, n, 0); why != "" {
				p.Add(bloc, "%s", why)
				continue
			}
			shared = append(shared, b)
			continue
		}
		unit, rollingMs, slots, why := splitUnit(b)
		if why != "" {
			p.Add(bloc, "cannot be split over partitions: %s", why)
			continue
		}
		kept = append(kept, splitBurst(b, n))
		buds = append(buds, budget.Budget{ID: SplitBudgetID(s.Name, b.ID, b.Dimension), Level: LevelDeployment, Subject: b.ID,
			Unit: unit, Limit: b.Capacity, Window: budget.WindowRolling, RollingMs: rollingMs, Slots: slots})
	}
	if p.Len() > before {
		return nil, nil, false
	}
	for i := 0; i < n; i++ {
		sub := s
		sub.Name, sub.Partitions = SubScope(s.Name, i), 0
		sub.Buckets = append([]BucketConfig(nil), kept...)
		sub.Tenants = append([]TenantConfig(nil), s.Tenants...)
		sub.RequiredLevels = append([]string{}, s.RequiredLevels...)
		for _, b := range shared {
			b, _ = SplitLimit(b, n, i)
			if b.Level == LevelScope && b.ID == s.Name {
				b.ID = sub.Name // a scope-level limit names its scope
			}
			sub.Buckets = append(sub.Buckets, b)
		}
		subs = append(subs, sub)
	}
	return subs, buds, true
}

// splitShare says why bucket b (a limit above the key level: scope, org,
// tenant, team, profile) cannot be divided into n static shares, one a
// sub-scope ("" if it can). Such a limit applies to requests of many keys,
// which the gateway spreads over the sub-scopes, so a copy in each would
// hold n times over (a tenant whose keys land in n sub-scopes could use
// n × its limit). Sub-scope i holds Capacity/n, the remainder going to
// the lowest indexes: the shares sum to Capacity in every period, window
// and instant, whatever the refill (token, fixed and rolling windows
// start at the same times in every sub-scope). A token bucket keeps its
// window, so the shares' bursts sum to the limit's, unless a share's
// burst would be below one unit: its window is then lengthened to hold
// one (as splitBurst's floor), so a burst below n units is up to n units
// over all sub-scopes. The price: a tenant whose keys all land in one
// sub-scope gets only its share there.
func splitShare(b BucketConfig, n int) string {
	fillBucketDefaults(&b)
	switch b.Refill {
	case RefillToken, RefillFixed, RefillRolling, RefillConcurrency:
	default:
		return fmt.Sprintf("refill %s (only token, fixed, rolling and concurrency)", b.Refill)
	}
	share := b.Capacity / int64(n)
	if share < 1 {
		return fmt.Sprintf("capacity %d is below one unit for each of %d sub-scopes", b.Capacity, n)
	}
	return ""
}

// SplitLimit returns bucket b as sub-scope i of a scope split over n
// partitions holds it when b is split statically (any limit but a
// deployment's rate limits, which become budgets): a key's or a shadow
// limit whole, any other its share (splitShare: Capacity/n, the remainder
// to the lowest indexes), or why it cannot be divided. A guaranteed
// baseline and a borrow reserve are divided the same way, so that each
// stays within its share's capacity and they sum to the limit's over the
// sub-scopes (whole in each, a baseline above its share's capacity would
// be refused, and a smaller one guaranteed n times over). The admin API
// uses it to set a limit of a split scope.
func SplitLimit(b BucketConfig, n, i int) (BucketConfig, string) {
	if n <= 1 || b.Level == LevelKey || b.Shadow {
		return b, ""
	}
	if why := splitShare(b, n); why != "" {
		return b, fmt.Sprintf("a split scope's %s limit is divided among its %d sub-scopes, and this one cannot be: %s", b.Level, n, why)
	}
	fillBucketDefaults(&b)
	share := func(v int64) int64 { return v/int64(n) + boolInt(int64(i) < v%int64(n)) }
	b.Capacity, b.Guaranteed, b.BorrowReserve = share(b.Capacity), share(b.Guaranteed), share(b.BorrowReserve)
	if b.Refill == RefillToken && b.WindowMs > 0 && b.Capacity*b.WindowMs < b.PeriodMs {
		if b.LimitWindowMs == 0 {
			b.LimitWindowMs = b.WindowMs // the limit's, as configured
		}
		b.WindowMs = (b.PeriodMs + b.Capacity - 1) / b.Capacity // a share's burst holds one unit
	}
	return b, ""
}

// splitSlots is the number of slots a split limit's period is counted
// in: its budget holds the limit over any splitSlots+1 consecutive slots
// of period/splitSlots, so over any period wherever it starts (a rolling
// budget over exactly the period holds it only over periods aligned to
// its slots: up to twice the limit over one that is not). Under steady
// demand a sub-scope set then uses splitSlots/(splitSlots+1) of the limit.
// A slot is also a lease window, so it must be long against the lease
// round trip and the clock skew between partitions (7.5 s for a minute).
const splitSlots = 8

// splitUnit maps a deployment bucket to its budget's unit and rolling
// window, or says why it cannot be split. The bucket itself stays in
// every sub-scope too: it bounds each sub-scope's burst (window_ms, split
// by splitBurst), while the budget bounds their sum over each period.
func splitUnit(b BucketConfig) (unit budget.Unit, rollingMs, slots int64, why string) {
	switch b.Dimension {
	case schemas.DimRequests:
		unit = budget.UnitRequests
	case schemas.DimTotalTokens:
		unit = budget.UnitTokens
	case schemas.DimInputTokens:
		unit = budget.UnitInputTokens
	case schemas.DimOutputTokens:
		unit = budget.UnitOutputTokens
	default:
		return "", 0, 0, fmt.Sprintf("dimension %s (only requests, input_tokens, output_tokens, total_tokens and concurrency)", b.Dimension)
	}
	if b.Refill != RefillToken && b.Refill != RefillRolling {
		return "", 0, 0, fmt.Sprintf("refill %s (only token and rolling)", b.Refill)
	}
	if b.PeriodMs%splitSlots != 0 {
		return "", 0, 0, fmt.Sprintf("period_ms %d is not a multiple of %d", b.PeriodMs, splitSlots)
	}
	return unit, b.PeriodMs / splitSlots * (splitSlots + 1), splitSlots + 1, ""
}

// splitBurst returns the deployment bucket b as each of n sub-scopes
// keeps it: the same capacity per period (one sub-scope may take the
// whole rate while the others idle; the budget bounds their sum), but a
// token bucket's window divided by n, so that the n sub-scopes bursting
// together hold the deployment's burst (capacity × window / period) once,
// not n times. The window stays long enough for a burst of one unit (the
// config's own bound): a burst below n units is then up to n units over
// all sub-scopes, and never more than the capacity in a period. A borrow
// reserve, a level kept out of the burst for guaranteed traffic, shrinks
// with the window (rounded up): whole, it would keep n times its share
// of the deployment's burst from borrowed grants.
func splitBurst(b BucketConfig, n int) BucketConfig {
	if b.Refill != RefillToken || b.WindowMs <= 0 || b.Capacity <= 0 {
		return b
	}
	floorMs := (b.PeriodMs + b.Capacity - 1) / b.Capacity // capacity × window ≥ period
	w := min(b.WindowMs, max(b.WindowMs/int64(n), floorMs))
	if b.BorrowReserve > 0 {
		b.BorrowReserve = (b.BorrowReserve*w + b.WindowMs - 1) / b.WindowMs
	}
	b.WindowMs = w
	return b
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
