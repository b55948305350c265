package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
)

// PublishFunc publishes a ledger document as a ConfigChanged event
// (ledgerd.PublishConfig in production).
type PublishFunc func(ctx context.Context, ledgerJSON []byte, source string) error

// Reloader keeps a Server's configuration in step with its file. A file
// that fails to load or validate leaves the running configuration in place
// and is logged with every problem; a good one whose ledger section changed
// is first published as ConfigChanged — if that fails the running
// configuration stays too, so the gateway never routes by a configuration
// the ledger has not seen — and then swapped in.
type Reloader struct {
	path    string
	srv     *Server
	publish PublishFunc
	log     *slog.Logger
	seen    [32]byte // digest of the file as last read, good or bad
	// overlay, if set, turns the file's configuration into the one to run
	// (the admin API's tenants, keys and ledger document over the file;
	// services/admin.Binding.Overlay).
	overlay func(*config.Config) (*config.Config, error)
	// installed, if set, is called after a reload swapped the
	// configuration in, so that an admin change applied between overlay
	// and swap is installed again (services/admin.Binding.Installed).
	installed func()
}

// SetOverlay installs the hooks that turn each loaded file into the
// configuration to run and re-check it once swapped in
// (services/admin.Binding.Overlay and Installed).
func (r *Reloader) SetOverlay(overlay func(*config.Config) (*config.Config, error), installed func()) {
	r.overlay, r.installed = overlay, installed
}

// NewReloader watches path for srv. The file's current content is taken as
// already loaded.
func NewReloader(path string, srv *Server, publish PublishFunc, log *slog.Logger) *Reloader {
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{path: path, srv: srv, publish: publish, log: log}
	if b, err := os.ReadFile(path); err == nil {
		r.seen = sha256.Sum256(b)
	}
	return r
}

// Reload loads the file now. It returns the reason a reload was refused
// (the running configuration is then unchanged), or nil.
func (r *Reloader) Reload(ctx context.Context) error {
	b, err := os.ReadFile(r.path)
	if err != nil {
		return r.refuse(fmt.Errorf("read %s: %w", r.path, err))
	}
	r.seen = sha256.Sum256(b)
	next, err := config.Load(bytes.NewReader(b))
	if err != nil {
		return r.refuse(fmt.Errorf("config %s: %w", r.path, err))
	}
	if r.overlay != nil {
		if next, err = r.overlay(next); err != nil {
			return r.refuse(fmt.Errorf("config %s: %w", r.path, err))
		}
	}
	cur := r.srv.Config()
	if !bytes.Equal(next.LedgerJSON(), cur.LedgerJSON()) && r.publish != nil {
		if err := r.publish(ctx, next.LedgerJSON(), r.path); err != nil {
			return r.refuse(fmt.Errorf("publish the new ledger section of %s: %w", r.path, err))
		}
	}
	r.srv.SetConfig(next)
	if r.installed != nil {
		r.installed()
	}
	r.log.Info("config reloaded", "path", r.path, "routes", len(next.Routes), "tenants", len(next.Tenants))
	return nil
}

func (r *Reloader) refuse(err error) error {
	r.log.Error("config reload refused; keeping the running config", "err", err)
	return err
}

// Run reloads on every signal from hup (SIGHUP) and whenever the file's
// content changes, checked every interval, until ctx ends.
func (r *Reloader) Run(ctx context.Context, interval time.Duration, hup <-chan os.Signal) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = r.Reload(ctx)
		case <-t.C:
			b, err := os.ReadFile(r.path)
			if err != nil || sha256.Sum256(b) == r.seen {
				continue // unreadable files are reported on SIGHUP, not every tick
			}
			_ = r.Reload(ctx)
		}
	}
}
