package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// Actor is who asks for a change: the operator (any tenant, partners,
// limits) or a partner (only its own sub-tenants).
type Actor struct {
	// Partner is the partner's id; "" for the operator.
	Partner string
	// Name is the operator's self-declared name (X-Sluice-Actor), for the
	// audit trail only.
	Name string
}

// Operator reports whether a is the operator.
func (a Actor) Operator() bool { return a.Partner == "" }

// String is the actor as ConfigChanged.Actor records it.
func (a Actor) String() string {
	switch {
	case a.Partner != "":
		return "partner:" + a.Partner
	case a.Name != "":
		return "operator:" + a.Name
	}
	return "operator"
}

// OpKind names a change; with the ids it touches it is ConfigChanged.Change.
type OpKind string

// The changes the admin API makes.
const (
	OpTenantCreate OpKind = "tenant.create"
	OpTenantDelete OpKind = "tenant.delete"
	OpTenantPause  OpKind = "tenant.pause"
	OpTenantResume OpKind = "tenant.resume"
	OpTenantLimits OpKind = "tenant.limits"
	OpTeamCreate   OpKind = "team.create"
	OpTeamDelete   OpKind = "team.delete"
	OpTeamLimits   OpKind = "team.limits"
	OpKeyCreate    OpKind = "key.create"
	OpKeyRotate    OpKind = "key.rotate"
	OpKeyRevoke    OpKind = "key.revoke"
	OpKeyPause     OpKind = "key.pause"
	OpKeyResume    OpKind = "key.resume"
	OpKeyLimits    OpKind = "key.limits"
	// The entitlements of a tenant, a team or a key (and a key's expiry):
	// what their requests may ask for (config.Entitlement).
	OpTenantEntitle  OpKind = "tenant.entitlements"
	OpTeamEntitle    OpKind = "team.entitlements"
	OpKeyEntitle     OpKind = "key.entitlements"
	OpPartnerEntitle OpKind = "partner.entitlements"
	OpPartnerCreate  OpKind = "partner.create"
	OpPartnerAllot   OpKind = "partner.allotment"
	OpPartnerRotate  OpKind = "partner.rotate"
	// OpLedgerCalibrate replaces the ledger document with a calibrated one
	// (`sluice config apply`; not an HTTP route): once the admin API has
	// made a change, the admin state's document is the one that runs, so
	// the weekly calibration patches it here rather than in the file.
	OpLedgerCalibrate OpKind = "ledger.calibrate"
)

const (
	maxIDLen          = 128
	maxLimitsPerLevel = 64
	maxModelsPerLevel = 256
)

// Op is one parsed change. The ids name what it touches; the other fields
// are its body. SecretSHA256 is the hash of a secret the handler made (a
// new key or partner token): Apply never sees a secret and never draws
// randomness, so the same state and op always give the same result.
type Op struct {
	Kind    OpKind
	Tenant  string
	Team    string
	Key     string
	Partner string

	Org          string
	PartnerOwner string // tenant.create by the operator: the owning partner
	KeyDefaults  Key    // key.create: team, app, class, priority, deadline, entitlement, expiry
	// Entitlement (and ExpiresAt, for a key) of the *.entitlements changes.
	Entitlement  config.Entitlement
	ExpiresAt    string
	Limits       []Limit
	Name         string // partner.create
	SecretSHA256 string
	Ledger       json.RawMessage // ledger.calibrate: the new ledger document
	// Source is ConfigChanged.Source for this change ("" = Source, the
	// admin API; ledger.calibrate passes the calibration report's).
	Source string
}

// Change is the one-line description of op for the audit trail.
func (op Op) Change() string {
	var sb strings.Builder
	sb.WriteString(string(op.Kind))
	for _, kv := range [][2]string{{"partner", op.Partner}, {"tenant", op.Tenant}, {"team", op.Team}, {"key", op.Key}} {
		if kv[1] != "" {
			fmt.Fprintf(&sb, " %s=%s", kv[0], kv[1])
		}
	}
	return sb.String()
}

func bad(code, format string, a ...any) *apierr.Error {
	return apierr.New(http.StatusBadRequest, code, fmt.Sprintf(format, a...))
}

