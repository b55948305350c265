package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/analytics/report"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/admin"
	"github.com/sluice-dev/sluice/services/dev"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

const configUsage = "usage: sluice config apply [--config FILE] [--actor WHO] [--reason WHY] [--dry-run | --yes] PATCH | sluice config history [--partition P] [--json]"

// runConfig implements `sluice config apply PATCH` and `sluice config
// history`.
func runConfig(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "history" {
		return runConfigHistory(ctx, args[1:])
	}
	if len(args) == 0 || args[0] != "apply" {
		return errors.New(configUsage)
	}
	fs := newFlags("config apply")
	actor := fs.String("actor", os.Getenv("USER"), "who makes the change, recorded in the config history (default $USER)")
	reason := fs.String("reason", "", "why, recorded in the config history")
	cfgPath := fs.String("config", "deploy/examples/sluice.yaml", "gateway configuration file (YAML) to patch; the gateways reload it")
	yes := fs.Bool("yes", false, "install the patch: write the file and publish its ledger section as ConfigChanged (source calibration)")
	dryRun := fs.Bool("dry-run", false, "apply the patch to the file in memory, validate it and print the diff; read no Kafka topic, change nothing")
	brokers := brokersFlag(fs)
	prefix := prefixFlag(fs)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: sluice config apply [--config FILE] [--dry-run | --yes] PATCH")
	}
	if *dryRun && *yes {
		return errors.New("config apply: --dry-run and --yes contradict each other")
	}
	p, doc, err := readPatchAndConfig(fs.Arg(0), *cfgPath)
	if err != nil {
		return err
	}
	if *dryRun {
		return dryRunApply(os.Stdout, *cfgPath, doc, p)
	}
	ap := applyPlan{cfgPath: *cfgPath, brokers: bus.SplitBrokers(*brokers), names: bus.NamesWithPrefix(*prefix),
		actor: *actor, reason: *reason}
	// Once the admin API has made a change, its state's ledger document is
	// what the gateways and ledgers run: the patch's limits go there, and
	// only the routes go to the file.
	st, err := readAdminState(ctx, ap.brokers, ap.names)
	if err != nil {
		return err
	}
	if st.Version > 0 {
		return ap.viaAdmin(ctx, doc, p, st, *yes)
	}
	return ap.viaFile(ctx, doc, p, *yes, *brokers)
}

// readPatchAndConfig reads and parses the patch, and reads the gateway
// file it applies to (credentials it names by environment filled in).
func readPatchAndConfig(patchPath, cfgPath string) (report.Patch, []byte, error) {
	b, err := os.ReadFile(patchPath)
	if err != nil {
		return report.Patch{}, nil, err
	}
	p, err := report.ParsePatch(b)
	if err != nil {
		return report.Patch{}, nil, err
	}
	doc, err := os.ReadFile(cfgPath)
	if err != nil {
		return report.Patch{}, nil, err
	}
	fillCredentialEnv(doc)
	return p, doc, nil
}

// viaFile installs the patch where the admin API has made no change: the
// patched file must validate, the change is confirmed (or --yes), its
// ledger section is published as ConfigChanged, and only then is the file
// written, so a failed publish changes nothing. brokersFlag is --brokers
// as given, for the closing line.
func (ap applyPlan) viaFile(ctx context.Context, doc []byte, p report.Patch, yes bool, brokersFlag string) error {
	next, changes, skipped, err := report.ApplyPatch(doc, p)
	if err != nil {
		return err
	}
	cfg, err := loadPatched(next)
	if err != nil {
		return fmt.Errorf("patched %s does not validate, nothing changed: %w", ap.cfgPath, err)
	}
	printChanges(os.Stdout, ap.cfgPath, changes, skipped)
	if ok, err := proceed(len(changes), yes, ap.actor); !ok {
		return err
	}
	cc := schemas.ConfigChanged{Ledger: cfg.LedgerJSON(), Source: report.PatchSource, Actor: ap.actor, Reason: ap.reason}
	if err := ledgerd.PublishConfigChange(ctx, ap.brokers, ap.names, cc); err != nil {
		return fmt.Errorf("nothing changed: %w", err)
	}
	if err := writeFileAtomic(ap.cfgPath, next); err != nil {
		return fmt.Errorf("ConfigChanged published but %s not written: %w", ap.cfgPath, err)
	}
	fmt.Printf("installed: ConfigChanged (source %s, actor %s) published to %s; %s written (gateways reload it)\n", report.PatchSource, ap.actor, brokersFlag, ap.cfgPath)
	return nil
}

