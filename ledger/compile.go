package ledger

import (
	"github.com/sluice-dev/sluice/schemas"
)

// spec is a bucket's compiled configuration.
type spec struct {
	shadow     bool // evaluated and recorded, never enforced (shadow.go)
	kind       uint8
	dim        uint8
	exclCached bool
	// arrival: the bucket charges max output tokens at grant and keeps
	// the charge (AccountingMaxTokensOnArrival).
	arrival bool
	// refundUnsent: a requests bucket whose provider does not count a
	// request it refused (RefundUnsent).
	refundUnsent bool
	// slide: a learned token bucket whose capacity came from remaining
	// counts without a limit also checks its trailing window (slide.go).
	slide      bool
	capacity   int64 // units per period (token, fixed, rolling), in flight (concurrency), max rate (ramp)
	period     int64
	window     int64
	burst      int64 // token: scaled capacity×window; fixed, concurrency, rolling: capacity units
	guaranteed int64
	gBurst     int64 // scaled guaranteed×window
	reserve    int64 // borrow reserve in units
	offset     int64
	slots      int64
	slotMs     int64
	// maxUnits is the most one request can take: a token or ramp bucket's
	// capacity per period (a request larger than the window is admitted
	// when the window is full and repays the rest as debt, fits), any other
	// bucket's capacity. Only a request above it is never admitted.
	maxUnits int64
	// holdUnits is the most the bucket holds at once (token, ramp: the
	// enforcement window's burst at full rate; others: capacity).
	holdUnits int64
	ramp      RampConfig
}

// scopeCfg is a scope's compiled configuration: per level, the template
// bucket specs ("*") and the exact-id overrides merged with the template.
type scopeCfg struct {
	name     string
	template [numLevels][]int32
	exact    [numLevels]map[string][]int32
	weights  map[string]int64
	defW     int64
	// required has bit lv set for every level a request path must name
	// (ScopeConfig.RequiredLevels).
	required uint8
	// closed has bit lv set for every required level whose enforced
	// buckets are all exact-id ones (no enforced "*" template): an id it
	// does not list would charge none of the level's limits, so a path
	// naming one is refused (ReasonPathUnknownID). The deployment level is
	// the usual case: the provider's quota, configured per deployment id.
	closed uint8
}

// The required-level mask has a bit per level.
var _ [8 - numLevels]struct{}

// compiled is the derived, read-only form of a Config.
type compiled struct {
	specs       []spec
	scopes      []scopeCfg
	scopeByName map[string]int
	wildcard    int // index of scope "*" or -1
	// anyGuaranteed / anyRamp enable the borrowing pass and ramp bookkeeping.
	anyGuaranteed bool
	anyRamp       bool
	anyReserve    bool
	anyShadow     bool
	// anyArrivalRule: some spec is max_tokens_on_arrival or refunds
	// unsent requests. Without one, settle and grantFast take the plain
	// amount (amountPlain) and skip the rules' tests per bucket.
	anyArrivalRule bool
	// anyPace: some spec is, or once was, an enforced one-request-per-
	// window requests bucket (onePerWindow). Without one, sendAt is 0
	// without walking the path: the walk cost about 1,400 instructions
	// a grant on a 24-bucket path (cachegrind, issue 25). Set by compile
	// and by every learned capacity (compiled.learnedSpec), never
	// cleared but by a new compile: a spec that stopped pacing leaves it
	// true, which costs the walk, never a decision.
	anyPace  bool
	classIdx map[string]int32
	// classNames are the class names in index order: a handful, compared
	// one by one on the hot path instead of hashing the name (classOf).
	classNames []string
	defClass   int32
	// nBase is the number of configured specs; specs[nBase+i] is the
	// learned copy of Learned[i] (learn.go).
	nBase int
	ent   *entitlements // nil: the document has none (entitle.go)
}

