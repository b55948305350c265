package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/services/admin"
)

// adminKeys is the admin state's API keys, by SHA-256, as the view uses
// them: a key that is not revoked opens its tenant's view. nil (no admin
// change yet, version 0) leaves the keys to the config file.
type adminKeys struct {
	tenant map[string]string // key SHA-256 → tenant
}

// newAdminKeys indexes an applied admin state. It reads the state through
// ConfigTenants, the very form a gateway overlays on its file
// (config.Config.WithAdmission), so the view and the gateways agree on
// which keys exist and which are revoked.
func newAdminKeys(st admin.State) *adminKeys {
	k := &adminKeys{tenant: map[string]string{}}
	for _, t := range st.ConfigTenants() {
		for _, key := range t.Keys {
			if !key.Disabled {
				k.tenant[strings.ToLower(key.SHA256)] = t.ID
			}
		}
	}
	return k
}

// followAdmin makes the view's keys follow the admin topic as every
// gateway does (admin.OpenKafka: read_committed, newest state wins). It
// returns once every admin state committed before the call is applied, so
// a key revoked before the view started never opens a view. It never
// writes (ReadOnly): the view's Kafka principal needs only Read on the
// admin topic, never the Write that would let it forge an admin state.
//
// The precedence is the gateway's (docs/admin-api.md): before the first
// admin change the keys are the file's; after it they are the admin
// state's alone, and a file reload does not bring the file's keys back.
func (k *viewKeys) followAdmin(ctx context.Context, brokers []string, names bus.Names) (*admin.KafkaStore, error) {
	st, err := admin.OpenKafka(ctx, admin.KafkaConfig{Brokers: brokers, Names: names, Log: k.log,
		OnApply: k.applyAdmin, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("live view: follow the admin topic: %w", err)
	}
	return st, nil
}

// applyAdmin is the admin store's OnApply: it is called in commit order
// with every state past version 0.
func (k *viewKeys) applyAdmin(st admin.State) {
	if st.Version == 0 {
		return
	}
	k.admin.Store(newAdminKeys(st))
	k.log.Info("live view: admin keys installed", "version", st.Version, "tenants", len(st.Tenants))
}

// lookupFile looks a key up in the config file (version 0: no admin
// change yet). A revoked (disabled) key is refused.
func lookupFile(c *config.Config, key string) (string, bool) {
	if c == nil {
		return "", false
	}
	id := c.Lookup(key)
	if id == nil || id.Disabled {
		return "", false
	}
	return id.Tenant, true
}
