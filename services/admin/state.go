// Package admin is Sluice's admin API (/admin/v1): tenants, teams, API
// keys, limits per level, emergency pause, and partners who manage their
// own sub-tenants within an allotment.
//
// The admin state is event-sourced like everything else. A change is
// computed by a pure function of the current State (ops.go), validated
// against the gateway and ledger configuration, and committed as one Kafka
// transaction that writes the new State to the compacted admin topic (which
// every gateway follows) and a ConfigChanged with the new ledger document,
// the actor, the reason and a one-line change to every partition of
// sluice.requests (which every ledger partition applies at a known log
// position). Gateways and ledgers therefore see the same changes in the
// same order, or none of them. Concurrent writers on different gateways are
// serialised by Kafka's transactional fencing and an optimistic version
// check: a request names the version it read (base_version) and gets 409
// version_conflict if another change came first (store.go, kafka.go).
package admin

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
)

// State is the whole admin-managed configuration at one version: the
// gateway's tenants and keys, the partners, and the ledger's quota document
// (limits per level live there, as buckets). Version 0 is the seed taken
// from the gateway's file before the admin API made any change.
type State struct {
	Version  int64     `json:"version"`
	Tenants  []Tenant  `json:"tenants"`
	Partners []Partner `json:"partners"`
	// Ledger is the ledger.Config document with defaults filled.
	Ledger json.RawMessage `json:"ledger"`
}

// Tenant is a customer with its teams and keys. Partner names the partner
// that owns it ("" = managed by the operator only).
type Tenant struct {
	ID      string   `json:"id"`
	Org     string   `json:"org,omitempty"`
	Partner string   `json:"partner,omitempty"`
	Paused  bool     `json:"paused,omitempty"`
	Teams   []string `json:"teams,omitempty"`
	Keys    []Key    `json:"keys,omitempty"`
	// Entitlement bounds the classes, priority and models of every key of
	// the tenant (config.Entitlement).
	config.Entitlement
	// TeamEntitlements holds the entitlements of the tenant's teams that
	// have one.
	TeamEntitlements map[string]config.Entitlement `json:"team_entitlements,omitempty"`
}

// Key is one API key, known only by the SHA-256 of its secret.
type Key struct {
	ID     string `json:"id"`
	SHA256 string `json:"sha256"`
	Team   string `json:"team,omitempty"`
	App    string `json:"app,omitempty"`
	Class  string `json:"class,omitempty"`
	// Priority and DeadlineMs are the key's request defaults
	// (X-Sluice-Priority, X-Sluice-Deadline-Ms).
	Priority   int32 `json:"priority,omitempty"`
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
	// Revoked keys answer 401 api_key_disabled; the id stays so that its
	// history keeps a name.
	Revoked bool `json:"revoked,omitempty"`
	Paused  bool `json:"paused,omitempty"`
	// Entitlement bounds this key's requests (within its team's and
	// tenant's); ExpiresAt (RFC 3339) ends the key.
	config.Entitlement
	ExpiresAt string `json:"expires_at,omitempty"`
}

// Partner is a reseller or platform that manages its own sub-tenants. Its
// token is known only by its SHA-256. Its allotment is the ledger's org
// level with the partner's id: every sub-tenant has that org, so the
// ledger enforces the allotment on every request, and the admin API keeps
// the sub-tenants' tenant-level limits within it.
type Partner struct {
	ID          string `json:"id"`
	Name        string `json:"name,omitempty"`
	TokenSHA256 string `json:"token_sha256"`
	// Entitlement bounds every request of the partner's sub-tenants (set
	// by the operator), whatever entitlements the partner gives them.
	config.Entitlement
}

// Limit is one bucket of a level: a capacity in a dimension, per period.
// Scope "" means every scope of the ledger document.
type Limit struct {
	Scope     string `json:"scope,omitempty"`
	Dimension string `json:"dimension"`
	Capacity  int64  `json:"capacity"`
	// Refill, PeriodMs and WindowMs default as in the ledger document
	// (ledger.BucketConfig): token buckets per minute with a 1 s window,
	// requests_per_day fixed per day, spend rolling per day.
	Refill   ledger.Refill `json:"refill,omitempty"`
	PeriodMs int64         `json:"period_ms,omitempty"`
	WindowMs int64         `json:"window_ms,omitempty"`
}

// Seed builds the version-0 state from a loaded gateway configuration: its
// tenants and keys and its ledger document. Teams are the keys' teams.
func Seed(c *config.Config) State {
	s := State{Ledger: append(json.RawMessage(nil), c.LedgerJSON()...)}
	for _, t := range c.Tenants {
		at := Tenant{ID: t.ID, Org: t.Org, Paused: t.Paused, Entitlement: t.Entitlement}
		for _, tm := range t.Teams {
			if tm.ID != "" && !slices.Contains(at.Teams, tm.ID) {
				at.Teams = append(at.Teams, tm.ID)
			}
			if tm.Bounds() {
				if at.TeamEntitlements == nil {
					at.TeamEntitlements = map[string]config.Entitlement{}
				}
				at.TeamEntitlements[tm.ID] = tm.Entitlement
			}
		}
		for _, k := range t.Keys {
			at.Keys = append(at.Keys, Key{ID: k.ID, SHA256: k.SHA256, Team: k.Team, App: k.App, Class: k.Class,
				Priority: k.Priority, DeadlineMs: k.DeadlineMs, Revoked: k.Disabled, Paused: k.Paused,
				Entitlement: k.Entitlement, ExpiresAt: k.ExpiresAt})
			if k.Team != "" && !slices.Contains(at.Teams, k.Team) {
				at.Teams = append(at.Teams, k.Team)
			}
		}
		s.Tenants = append(s.Tenants, at)
	}
	return s
}