func compile(c *Config) *compiled {
	cc := &compiled{scopeByName: map[string]int{}, wildcard: -1, classIdx: map[string]int32{}}
	for i, cl := range c.Classes {
		cc.classIdx[cl.Name] = int32(i)
		cc.classNames = append(cc.classNames, cl.Name)
	}
	cc.defClass = cc.classIdx[c.DefaultClass]
	cc.ent = compileEntitlements(c, cc.classIdx)
	for si := range c.Scopes {
		s := &c.Scopes[si]
		sc := scopeCfg{name: s.Name, weights: map[string]int64{}, defW: s.DefaultTenantWeight}
		for _, t := range s.Tenants {
			sc.weights[t.ID] = t.Weight
		}
		for _, name := range s.RequiredLevels {
			if lv, ok := levelCode(name); ok && lv != 0 {
				sc.required |= 1 << lv
			}
		}
		// Templates first, then exact ids merged over their level's template
		// (an exact entry replaces the template's bucket of its dimension).
		for _, b := range s.Buckets {
			lv, _ := levelCode(b.Level)
			b.Shadow = b.Shadow || s.Shadow
			if b.ID == "*" || (lv == 0 && b.ID == s.Name) {
				sc.template[lv] = append(sc.template[lv], cc.addSpec(b))
			}
		}
		for _, b := range s.Buckets {
			lv, _ := levelCode(b.Level)
			if b.ID == "*" || lv == 0 {
				continue
			}
			b.Shadow = b.Shadow || s.Shadow
			if sc.exact[lv] == nil {
				sc.exact[lv] = map[string][]int32{}
			}
			list, ok := sc.exact[lv][b.ID]
			if !ok {
				list = append([]int32(nil), sc.template[lv]...)
			}
			si := cc.addSpec(b)
			replaced := false
			for i, old := range list {
				if cc.specs[old].dim == cc.specs[si].dim && cc.specs[old].shadow == cc.specs[si].shadow {
					list[i] = si
					replaced = true
				}
			}
			if !replaced {
				list = append(list, si)
			}
			sc.exact[lv][b.ID] = list
		}
		sc.closed = cc.closedLevels(&sc)
		if s.Name == "*" {
			cc.wildcard = len(cc.scopes)
		}
		cc.scopeByName[s.Name] = len(cc.scopes)
		cc.scopes = append(cc.scopes, sc)
	}
	cc.nBase = len(cc.specs)
	return cc
}

// closedLevels returns scopeCfg.closed: the required levels limited by id
// only. A level with no enforced bucket at all is not closed: requiring it
// asks the path to name it, and no id can skip a limit it does not have.
func (cc *compiled) closedLevels(sc *scopeCfg) uint8 {
	var closed uint8
	for lv := uint8(1); int(lv) < numLevels; lv++ {
		if sc.required&(1<<lv) == 0 || cc.enforces(sc.template[lv]) {
			continue
		}
		for _, list := range sc.exact[lv] {
			if cc.enforces(list) {
				closed |= 1 << lv
				break
			}
		}
	}
	return closed
}

// enforces reports whether a spec list holds an enforced (not shadow)
// bucket.
func (cc *compiled) enforces(list []int32) bool {
	for _, si := range list {
		if !cc.specs[si].shadow {
			return true
		}
	}
	return false
}

// knows reports whether id has an enforced bucket of its own at level lv
// (an exact-id entry; see closed).
func (cc *compiled) knows(sc *scopeCfg, lv uint8, id string) bool {
	list, ok := sc.exact[lv][id]
	return ok && cc.enforces(list)
}

