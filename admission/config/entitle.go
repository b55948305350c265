package config

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/ledger"
)

// Entitlements reach the ledger too: the gateway refuses a request beyond
// them (services/gateway/entitle.go), and the ledger document it publishes
// (ConfigChanged, LedgerJSON) carries the same entitlements, so that the
// ledger refuses a ReserveRequested that did not come through a gateway —
// written straight to sluice.requests — with the same codes (ledger
// entitle.go). The section is the gateway's to write: whatever
// `entitlements` the ledger document had is replaced by the tenants',
// teams', keys' and partners' entitlements of this configuration (the
// admin API's state overlays them, so its changes reach the ledger with
// the next ConfigChanged).

// publishEntitlements replaces lc's entitlements by this configuration's
// and re-encodes the ledger document; add reports what the ledger could
// not tell apart.
func (c *Config) publishEntitlements(lc *ledger.Config, add func(string, string, ...any)) {
	lc.Entitlements = nil
	for i := range c.Tenants {
		t := &c.Tenants[i]
		if t.Partner != "" && t.PartnerEntitlement.Bounds() {
			lc.Entitlements = append(lc.Entitlements, c.ledgerEntitlement(ledger.EntitlementConfig{Tenant: t.ID, Holder: "partner:" + t.Partner}, &t.PartnerEntitlement))
		}
		if t.Entitlement.Bounds() {
			lc.Entitlements = append(lc.Entitlements, c.ledgerEntitlement(ledger.EntitlementConfig{Tenant: t.ID}, &t.Entitlement))
		}
		for j := range t.Teams {
			if tm := &t.Teams[j]; tm.Bounds() {
				lc.Entitlements = append(lc.Entitlements, c.ledgerEntitlement(ledger.EntitlementConfig{Tenant: t.ID, Team: tm.ID}, &tm.Entitlement))
			}
		}
		// The ledger knows a key by its id (the event's key_id): two keys
		// of one tenant with one id and an entitlement could not be told
		// apart there.
		bounded := map[string]int{}
		for j := range t.Keys {
			k := &t.Keys[j]
			if !k.Bounds() {
				continue
			}
			if first, dup := bounded[k.ID]; dup {
				add(fmt.Sprintf("tenants[%d].keys[%d].id", i, j), "%q is also keys[%d]'s id, and both have an entitlement; the ledger knows keys by id (give each key its own id)", k.ID, first)
				continue
			}
			bounded[k.ID] = j
			lc.Entitlements = append(lc.Entitlements, c.ledgerEntitlement(ledger.EntitlementConfig{Tenant: t.ID, Key: k.ID}, &k.Entitlement))
		}
	}
	b, err := json.Marshal(lc)
	if err != nil {
		add("ledger", "%v", err)
		return
	}
	c.ledgerJSON = b
}

// ledgerEntitlement is e in the ledger's terms: classes and priority as
// they are, the allowed public models as the profiles their routes'
// candidates reserve on (the ledger meters profiles: the event's route).
func (c *Config) ledgerEntitlement(le ledger.EntitlementConfig, e *Entitlement) ledger.EntitlementConfig {
	le.AllowedClasses = slices.Clone(e.AllowedClasses)
	if e.MaxPriority != nil {
		p := *e.MaxPriority
		le.MaxPriority = &p
	}
	for _, m := range e.AllowedModels {
		r := c.routes[m]
		if r == nil {
			continue // reported by checkEntitledNames
		}
		for _, cd := range r.Candidates {
			if !slices.Contains(le.AllowedProfiles, cd.Profile) {
				le.AllowedProfiles = append(le.AllowedProfiles, cd.Profile)
			}
		}
	}
	slices.Sort(le.AllowedProfiles)
	return le
}

// LedgerEntitlements are the entitlements of the ledger document this
// configuration publishes (for tests and tools; LedgerJSON carries them).
func (c *Config) LedgerEntitlements() ([]ledger.EntitlementConfig, error) {
	var doc struct {
		Entitlements []ledger.EntitlementConfig `json:"entitlements"`
	}
	if err := json.Unmarshal(c.ledgerJSON, &doc); err != nil {
		return nil, fmt.Errorf("config: ledger document: %w", err)
	}
	return doc.Entitlements, nil
}