func notFound(what, id string) *apierr.Error {
	return apierr.New(http.StatusNotFound, apierr.CodeNotFound, fmt.Sprintf("no %s %q", what, id))
}

func exists(what, id string) *apierr.Error {
	return apierr.New(http.StatusConflict, apierr.CodeAlreadyExists, fmt.Sprintf("%s %q already exists", what, id))
}

func operatorOnly(what string) *apierr.Error {
	return apierr.New(http.StatusForbidden, apierr.CodeOperatorRequired, what+" is for the operator only")
}

// validID accepts ids that are safe in a bucket path ("tenant:acme/key:k1")
// and in a URL path segment.
func validID(field, id string) *apierr.Error {
	if id == "" {
		return bad(apierr.CodeMissingField, "%s: required", field)
	}
	if len(id) > maxIDLen {
		return bad(apierr.CodeInvalidValue, "%s: longer than %d bytes", field, maxIDLen)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return bad(apierr.CodeInvalidValue, "%s: %q may hold only letters, digits, '-', '_' and '.'", field, id)
		}
	}
	if id == "*" {
		return bad(apierr.CodeInvalidValue, "%s: \"*\" is the ledger's template id", field)
	}
	return nil
}

// partnerPrefix is the prefix every id a partner creates must carry, so
// that two partners' ids never collide and "already exists" never tells
// one partner about another's tenants.
func partnerPrefix(p string) string { return p + "." }

// Apply computes the state after op by a. It is pure: the same inputs give
// the same state byte for byte. Errors are the client's (4xx); a tenant
// that a partner does not own is reported exactly like one that does not
// exist (404), so a partner learns nothing about other partners.
func Apply(s State, a Actor, op Op) (State, *apierr.Error) {
	n := s.Clone()
	if e := apply(&n, a, op); e != nil {
		return s, e
	}
	n.Version = s.Version + 1
	return n, nil
}

// apply applies op to s in place (Apply works on a clone). Changes that
// belong to no tenant come first; every other change needs a tenant the
// actor may see and a partner's grant to make it (applyTenant).
func apply(s *State, a Actor, op Op) *apierr.Error {
	switch op.Kind {
	case OpPartnerCreate, OpPartnerAllot, OpPartnerRotate, OpPartnerEntitle:
		if !a.Operator() {
			return operatorOnly("managing partners")
		}
		return applyPartner(s, op)
	case OpTenantCreate:
		return createTenant(s, a, op)
	case OpLedgerCalibrate:
		if !a.Operator() {
			return operatorOnly("calibrating the ledger")
		}
		if len(op.Ledger) == 0 {
			return bad(apierr.CodeInvalidRequest, "ledger.calibrate without a ledger document")
		}
		s.Ledger = append(json.RawMessage(nil), op.Ledger...)
		return nil
	}
	t := s.tenant(op.Tenant)
	if t == nil || (!a.Operator() && t.Partner != a.Partner) {
		return notFound("tenant", op.Tenant)
	}
	if e := partnerGrants(s, a, op); e != nil {
		return e
	}
	return applyTenant(s, a, t, op)
}

// applyTenant applies a change to tenant t, one of its teams
// (applyTeam) or, failing those, one of its keys (applyKey). An unknown
// kind is refused there, after the tenant and the key are looked up, as it
// always was.
func applyTenant(s *State, a Actor, t *Tenant, op Op) *apierr.Error {
	switch op.Kind {
	case OpTenantDelete:
		return deleteTenant(s, t)
	case OpTenantPause, OpTenantResume:
		t.Paused = op.Kind == OpTenantPause
		return nil
	case OpTenantLimits:
		return setLimits(s, ledger.LevelTenant, t.ID, op.Limits)
	case OpTenantEntitle:
		t.Entitlement = op.Entitlement
		return nil
	case OpTeamCreate:
		return createTeam(s, a, t, op.Team)
	case OpTeamDelete, OpTeamLimits, OpTeamEntitle:
		if !slices.Contains(t.Teams, op.Team) {
			return notFound("team", op.Team)
		}
		return applyTeam(s, t, op)
	case OpKeyCreate:
		return createKey(s, a, t, op)
	}
	k := t.key(op.Key)
	if k == nil {
		return notFound("key", op.Key)
	}
	return applyKey(s, k, op)
}

