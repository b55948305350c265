package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/dashboards/live"
	"github.com/sluice-dev/sluice/internal/bus"
)

// envViewToken holds the live view's operator token (a command line is
// visible to every user of the machine, so there is no token flag).
const envViewToken = "SLUICE_VIEW_TOKEN"

// runView serves the live quota view on its own against a Kafka cluster:
// it consumes the cluster's requests, decisions and telemetry topics, and
// follows the admin topic for the API keys the admin API manages; it needs
// nothing else running in this process.
func runView(ctx context.Context, args []string) error {
	fs := newFlags("view")
	brokers := brokersFlag(fs)
	prefix := prefixFlag(fs)
	listen := fs.String("listen", "127.0.0.1:8090", "listen address; a non-loopback address needs an operator token")
	cfgPath := fs.String("config", "", "gateway configuration file whose API keys (SHA-256 hashes) open a tenant's view until the first admin API change; re-read when it changes (keys made through the admin API open their views with or without it)")
	tokenFile := fs.String("operator-token-file", "", "file holding the operator token that opens the all-tenant view (env "+envViewToken+"; default: open on loopback)")
	reload := fs.Duration("reload-interval", 2*time.Second, "how often --config is checked for changes")
	verbose := fs.Bool("v", false, "log at info level")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log := logger(*verbose)
	token := os.Getenv(envViewToken)
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("operator token: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return fmt.Errorf("operator token: %s is empty", *tokenFile)
		}
	}
	if *reload <= 0 {
		return fmt.Errorf("--reload-interval %v: must be positive", *reload)
	}
	keys := &viewKeys{path: *cfgPath, log: log}
	if *cfgPath != "" {
		if err := keys.load(); err != nil {
			return err
		}
		go keys.watch(ctx, *reload)
	}
	names := bus.NamesWithPrefix(*prefix)
	adm, err := keys.followAdmin(ctx, bus.SplitBrokers(*brokers), names)
	if err != nil {
		return err
	}
	defer adm.Close()
	url, stop, err := live.Listen(ctx, live.Config{
		Brokers: bus.SplitBrokers(*brokers), Topics: names, Addr: *listen, Log: log,
		Lookup: keys.lookup, OperatorToken: token,
	})
	if err != nil {
		return err
	}
	defer stop()
	open := "open on loopback"
	if token != "" {
		open = "append #token=<operator token>"
	}
	fmt.Printf("# live quota view (operator view: %s; #key=<api key> for a tenant-only view)\n", open)
	fmt.Printf("VIEW_URL=%s\n", url)
	<-ctx.Done()
	return nil
}

// viewKeys maps API keys to tenants from a gateway configuration file and
// the admin state (viewadmin.go), and follows the changes of both; a bad
// file keeps the keys in force and says why.
type viewKeys struct {
	path string
	log  *slog.Logger
	cur  atomic.Pointer[config.Config]
	// admin is the newest admin state's keys; nil until the first admin
	// change, and from then on it alone says which keys exist.
	admin atomic.Pointer[adminKeys]
	// mtime and size of the file last loaded (or last refused)
	seen atomic.Pointer[os.FileInfo]
}

func (k *viewKeys) load() error {
	fi, err := os.Stat(k.path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	k.seen.Store(&fi)
	c, err := config.LoadFile(k.path)
	if err != nil {
		return err
	}
	k.cur.Store(c)
	return nil
}

func (k *viewKeys) watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fi, err := os.Stat(k.path)
		if err != nil {
			continue
		}
		if old := k.seen.Load(); old != nil && (*old).ModTime().Equal(fi.ModTime()) && (*old).Size() == fi.Size() {
			continue
		}
		if err := k.load(); err != nil {
			k.log.Error("live view: config not reloaded, the keys in force stay", "err", err)
			continue
		}
		k.log.Info("live view: config reloaded", "path", k.path)
	}
}

// lookup is live.Config.Lookup: a known, enabled key opens its tenant's
// view. A paused key still sees its tenant (why it is refused is what its
// owner comes to look for). Once the admin API has made a change, the admin
// state's keys replace the file's, as on every gateway: a key revoked or
// rotated there is refused although the file still lists it.
func (k *viewKeys) lookup(key string) (string, bool) {
	if a := k.admin.Load(); a != nil {
		t, ok := a.tenant[config.HashKey(key)]
		return t, ok
	}
	return lookupFile(k.cur.Load(), key)
}
