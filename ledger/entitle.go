package ledger

import (
	"fmt"

	"github.com/sluice-dev/sluice/schemas"
)

// Entitlements: the ledger checks the gateway's rule (services/gateway,
// entitle.go) on every ReserveRequested and RetryRequested, so that an
// event that did not come through a gateway — written straight to
// sluice.requests — cannot promote a request to a class, a priority or a
// route its tenant, team or key is not entitled to (as required_levels
// keeps it from dodging a level). The entitlements travel in the ledger's
// own document (ConfigChanged), so replay decides as the live ledger did.
// A refusal reserves nothing and asks for no retry (retry class
// request_error), like path_missing_level.

// EntitlementConfig is one holder's entitlement: what requests of a
// tenant, of one team of it or of one key of it may ask for. Every
// entitlement that matches a request must allow it (they narrow, they
// never widen). Team and key ids are scoped by their tenant, as the
// gateway's are.
type EntitlementConfig struct {
	// Tenant is the tenant id (the event's tenant or its path's tenant
	// level). Required.
	Tenant string `json:"tenant"`
	// Team, when set, makes this the entitlement of that team of Tenant
	// (the path's team level); Key, of that key (the event's key_id or the
	// path's key level). At most one of them.
	Team string `json:"team,omitempty"`
	Key  string `json:"key,omitempty"`
	// Holder names the entitlement in refusals when it is not the level's
	// own: a partner's entitlement bounds each of its sub-tenants and is
	// written once per sub-tenant with holder "partner:<id>". Empty: the
	// level and id ("tenant:acme", "team:web", "key:batch-key").
	Holder string `json:"holder,omitempty"`
	// AllowedClasses are the classes the holder's requests may use (empty:
	// any class of the document).
	AllowedClasses []string `json:"allowed_classes,omitempty"`
	// MaxPriority caps ReserveRequested.Priority (nil: no cap).
	MaxPriority *int32 `json:"max_priority,omitempty"`
	// AllowedProfiles are the routes (model profiles: the event's route)
	// the holder's requests may be reserved on (empty: any). The ledger
	// meters profiles, not public model names, so the gateway writes a
	// model allowlist as the profiles of every candidate of the allowed
	// models' routes.
	AllowedProfiles []string `json:"allowed_profiles,omitempty"`
}

// entitlementsMax bounds the entitlements of one document (every bounded
// tenant, team and key of a fleet; the document must fit one record).
const entitlementsMax = 100_000

// holderName is how refusals name the entitlement's holder.
func (e *EntitlementConfig) holderName() string {
	switch {
	case e.Holder != "":
		return e.Holder
	case e.Team != "":
		return LevelTeam + ":" + e.Team
	case e.Key != "":
		return LevelKey + ":" + e.Key
	}
	return LevelTenant + ":" + e.Tenant
}

// diffKey identifies the entitlement in a config diff.
func (e *EntitlementConfig) diffKey() string {
	k := e.Tenant
	if e.Team != "" {
		k += "/team:" + e.Team
	}
	if e.Key != "" {
		k += "/key:" + e.Key
	}
	if e.Holder != "" {
		k += "/" + e.Holder
	}
	return k
}