// ConfigTenants converts the state's tenants to the gateway configuration's
// form (config.Config.WithAdmission).
func (s *State) ConfigTenants() []config.Tenant {
	out := make([]config.Tenant, 0, len(s.Tenants))
	for _, t := range s.Tenants {
		ct := config.Tenant{ID: t.ID, Org: t.Org, Paused: t.Paused, Entitlement: t.Entitlement}
		if p := s.partner(t.Partner); p != nil {
			ct.Partner, ct.PartnerEntitlement = p.ID, p.Entitlement
		}
		for _, tm := range t.Teams {
			if e, ok := t.TeamEntitlements[tm]; ok {
				ct.Teams = append(ct.Teams, config.Team{ID: tm, Entitlement: e})
			}
		}
		for _, k := range t.Keys {
			ct.Keys = append(ct.Keys, config.Key{ID: k.ID, SHA256: k.SHA256, Team: k.Team, App: k.App, Class: k.Class,
				Priority: k.Priority, DeadlineMs: k.DeadlineMs, Disabled: k.Revoked, Paused: k.Paused,
				Entitlement: k.Entitlement, ExpiresAt: k.ExpiresAt})
		}
		out = append(out, ct)
	}
	return out
}

// Clone returns a deep copy, so that a change never aliases the running
// state.
func (s *State) Clone() State {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("admin: marshal state: %v", err)) // plain data: cannot fail
	}
	var c State
	if err := json.Unmarshal(b, &c); err != nil {
		panic(fmt.Sprintf("admin: unmarshal state: %v", err))
	}
	return c
}

// tenant returns the tenant with id, or nil.
func (s *State) tenant(id string) *Tenant {
	for i := range s.Tenants {
		if s.Tenants[i].ID == id {
			return &s.Tenants[i]
		}
	}
	return nil
}

// partner returns the partner with id, or nil.
func (s *State) partner(id string) *Partner {
	for i := range s.Partners {
		if s.Partners[i].ID == id {
			return &s.Partners[i]
		}
	}
	return nil
}

// PartnerByTokenHash returns the partner whose token hashes to h, or nil.
func (s *State) PartnerByTokenHash(h string) *Partner {
	for i := range s.Partners {
		if s.Partners[i].TokenSHA256 == h {
			return &s.Partners[i]
		}
	}
	return nil
}

func (t *Tenant) key(id string) *Key {
	for i := range t.Keys {
		if t.Keys[i].ID == id {
			return &t.Keys[i]
		}
	}
	return nil
}

// ledgerDoc decodes the state's ledger document.
func (s *State) ledgerDoc() (ledger.Config, error) {
	var c ledger.Config
	if err := json.Unmarshal(s.Ledger, &c); err != nil {
		return c, fmt.Errorf("ledger document: %w", err)
	}
	return c, nil
}

func (s *State) setLedgerDoc(c ledger.Config) {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("admin: marshal ledger document: %v", err))
	}
	s.Ledger = b
}

// LimitsOf lists the buckets configured for (level, id), scope by scope.
func (s *State) LimitsOf(level, id string) []Limit {
	doc, err := s.ledgerDoc()
	if err != nil {
		return nil
	}
	return limitsOf(&doc, level, id)
}

// limitsOf lists (level, id)'s buckets of doc. A scope split over
// partitions (ledger/split.go) is one scope to the admin API: each of
// its sub-scopes holds a share of a tenant's or team's bucket (a copy of
// a key's), shown once under the scope's name with the shares summed
// (setLimits divides a limit of the scope among them, ledger.SplitLimit),
// in the limit's window as configured (a share's may be lengthened).
func limitsOf(doc *ledger.Config, level, id string) []Limit {
	out := []Limit{}
	first := map[string]int{} // split scope, dimension, refill → its row in out
	for _, sc := range doc.Scopes {
		name, i, split := ledger.SplitOf(sc.Name)
		for _, b := range sc.Buckets {
			if b.Level != level || b.ID != id {
				continue
			}
			k := name + "\x00" + string(b.Dimension) + "\x00" + string(b.Refill)
			if split && i > 0 {
				if j, ok := first[k]; ok && level != ledger.LevelKey && !b.Shadow {
					out[j].Capacity += b.Capacity // sub-scope i's share
				}
				continue
			}
			if split {
				first[k] = len(out)
			}
			w := b.WindowMs
			if split && b.LimitWindowMs > 0 {
				w = b.LimitWindowMs // the limit's window, not the share's lengthened one
			}
			out = append(out, Limit{Scope: name, Dimension: string(b.Dimension), Capacity: b.Capacity,
				Refill: b.Refill, PeriodMs: b.PeriodMs, WindowMs: w})
		}
	}
	return out
}