// applyTeam applies a change to an existing team of t. A team is deleted
// only once none of its keys is live (revoke or move them first); its
// entitlement and its buckets go with it.
func applyTeam(s *State, t *Tenant, op Op) *apierr.Error {
	if op.Kind == OpTeamLimits {
		return setLimits(s, ledger.LevelTeam, op.Team, op.Limits)
	}
	if op.Kind == OpTeamEntitle {
		setTeamEntitlement(t, op.Team, op.Entitlement)
		return nil
	}
	for _, k := range t.Keys {
		if k.Team == op.Team && !k.Revoked {
			return apierr.New(http.StatusConflict, apierr.CodeInvalidValue, fmt.Sprintf("team %q still has key %q: revoke it or move it first", op.Team, k.ID))
		}
	}
	t.Teams = slices.DeleteFunc(t.Teams, func(x string) bool { return x == op.Team })
	setTeamEntitlement(t, op.Team, config.Entitlement{})
	return dropBuckets(s, ledger.LevelTeam, op.Team)
}

// applyKey applies a change to an existing key. A revoked key is not
// rotated back to life (create a new one), and a new secret must be unique
// across the state, as a key is found by its hash.
func applyKey(s *State, k *Key, op Op) *apierr.Error {
	switch op.Kind {
	case OpKeyRotate:
		if k.Revoked {
			return apierr.New(http.StatusConflict, apierr.CodeKeyDisabled, fmt.Sprintf("key %q is revoked; create a new key", k.ID))
		}
		if e := uniqueHash(s, op.SecretSHA256); e != nil {
			return e
		}
		k.SHA256 = op.SecretSHA256
	case OpKeyRevoke:
		k.Revoked = true
	case OpKeyPause, OpKeyResume:
		k.Paused = op.Kind == OpKeyPause
	case OpKeyLimits:
		return setLimits(s, ledger.LevelKey, k.ID, op.Limits)
	case OpKeyEntitle:
		k.Entitlement, k.ExpiresAt = op.Entitlement, op.ExpiresAt
	default:
		return bad(apierr.CodeInvalidRequest, "unknown change %q", op.Kind)
	}
	return nil
}

func createTenant(s *State, a Actor, op Op) *apierr.Error {
	if e := validID("id", op.Tenant); e != nil {
		return e
	}
	owner, org := op.PartnerOwner, op.Org
	if !a.Operator() {
		owner = a.Partner
		if !strings.HasPrefix(op.Tenant, partnerPrefix(a.Partner)) {
			return bad(apierr.CodeInvalidValue, "id: a partner's tenant ids start with %q", partnerPrefix(a.Partner))
		}
	}
	if owner != "" {
		if s.partner(owner) == nil {
			return notFound("partner", owner)
		}
		if org != "" && org != owner {
			return bad(apierr.CodeInvalidValue, "org: a partner's tenants belong to the partner's org %q (its allotment)", owner)
		}
		org = owner // the allotment is the org level with the partner's id
	}
	if s.tenant(op.Tenant) != nil {
		return exists("tenant", op.Tenant)
	}
	s.Tenants = append(s.Tenants, Tenant{ID: op.Tenant, Org: org, Partner: owner})
	if len(op.Limits) > 0 {
		return setLimits(s, ledger.LevelTenant, op.Tenant, op.Limits)
	}
	return nil
}

func deleteTenant(s *State, t *Tenant) *apierr.Error {
	id := t.ID
	for _, tm := range t.Teams {
		if e := dropBuckets(s, ledger.LevelTeam, tm); e != nil {
			return e
		}
	}
	for _, k := range t.Keys {
		if e := dropBuckets(s, ledger.LevelKey, k.ID); e != nil {
			return e
		}
	}
	s.Tenants = slices.DeleteFunc(s.Tenants, func(x Tenant) bool { return x.ID == id })
	return dropBuckets(s, ledger.LevelTenant, id)
}