// validateEntitlements reports every problem of c.Entitlements: a missing
// tenant, team and key both set, a class the document does not define, a
// priority out of range, a duplicate, an entitlement that bounds nothing.
func validateEntitlements(c *Config, classSeen map[string]bool, bad func(loc, format string, a ...any)) {
	if len(c.Entitlements) > entitlementsMax {
		bad("entitlements", "%d entries, at most %d", len(c.Entitlements), entitlementsMax)
		return
	}
	seen := map[string]bool{}
	for i := range c.Entitlements {
		e := &c.Entitlements[i]
		loc := fmt.Sprintf("entitlements[%d]", i)
		for _, f := range [...]struct{ name, v string }{{"tenant", e.Tenant}, {"team", e.Team}, {"key", e.Key}, {"holder", e.Holder}} {
			if len(f.v) > maxStrLen {
				bad(loc+"."+f.name, "longer than %d bytes", maxStrLen)
			}
		}
		if e.Tenant == "" {
			bad(loc+".tenant", "required (team and key ids are scoped by their tenant)")
		}
		if e.Team != "" && e.Key != "" {
			bad(loc, "names both team %q and key %q; an entitlement is one holder's", e.Team, e.Key)
		}
		if k := e.diffKey(); seen[k] {
			bad(loc, "duplicate entitlement of %s (merge them)", e.holderName())
		} else {
			seen[k] = true
		}
		if len(e.AllowedClasses) == 0 && e.MaxPriority == nil && len(e.AllowedProfiles) == 0 {
			bad(loc, "bounds nothing (set allowed_classes, max_priority or allowed_profiles)")
		}
		for j, cl := range e.AllowedClasses {
			if !classSeen[cl] {
				bad(fmt.Sprintf("%s.allowed_classes[%d]", loc, j), "%q is not a class of the document", cl)
			}
		}
		if p := e.MaxPriority; p != nil && (*p < -maxPriority || *p > maxPriority) {
			bad(loc+".max_priority", "%d out of [-%d, %d]", *p, maxPriority, maxPriority)
		}
		for j, p := range e.AllowedProfiles {
			if p == "" || len(p) > maxStrLen {
				bad(fmt.Sprintf("%s.allowed_profiles[%d]", loc, j), "empty or longer than %d bytes", maxStrLen)
			}
		}
	}
}

// entRule is one compiled entitlement.
type entRule struct {
	holder   string
	classes  []bool // by class index; nil: any class
	maxPri   int32
	hasMax   bool
	profiles map[string]bool // nil: any route
}

// entKey finds a holder's rules: the tenant, and the team or key level
// with its id (lvl 0 and id "" for the tenant's own).
type entKey struct {
	tenant string
	lvl    uint8
	id     string
}

// entitlements is the compiled form of Config.Entitlements; nil when the
// document has none, so the check costs nothing then.
type entitlements struct {
	rules []entRule
	by    map[entKey][]int32
	teams bool // some rule is a team's: the path's team level is looked at
}

func compileEntitlements(c *Config, classIdx map[string]int32) *entitlements {
	if len(c.Entitlements) == 0 {
		return nil
	}
	es := &entitlements{by: map[entKey][]int32{}}
	for i := range c.Entitlements {
		e := &c.Entitlements[i]
		r := entRule{holder: e.holderName()}
		if len(e.AllowedClasses) > 0 {
			r.classes = make([]bool, len(c.Classes))
			for _, cl := range e.AllowedClasses {
				if ci, ok := classIdx[cl]; ok {
					r.classes[ci] = true
				}
			}
		}
		if e.MaxPriority != nil {
			r.maxPri, r.hasMax = *e.MaxPriority, true
		}
		if len(e.AllowedProfiles) > 0 {
			r.profiles = make(map[string]bool, len(e.AllowedProfiles))
			for _, p := range e.AllowedProfiles {
				r.profiles[p] = true
			}
		}
		k := entKey{tenant: e.Tenant}
		switch {
		case e.Team != "":
			k.lvl, k.id = lvTeam, e.Team
			es.teams = true
		case e.Key != "":
			k.lvl, k.id = lvKey, e.Key
		}
		es.by[k] = append(es.by[k], int32(len(es.rules)))
		es.rules = append(es.rules, r)
	}
	return es
}

// Level codes the entitlements look at (levelNames order).
const (
	lvTenant uint8 = 2
	lvTeam   uint8 = 3
	lvKey    uint8 = 4
)

// entWho is whom a request is: its tenants (the event's and its path's,
// both held to account, so a forged event cannot name one in the envelope
// and another in the path to slip an entitlement), its team and its keys.
type entWho struct {
	tenants [2]string
	team    string
	keys    [2]string
}