// dryRunApply is `config apply --dry-run`: the patch applied to the
// gateway file in memory, the result validated, the diff printed. It
// reads no topic (so it works where the admin topic is out of reach, in
// CI or on a laptop): where the admin API has made a change, the limits
// the cluster runs are its state's, which a real apply patches instead.
func dryRunApply(w io.Writer, cfgPath string, doc []byte, p report.Patch) error {
	next, changes, skipped, err := report.ApplyPatch(doc, p)
	if err != nil {
		return err
	}
	printChanges(w, cfgPath, changes, skipped)
	if _, err := config.Load(bytes.NewReader(next)); err != nil {
		return fmt.Errorf("dry run: the patched %s does not validate: %w", cfgPath, err)
	}
	fmt.Fprintf(w, "dry run: the patched %s validates; nothing changed and no topic read (an admin state, if the cluster has one, is what a real apply patches)\n", cfgPath)
	return nil
}

// proceed says whether `config apply` installs its changes: not when there
// are none or without --yes (it says so), and not without an actor (the
// config history records who made each change).
func proceed(changes int, yes bool, actor string) (bool, error) {
	switch {
	case changes == 0:
		fmt.Println("nothing to change")
		return false, nil
	case !yes:
		fmt.Println("dry run: nothing changed; rerun with --yes to install")
		return false, nil
	case actor == "":
		return false, errors.New("--actor is required when $USER is not set: the config history records who made each change")
	}
	return true, nil
}

// applyPlan is what `sluice config apply` installs into.
type applyPlan struct {
	cfgPath       string
	brokers       []string
	names         bus.Names
	actor, reason string
}