func createTeam(s *State, a Actor, t *Tenant, team string) *apierr.Error {
	if e := validID("id", team); e != nil {
		return e
	}
	if !a.Operator() && !strings.HasPrefix(team, partnerPrefix(a.Partner)) {
		return bad(apierr.CodeInvalidValue, "id: a partner's team ids start with %q", partnerPrefix(a.Partner))
	}
	// Team ids are global in the ledger (level team, id = the team), so a
	// team belongs to one tenant.
	for _, o := range s.Tenants {
		if slices.Contains(o.Teams, team) {
			return exists("team", team)
		}
	}
	t.Teams = append(t.Teams, team)
	return nil
}

func createKey(s *State, a Actor, t *Tenant, op Op) *apierr.Error {
	if e := validID("id", op.Key); e != nil {
		return e
	}
	if !a.Operator() && !strings.HasPrefix(op.Key, partnerPrefix(a.Partner)) {
		return bad(apierr.CodeInvalidValue, "id: a partner's key ids start with %q", partnerPrefix(a.Partner))
	}
	for _, o := range s.Tenants {
		if o.key(op.Key) != nil {
			return exists("key", op.Key)
		}
	}
	if e := uniqueHash(s, op.SecretSHA256); e != nil {
		return e
	}
	k := op.KeyDefaults
	if k.Team != "" && !slices.Contains(t.Teams, k.Team) {
		return bad(apierr.CodeInvalidValue, "team: %q is not a team of tenant %q (create it first)", k.Team, t.ID)
	}
	if k.Priority < -100 || k.Priority > 100 {
		return bad(apierr.CodeInvalidValue, "priority: %d out of [-100, 100]", k.Priority)
	}
	k.ID, k.SHA256, k.Revoked, k.Paused = op.Key, op.SecretSHA256, false, false
	t.Keys = append(t.Keys, k)
	return nil
}

// partnerGrants refuses an entitlement a partner gives beyond its own: a
// partner grants only what it holds. (Its own bounds every request of its
// sub-tenants anyway; refusing says so instead of quietly narrowing.)
func partnerGrants(s *State, a Actor, op Op) *apierr.Error {
	if a.Operator() {
		return nil
	}
	e := op.Entitlement
	switch op.Kind {
	case OpKeyCreate:
		e = op.KeyDefaults.Entitlement
	case OpTenantEntitle, OpTeamEntitle, OpKeyEntitle:
	default:
		return nil
	}
	p := s.partner(a.Partner)
	if p == nil {
		return nil
	}
	if why := p.Exceeds(&e); why != "" {
		return apierr.New(http.StatusForbidden, apierr.CodeEntitlementExceeded, "partner "+p.ID+" cannot grant beyond its own entitlement: "+why)
	}
	return nil
}

// setTeamEntitlement sets (or, with a zero e, removes) team's entitlement.
func setTeamEntitlement(t *Tenant, team string, e config.Entitlement) {
	if !e.Bounds() {
		delete(t.TeamEntitlements, team)
		if len(t.TeamEntitlements) == 0 {
			t.TeamEntitlements = nil
		}
		return
	}
	if t.TeamEntitlements == nil {
		t.TeamEntitlements = map[string]config.Entitlement{}
	}
	t.TeamEntitlements[team] = e
}

func uniqueHash(s *State, h string) *apierr.Error {
	if len(h) != 64 {
		return apierr.New(http.StatusInternalServerError, apierr.CodeInternal, "admin: secret hash missing")
	}
	for _, t := range s.Tenants {
		for _, k := range t.Keys {
			if k.SHA256 == h {
				return apierr.New(http.StatusConflict, apierr.CodeAlreadyExists, "that secret is already in use; try again")
			}
		}
	}
	return nil
}

