package admin

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/sluice-dev/sluice/admission/config"
)

// Target is what a Binding installs configurations into (the gateway's
// Server).
type Target interface {
	SetConfig(*config.Config)
}

// Binding keeps a gateway's running configuration equal to its file's
// configuration overlaid with the newest admin state: the file keeps
// providers, routes and the gateway's own settings; once the admin API has
// made a change (version ≥ 1), the tenants, keys and the ledger document
// are the admin state's. It is safe for concurrent use by the store's
// consumer (Apply) and the file reloader (Overlay).
type Binding struct {
	mu   sync.Mutex
	base *config.Config // the file, as last loaded
	st   State
	// overlaid is the state version the last Overlay used.
	overlaid int64
	srv      Target
	log      *slog.Logger
	// reseed replaces the store's version-0 seed when the file changes
	// before the first admin change (nil: nothing to reseed).
	reseed func(State)
}

// NewBinding binds srv, whose file configuration is base.
func NewBinding(srv Target, base *config.Config, log *slog.Logger) *Binding {
	if log == nil {
		log = slog.Default()
	}
	return &Binding{base: base, srv: srv, log: log, st: Seed(base)}
}

// SetReseed installs the store's reseed hook (KafkaStore.Reseed).
func (b *Binding) SetReseed(f func(State)) {
	b.mu.Lock()
	b.reseed = f
	b.mu.Unlock()
}

// Check is the store's CheckFunc: the state must overlay this gateway's
// file into a valid configuration, whose ledger document (with the
// state's entitlements) is the one the change publishes.
func (b *Binding) Check(st State) ([]byte, error) {
	b.mu.Lock()
	base := b.base
	b.mu.Unlock()
	c, err := base.WithAdmission(st.ConfigTenants(), st.Ledger)
	if err != nil {
		return nil, err
	}
	return c.LedgerJSON(), nil
}

// Apply installs st (the store's OnApply). A state this gateway's file
// cannot take (another gateway validated it against a different file) is
// refused and logged; the running configuration stays.
func (b *Binding) Apply(st State) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.st = st
	if st.Version == 0 {
		return
	}
	c, err := b.base.WithAdmission(st.ConfigTenants(), st.Ledger)
	if err != nil {
		b.log.Error("admin state refused by this gateway's configuration; keeping the running one", "version", st.Version, "err", err)
		return
	}
	b.srv.SetConfig(c)
	b.log.Info("admin state installed", "version", st.Version, "tenants", len(st.Tenants))
}

// Overlay is the file reloader's hook: file becomes the new base, and the
// configuration to run is file overlaid with the admin state.
func (b *Binding) Overlay(file *config.Config) (*config.Config, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.base = file
	b.overlaid = b.st.Version
	if b.st.Version == 0 {
		b.st = Seed(file)
		if b.reseed != nil {
			b.reseed(b.st)
		}
		return file, nil
	}
	c, err := file.WithAdmission(b.st.ConfigTenants(), b.st.Ledger)
	if err != nil {
		return nil, fmt.Errorf("admin state version %d does not fit the new file: %w", b.st.Version, err)
	}
	return c, nil
}

// Installed is the file reloader's hook after it swapped in what Overlay
// returned: if an admin change was applied in between, the reloader's swap
// undid it, so it is installed again over the new file.
//
// The race it closes: Overlay(file, v1) → Apply(v2) installs v2 → the
// reloader installs its (file, v1) configuration. Installed sees v2 ≠ v1
// and installs (file, v2).
func (b *Binding) Installed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.st.Version == b.overlaid || b.st.Version == 0 {
		return
	}
	c, err := b.base.WithAdmission(b.st.ConfigTenants(), b.st.Ledger)
	if err != nil {
		b.log.Error("admin state refused by the reloaded file; keeping the running config", "version", b.st.Version, "err", err)
		return
	}
	b.srv.SetConfig(c)
	b.overlaid = b.st.Version
}

// Reseed replaces the version-0 seed (the file changed before any admin
// change). A store past version 0 ignores it.
func (s *KafkaStore) Reseed(st State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Version == 0 {
		s.st = st
	}
}