func (cc *compiled) addSpec(b BucketConfig) int32 {
	d, _ := dimIndex(b.Dimension)
	sp := spec{
		shadow:   b.Shadow,
		kind:     kindCode(b.Refill),
		dim:      uint8(d),
		capacity: b.Capacity,
		period:   b.PeriodMs,
		window:   b.WindowMs,
		reserve:  b.BorrowReserve,
		offset:   b.ResetOffsetMs,
	}
	sp.exclCached = b.ExcludeCachedInput && (d == dInput || d == dTotal)
	sp.arrival = b.Accounting == AccountingMaxTokensOnArrival && (d == dOutput || d == dTotal)
	sp.refundUnsent = b.RefundUnsent && d == dRequests
	switch sp.kind {
	case kToken, kRamp:
		sp.burst = b.Capacity * b.WindowMs
		sp.guaranteed = b.Guaranteed
		sp.gBurst = b.Guaranteed * b.WindowMs
		if b.Ramp != nil {
			sp.ramp = *b.Ramp
		}
	case kRolling:
		sp.burst = b.Capacity
		sp.slots = int64(b.Slots)
		sp.slotMs = (b.PeriodMs + sp.slots - 1) / sp.slots
	default:
		sp.burst = b.Capacity
	}
	sp.maxUnits, sp.holdUnits = sp.capacity, sp.capacity
	switch sp.kind {
	case kToken:
		sp.holdUnits = sp.burst / sp.period
	case kRamp:
		sp.holdUnits = sp.capacity * sp.window / sp.period
		cc.anyRamp = true
	}
	if sp.guaranteed > 0 {
		cc.anyGuaranteed = true
	}
	if sp.reserve > 0 {
		cc.anyReserve = true
	}
	if sp.shadow {
		cc.anyShadow = true
	}
	if sp.arrival || sp.refundUnsent {
		// Learned specs are copies of these or of headersSpec (neither
		// rule), so the flag covers them too.
		cc.anyArrivalRule = true
	}
	if onePerWindow(&sp) {
		cc.anyPace = true
	}
	cc.specs = append(cc.specs, sp)
	return int32(len(cc.specs) - 1)
}

// scopeFor returns the compiled scope config for a scope name.
func (cc *compiled) scopeFor(name string) (int, bool) {
	if i, ok := cc.scopeByName[name]; ok {
		return i, true
	}
	if cc.wildcard >= 0 {
		return cc.wildcard, true
	}
	return 0, false
}

// specsFor returns the spec list of (level, id) in a scope config.
func (sc *scopeCfg) specsFor(lv uint8, id string) []int32 {
	if m := sc.exact[lv]; m != nil {
		if l, ok := m[id]; ok {
			return l
		}
	}
	return sc.template[lv]
}

func (sc *scopeCfg) weight(tenant string) int64 {
	if w, ok := sc.weights[tenant]; ok {
		return w
	}
	return sc.defW
}

// amount is what a reservation debits from a bucket of spec sp: its need in
// the bucket's dimension, with the max output tokens in place of the output
// estimate on a max_tokens_on_arrival bucket, and without cached input on
// a bucket that excludes it.
// amountPlain is amount for a spec that is not max_tokens_on_arrival
// (compiled.anyArrivalRule false).
func (sp *spec) amountPlain(r *res) int64 {
	a := r.Need[sp.dim]
	if sp.exclCached {
		a = max(0, a-r.Cached)
	}
	return a
}

func (sp *spec) amount(r *res) int64 {
	a := r.Need[sp.dim]
	if sp.arrival && r.MaxOut > r.Need[dOutput] {
		a += r.MaxOut - r.Need[dOutput]
	}
	if sp.exclCached {
		a -= r.Cached
		if a < 0 {
			a = 0
		}
	}
	return a
}

// classOf returns the index of the class named name. A document has a few
// classes, so comparing the names (length first) beats hashing one for the
// map; classIdx answers for a long list. Names are unique (validate), so
// both find the same index.
func (cc *compiled) classOf(name string) (int32, bool) {
	if len(cc.classNames) > 8 {
		ci, ok := cc.classIdx[name]
		return ci, ok
	}
	for i, n := range cc.classNames {
		if n == name {
			return int32(i), true
		}
	}
	return 0, false
}

// dimension returns the schemas name of a dimension index.
func dimension(d uint8) schemas.Dimension {
	if int(d) < len(schemas.Dimensions) {
		return schemas.Dimensions[d]
	}
	return ""
}