func applyPartner(s *State, op Op) *apierr.Error {
	switch op.Kind {
	case OpPartnerCreate:
		if e := validID("id", op.Partner); e != nil {
			return e
		}
		if s.partner(op.Partner) != nil {
			return exists("partner", op.Partner)
		}
		for _, t := range s.Tenants {
			if t.Org == op.Partner {
				return bad(apierr.CodeInvalidValue, "id: %q is already an org id of tenant %q; a partner's id is its sub-tenants' org", op.Partner, t.ID)
			}
		}
		s.Partners = append(s.Partners, Partner{ID: op.Partner, Name: op.Name, TokenSHA256: op.SecretSHA256, Entitlement: op.Entitlement})
		return setLimits(s, ledger.LevelOrg, op.Partner, op.Limits)
	}
	p := s.partner(op.Partner)
	if p == nil {
		return notFound("partner", op.Partner)
	}
	if op.Kind == OpPartnerRotate {
		p.TokenSHA256 = op.SecretSHA256
		return nil
	}
	if op.Kind == OpPartnerEntitle {
		p.Entitlement = op.Entitlement
		return nil
	}
	return setLimits(s, ledger.LevelOrg, p.ID, op.Limits)
}

// dropBuckets removes every bucket of (level, id) from every scope.
func dropBuckets(s *State, level, id string) *apierr.Error {
	return setLimits(s, level, id, nil)
}

// setLimits replaces every bucket of (level, id), in every scope, by
// limits. A limit without a scope applies to every scope of the document.
func setLimits(s *State, level, id string, limits []Limit) *apierr.Error {
	if len(limits) > maxLimitsPerLevel {
		return bad(apierr.CodeInvalidValue, "limits: %d entries, at most %d", len(limits), maxLimitsPerLevel)
	}
	doc, err := s.ledgerDoc()
	if err != nil {
		return apierr.New(http.StatusInternalServerError, apierr.CodeInternal, err.Error())
	}
	for i := range doc.Scopes {
		doc.Scopes[i].Buckets = slices.DeleteFunc(doc.Scopes[i].Buckets, func(b ledger.BucketConfig) bool {
			return b.Level == level && b.ID == id
		})
		if level == ledger.LevelTenant && limits == nil {
			doc.Scopes[i].Tenants = slices.DeleteFunc(doc.Scopes[i].Tenants, func(t ledger.TenantConfig) bool { return t.ID == id })
		}
	}
	for i, l := range limits {
		at := fmt.Sprintf("limits[%d]", i)
		if !slices.Contains(schemas.Dimensions, schemas.Dimension(l.Dimension)) {
			return bad(apierr.CodeInvalidValue, "%s.dimension: %q is not a dimension", at, l.Dimension)
		}
		if l.Capacity <= 0 {
			return bad(apierr.CodeInvalidValue, "%s.capacity: must be positive", at)
		}
		if split, _, sub := ledger.SplitOf(l.Scope); sub && slices.ContainsFunc(doc.Scopes, func(sc ledger.ScopeConfig) bool { return sc.Name == l.Scope }) {
			// Its sub-scopes hold shares of one limit (limitsOf shows their sum).
			return bad(apierr.CodeInvalidValue, "%s.scope: %q is a sub-scope of split scope %q: name the scope, whose sub-scopes each get their share of the limit", at, l.Scope, split)
		}
		b := ledger.BucketConfig{Level: level, ID: id, Dimension: schemas.Dimension(l.Dimension), Refill: l.Refill,
			Capacity: l.Capacity, PeriodMs: l.PeriodMs, WindowMs: l.WindowMs}
		found := false
		for si := range doc.Scopes {
			sc := &doc.Scopes[si]
			if name, _, _ := ledger.SplitOf(sc.Name); l.Scope != "" && sc.Name != l.Scope && name != l.Scope {
				continue // a limit of a split scope goes to each of its sub-scopes, divided
			}
			found = true
			sb := b
			if name, i, sub := ledger.SplitOf(sc.Name); sub {
				var why string // a tenant's or team's limit is divided among the sub-scopes
				if sb, why = ledger.SplitLimit(b, doc.ScopePartitions(name), i); why != "" {
					return bad(apierr.CodeInvalidValue, "%s: %s", at, why)
				}
			}
			sc.Buckets = append(sc.Buckets, sb)
		}
		if !found {
			return bad(apierr.CodeInvalidValue, "%s.scope: %q is not a scope of the ledger document", at, l.Scope)
		}
	}
	s.setLedgerDoc(doc)
	return nil
}