// readAdminState returns the newest committed admin state (version 0: the
// admin API has made no change), following the admin topic read-only.
func readAdminState(ctx context.Context, brokers []string, names bus.Names) (admin.State, error) {
	st, err := admin.OpenKafka(ctx, admin.KafkaConfig{Brokers: brokers, Names: names, ReadOnly: true,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return admin.State{}, fmt.Errorf("read the admin state (the limits the cluster runs), nothing changed: %w", err)
	}
	defer st.Close()
	return st.State(), nil
}

// viaAdmin installs p where an admin state exists: the buckets and classes
// into the state's ledger document, as one admin change (ConfigChanged on
// every partition, source calibration, with the admin state, atomically),
// and the routes into the file.
func (ap applyPlan) viaAdmin(ctx context.Context, doc []byte, p report.Patch, st admin.State, yes bool) error {
	fileNext, fileChanges, fileSkipped, err := report.ApplyPatch(doc, report.Patch{Source: p.Source, Routes: p.Routes})
	if err != nil {
		return err
	}
	cfg, err := loadPatched(fileNext)
	if err != nil {
		return fmt.Errorf("patched %s does not validate, nothing changed: %w", ap.cfgPath, err)
	}
	ledNext, ledChanges, ledSkipped, err := report.ApplyLedgerPatch(st.Ledger, p)
	if err != nil {
		return err
	}
	adminName := fmt.Sprintf("admin state version %d (the ledger document the cluster runs)", st.Version)
	printChanges(os.Stdout, ap.cfgPath, fileChanges, fileSkipped)
	printChanges(os.Stdout, adminName, ledChanges, ledSkipped)
	if ok, err := proceed(len(fileChanges)+len(ledChanges), yes, ap.actor); !ok {
		return err
	}
	if len(ledChanges) > 0 {
		store, err := admin.OpenKafka(ctx, admin.KafkaConfig{Brokers: ap.brokers, Names: ap.names, Seed: admin.Seed(cfg),
			Check: admin.NewBinding(nil, cfg, nil).Check, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return fmt.Errorf("nothing changed: %w", err)
		}
		defer store.Close()
		next, err := store.Update(ctx, st.Version, admin.Actor{Name: ap.actor}, ap.reason,
			admin.Op{Kind: admin.OpLedgerCalibrate, Ledger: ledNext, Source: report.PatchSource})
		if err != nil {
			return fmt.Errorf("nothing changed (if the admin state moved on, rerun to patch the new one): %w", err)
		}
		fmt.Printf("installed: admin state version %d with the calibrated ledger document; ConfigChanged (source %s, actor %s) on every partition\n",
			next.Version, report.PatchSource, admin.Actor{Name: ap.actor})
	}
	if len(fileChanges) > 0 {
		if err := writeFileAtomic(ap.cfgPath, fileNext); err != nil {
			return fmt.Errorf("%s not written (the ledger part, if any, is installed): %w", ap.cfgPath, err)
		}
		fmt.Printf("%s written: routes (gateways reload it)\n", ap.cfgPath)
	}
	return nil
}

// runConfigHistory implements `sluice config history`: every ConfigChanged
// the log keeps, oldest first, each with a per-field diff from the one
// before.
func runConfigHistory(ctx context.Context, args []string) error {
	fs := newFlags("config history")
	brokers := brokersFlag(fs)
	prefix := prefixFlag(fs)
	part := fs.Int("partition", 0, "partition of sluice.requests to read (every change is published to all)")
	asJSON := fs.Bool("json", false, "print the history as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New(configUsage)
	}
	hist, err := ledgerd.ConfigHistory(ctx, bus.SplitBrokers(*brokers), bus.NamesWithPrefix(*prefix), int32(*part))
	if err != nil {
		return err
	}
	entries := configHistory(hist)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	printConfigHistory(os.Stdout, entries)
	return nil
}

// historyEntry is one change of `sluice config history`.
type historyEntry struct {
	Version string `json:"version"`
	Offset  int64  `json:"offset"`
	Time    string `json:"time"`
	Source  string `json:"source,omitempty"`
	Actor   string `json:"actor,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Change is what an admin API change did, in one line ("key.revoke
	// tenant=acme key=acme-app"): pausing, rotating or revoking a key
	// leaves the ledger document as it was, so Diff alone would show
	// nothing for it.
	Change string `json:"change,omitempty"`
	// Refused says why the ledger refused the document (it kept the one in
	// force, so Diff is empty); later diffs are against the last installed
	// document.
	Refused string              `json:"refused,omitempty"`
	Diff    []ledger.ConfigDiff `json:"diff"`
}

// configHistory diffs each change against the last document the ledger
// installed (a refused one changed nothing).
func configHistory(hist []ledgerd.ConfigEntry) []historyEntry {
	var out []historyEntry
	var prev []byte
	for _, h := range hist {
		e := historyEntry{Version: h.Change.ConfigVersion, Offset: h.Offset, Time: time.UnixMilli(h.LogTimeMs).UTC().Format(time.RFC3339),
			Source: h.Change.Source, Actor: h.Change.Actor, Reason: h.Change.Reason, Change: h.Change.Change}
		if h.Refused != "" {
			e.Refused = h.Refused // not signed by the admin writer: no diff
		} else if _, err := ledger.ParseConfig(h.Change.Ledger); err != nil {
			e.Refused = err.Error() // it changed nothing: no diff
		} else {
			e.Diff = ledger.DiffConfigs(prev, h.Change.Ledger)
			prev = h.Change.Ledger
		}
		if e.Diff == nil {
			e.Diff = []ledger.ConfigDiff{}
		}
		out = append(out, e)
	}
	return out
}

func printConfigHistory(w io.Writer, entries []historyEntry) {
	if len(entries) == 0 {
		fmt.Fprintln(w, "no ConfigChanged in the log")
		return
	}
	for i, e := range entries {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  version %s  offset %d  source %s  actor %s", e.Time, orDash(e.Version), e.Offset, orDash(e.Source), orDash(e.Actor))
		if e.Reason != "" {
			fmt.Fprintf(w, "  reason %q", e.Reason)
		}
		fmt.Fprintln(w)
		if e.Refused != "" {
			fmt.Fprintf(w, "  refused by the ledger (the previous config stayed): %s\n", oneLine(e.Refused))
		}
		if e.Change != "" {
			fmt.Fprintf(w, "  admin: %s\n", e.Change)
		}
		if len(e.Diff) == 0 && e.Refused == "" && e.Change == "" {
			fmt.Fprintln(w, "  (no change)")
		}
		for _, d := range e.Diff {
			fmt.Fprintln(w, "  "+d.String())
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printChanges(w io.Writer, path string, changes []report.Change, skipped []string) {
	fmt.Fprintf(w, "--- %s\n+++ %s (calibration patch)\n", path, path)
	for _, c := range changes {
		fmt.Fprintln(w, "  "+c.String())
	}
	for _, s := range skipped {
		fmt.Fprintln(w, "  not applied: "+s)
	}
}

// writeFileAtomic replaces path with b, keeping the old file as path.bak.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".sluice-config-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if old, err := os.ReadFile(path); err == nil {
		if err := os.WriteFile(path+".bak", old, 0o644); err != nil {
			os.Remove(tmp.Name())
			return err
		}
	}
	return os.Rename(tmp.Name(), path)
}

func writePatch(w io.Writer, p report.Patch) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

// loadPatched validates a patched configuration file as the process that
// runs it loads it: a dev config's SimURLPlaceholder is resolved (to a
// stand-in URL: only the ledger section is published, and the file keeps
// the placeholder), as `sluice dev --config` resolves it.
func loadPatched(doc []byte) (*config.Config, error) {
	return config.Load(bytes.NewReader(dev.ResolveSimURL(doc, "http://127.0.0.1:1")))
}

// fillCredentialEnv sets the provider credential variables the file names
// and this process lacks to a placeholder: config apply validates the
// whole file and derives its ledger document, and never calls a provider.
func fillCredentialEnv(doc []byte) {
	var c struct {
		Providers []struct {
			APIKeyEnv string `yaml:"api_key_env"`
		} `yaml:"providers"`
	}
	if yaml.Unmarshal(doc, &c) != nil {
		return
	}
	for _, p := range c.Providers {
		if p.APIKeyEnv != "" && os.Getenv(p.APIKeyEnv) == "" {
			_ = os.Setenv(p.APIKeyEnv, "unused-by-config-apply")
		}
	}
}
