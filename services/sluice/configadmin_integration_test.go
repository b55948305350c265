//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/analytics/report"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/admin"
)

// TestIntegrationConfigApplyAfterAdminChange: once the admin API has made
// a change, `sluice config apply --yes` puts the patch's limits into the
// admin state's ledger document (one admin change, ConfigChanged with
// source calibration on every partition) and only the routes into the
// file, so gateways and ledgers keep running one document. Real broker.
func TestIntegrationConfigApplyAfterAdminChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, k := range []string{"OPENAI_UPSTREAM_KEY", "AZURE_OPENAI_KEY", "ANTHROPIC_UPSTREAM_KEY", "GEMINI_API_KEY"} {
		t.Setenv(k, "test")
	}
	dir := t.TempDir()
	example, err := os.ReadFile("../../deploy/examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgPath, example, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(bytes.NewReader(example))
	if err != nil {
		t.Fatal(err)
	}

	brokers := testenv.KafkaBrokers(t)
	prefix := "sluice-test-cfgadm-" + time.Now().Format("150405.000000") + "."
	names := bus.NamesWithPrefix(prefix)
	cl, err := kgo.NewClient(kgo.SeedBrokers(bus.SplitBrokers(brokers)...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tc := bus.DefaultTopics()
	tc.Names, tc.RequestPartitions = names, 2
	if _, err := bus.Ensure(ctx, kadm.NewClient(cl), tc.Specs()); err != nil {
		t.Fatalf("real Kafka required (make up): %v", err)
	}
	defer kadm.NewClient(cl).DeleteTopics(context.Background(), names.Created()...)

	// An operator pauses a key through the admin store: version 1.
	store, err := admin.OpenKafka(ctx, admin.KafkaConfig{Brokers: bus.SplitBrokers(brokers), Names: names,
		Seed: admin.Seed(cfg), Check: admin.NewBinding(nil, cfg, nil).Check})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(ctx, 0, admin.Actor{Name: "bob"}, "incident", admin.Op{Kind: admin.OpKeyPause, Tenant: "acme", Key: "acme-app"}); err != nil {
		t.Fatal(err)
	}
	store.Close()

	p := report.Patch{Source: report.PatchSource,
		Routes:  []report.RoutePatch{{Route: "gpt-4o-mini", P95OutputTokens: 175}},
		Buckets: []report.BucketPatch{{Scope: "openai:org-example/proj-main", Bucket: "deployment:openai-main", Dimension: "requests", CapacityFactor: 0.916}}}
	pb, _ := json.Marshal(p)
	patch := filepath.Join(dir, "patch.json")
	if err := os.WriteFile(patch, pb, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"apply", "--config", cfgPath, "--brokers", brokers, "--topic-prefix", prefix, patch}
	if err := runConfig(ctx, args); err != nil {
		t.Fatal(err)
	}
	if st, err := readAdminState(ctx, bus.SplitBrokers(brokers), names); err != nil || st.Version != 1 {
		t.Fatalf("dry run: admin state version %d (%v), want 1", st.Version, err)
	}
	if b, _ := os.ReadFile(cfgPath); !bytes.Equal(b, example) {
		t.Fatal("dry run changed the file")
	}
	if err := runConfig(ctx, append([]string{"apply", "--yes", "--actor", "alice", "--reason", "weekly calibration"}, args[1:]...)); err != nil {
		t.Fatal(err)
	}

	st, err := readAdminState(ctx, bus.SplitBrokers(brokers), names)
	if err != nil || st.Version != 2 {
		t.Fatalf("admin state version %d (%v), want 2", st.Version, err)
	}
	if got := capacity(t, st.Ledger, "openai:org-example/proj-main", "deployment", "openai-main", "requests"); got != 366 {
		t.Errorf("admin ledger document: capacity %d, want 400 × 0.916 = 366", got)
	}
	if k := st.Tenants[0].Keys[0]; st.Tenants[0].ID != "acme" || !k.Paused {
		t.Errorf("the calibration lost the earlier admin change: %+v", st.Tenants[0])
	}
	after, _ := os.ReadFile(cfgPath)
	fileCfg, err := config.Load(bytes.NewReader(after))
	if err != nil {
		t.Fatal(err)
	}
	if r := fileCfg.Route("gpt-4o-mini"); r == nil || r.P95OutputTokens != 175 {
		t.Errorf("the file's route was not patched: %+v", r)
	}
	if got := capacity(t, fileCfg.LedgerJSON(), "openai:org-example/proj-main", "deployment", "openai-main", "requests"); got != 400 {
		t.Errorf("the file's ledger section changed to %d: the limits go to the admin state", got)
	}

	// The ledgers see it: one ConfigChanged per partition, source
	// calibration, carrying the admin state's document.
	cons, err := kgo.NewClient(kgo.SeedBrokers(bus.SplitBrokers(brokers)...), kgo.ConsumeTopics(names.Requests),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	found := 0
	for found < 2 && ctx.Err() == nil {
		cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var e schemas.Event
			if schemas.Decode(r.Value, &e) != nil || e.ConfigChanged == nil || e.ConfigChanged.Source != report.PatchSource {
				return
			}
			found++
			cc := e.ConfigChanged
			if cc.Change != string(admin.OpLedgerCalibrate) || cc.Actor != "operator:alice" || cc.Reason != "weekly calibration" || cc.ConfigVersion != "admin-2" {
				t.Errorf("ConfigChanged %+v", cc)
			}
			if !bytes.Equal(cc.Ledger, st.Ledger) {
				t.Errorf("ConfigChanged carries another ledger document than the admin state")
			}
		})
	}
	if found != 2 {
		t.Fatalf("%d ConfigChanged with source calibration, want one per partition (2)", found)
	}
}

// capacity is the capacity of one bucket of a ledger document.
func capacity(t *testing.T, doc []byte, scope, level, id, dim string) int64 {
	t.Helper()
	c, err := ledger.ParseConfig(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Scopes {
		if s.Name != scope {
			continue
		}
		for _, b := range s.Buckets {
			if b.Level == level && b.ID == id && string(b.Dimension) == dim {
				return b.Capacity
			}
		}
	}
	t.Fatalf("no bucket %s %s:%s %s", scope, level, id, dim)
	return 0
}
