package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/analytics/report"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// runConfig implements `sluice config apply PATCH`.
func runConfig(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "apply" {
		return errors.New("usage: sluice config apply [--config FILE] [--yes] PATCH")
	}
	fs := newFlags("config apply")
	cfgPath := fs.String("config", "deploy/examples/sluice.yaml", "gateway configuration file (YAML) to patch; the gateways reload it")
	yes := fs.Bool("yes", false, "install the patch: write the file and publish its ledger section as ConfigChanged (source calibration)")
	brokers := brokersFlag(fs)
	prefix := prefixFlag(fs)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: sluice config apply [--config FILE] [--yes] PATCH")
	}
	b, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return err
	}
	p, err := report.ParsePatch(b)
	if err != nil {
		return err
	}
	doc, err := os.ReadFile(*cfgPath)
	if err != nil {
		return err
	}
	next, changes, skipped, err := report.ApplyPatch(doc, p)
	if err != nil {
		return err
	}
	fillCredentialEnv(next)
	cfg, err := config.Load(bytes.NewReader(next))
	if err != nil {
		return fmt.Errorf("patched %s does not validate, nothing changed: %w", *cfgPath, err)
	}
	printChanges(os.Stdout, *cfgPath, changes, skipped)
	if len(changes) == 0 {
		fmt.Println("nothing to change")
		return nil
	}
	if !*yes {
		fmt.Println("dry run: nothing changed; rerun with --yes to install")
		return nil
	}
	if err := ledgerd.PublishConfig(ctx, bus.SplitBrokers(*brokers), bus.NamesWithPrefix(*prefix), cfg.LedgerJSON(), report.PatchSource); err != nil {
		return fmt.Errorf("nothing changed: %w", err)
	}
	if err := writeFileAtomic(*cfgPath, next); err != nil {
		return fmt.Errorf("ConfigChanged published but %s not written: %w", *cfgPath, err)
	}
	fmt.Printf("installed: ConfigChanged (source %s) published to %s; %s written (gateways reload it)\n", report.PatchSource, *brokers, *cfgPath)
	return nil
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