// whoOf reads a request's identity from its envelope and path, as
// resolvePath reads the path: the first entry of each level.
func whoOf(ev *schemas.Event, path []schemas.PathLevel) entWho {
	w := entWho{tenants: [2]string{ev.Tenant}, keys: [2]string{ev.KeyID}}
	var seen [numLevels]bool
	for _, p := range path {
		lv, ok := levelCode(p.Level)
		if !ok || seen[lv] || len(p.ID) > maxStrLen {
			continue
		}
		seen[lv] = true
		switch lv {
		case lvTenant:
			if p.ID != ev.Tenant {
				w.tenants[1] = p.ID
			}
		case lvTeam:
			w.team = p.ID
		case lvKey:
			if p.ID != ev.KeyID {
				w.keys[1] = p.ID
			}
		}
	}
	return w
}

// entitlementFault checks a request of class ci at priority pri on route
// against every entitlement that matches who: "" when all allow it, else
// the reason and the holder of the first that does not. As the gateway
// does, classes and priorities are checked before routes, holders in the
// document's order (partner, tenant, team, key as the gateway writes
// them) within each.
func (es *entitlements) fault(who *entWho, ci int32, pri int32, route string) (schemas.Reason, string) {
	if es == nil {
		return "", ""
	}
	for pass := 0; pass < 2; pass++ {
		for _, t := range who.tenants {
			if t == "" {
				continue
			}
			if why, h := es.check(entKey{tenant: t}, pass, ci, pri, route); why != "" {
				return why, h
			}
			if who.team != "" && es.teams {
				if why, h := es.check(entKey{tenant: t, lvl: lvTeam, id: who.team}, pass, ci, pri, route); why != "" {
					return why, h
				}
			}
			for _, k := range who.keys {
				if k == "" {
					continue
				}
				if why, h := es.check(entKey{tenant: t, lvl: lvKey, id: k}, pass, ci, pri, route); why != "" {
					return why, h
				}
			}
		}
	}
	return "", ""
}

func (es *entitlements) check(k entKey, pass int, ci int32, pri int32, route string) (schemas.Reason, string) {
	for _, ri := range es.by[k] {
		r := &es.rules[ri]
		if pass == 0 {
			if r.classes != nil && !r.classes[ci] {
				return schemas.ReasonClassNotEntitled, r.holder
			}
			if r.hasMax && pri > r.maxPri {
				return schemas.ReasonPriorityNotEntitled, r.holder
			}
		} else if r.profiles != nil && !r.profiles[route] {
			return schemas.ReasonModelNotAllowed, r.holder
		}
	}
	return "", ""
}

// refuseNotEntitled denies ev for an entitlement: nothing reserved, no
// retry asked for, LimitPath naming the holder. It is a policy refusal
// (the gateway's own refusal of the same request is rejected_policy).
func (l *Ledger) refuseNotEntitled(ev *schemas.Event, out []Output, why schemas.Reason, holder string) []Output {
	n := len(out)
	out = l.refuseEv(ev, out, why, schemas.RetryRequestError)
	if len(out) > n {
		out[n].Decision.LimitPath = holder
		out[n].Decision.GatewayDecision = schemas.GDRejectedPolicy
	}
	return out
}

// retryWho is the identity of a retry of reservation p: its tenant and
// key as the first attempt's event named them, its team, and the tenant
// and key levels of its resolved path.
func (l *Ledger) retryWho(p *res) entWho {
	w := entWho{tenants: [2]string{p.Tenant}, keys: [2]string{p.KeyID}, team: p.Team}
	for _, ni := range p.Path[:p.NPath] {
		n := &l.st.Nodes[ni]
		switch {
		case n.Lvl == lvTenant && n.ID != p.Tenant:
			w.tenants[1] = n.ID
		case n.Lvl == lvKey && n.ID != p.KeyID:
			w.keys[1] = n.ID
		}
	}
	return w
}

// pathTeam is the path's team id as resolvePath reads it ("" if none).
func pathTeam(path []schemas.PathLevel) string {
	for _, p := range path {
		if p.Level == LevelTeam && len(p.ID) <= maxStrLen {
			return p.ID
		}
	}
	return ""
}
