//go:build integration

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/analytics/analyticstest"
	"github.com/sluice-dev/sluice/analytics/report"
	"github.com/sluice-dev/sluice/analytics/synth"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
)

// TestIntegrationReportThenConfigApply: `sluice report` over a week in the
// real ClickHouse writes the report and a patch; `sluice config apply`
// without --yes changes nothing, with --yes it rewrites the gateway file
// and publishes ConfigChanged with source calibration on the real broker.
func TestIntegrationReportThenConfigApply(t *testing.T) {
	ctx := context.Background()
	recs := synth.Generate(synth.Options{Seed: 5, Requests: 1500})
	_, db := analyticstest.SinkFixture(t, recs)
	dir := t.TempDir()
	out, patch := filepath.Join(dir, "report.json"), filepath.Join(dir, "patch.json")
	err := runReport(ctx, []string{"--clickhouse", testenv.ClickHouseAddr(t), "--database", db, "--from", "2026-11-23",
		"--format", "json", "--out", out, "--patch", patch, "-q"})
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Sections) == 0 {
		t.Fatalf("report.json: %v (%d sections)", err, len(rep.Sections))
	}
	err = runReport(ctx, []string{"--clickhouse", testenv.ClickHouseAddr(t), "--database", db, "--from", "2030-01-01", "-q"})
	if err == nil || !strings.Contains(err.Error(), "no data") {
		t.Errorf("empty range: %v", err)
	}

	// A gateway file whose routes and scopes are the fixture's.
	cfgPath := filepath.Join(dir, "sluice.yaml")
	example, err := os.ReadFile("../../deploy/examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y := strings.ReplaceAll(string(example), "model: gpt-4o-mini\n", "model: chat-4x\n")
	y = strings.ReplaceAll(y, "openai:org-example/proj-main", "openai:org-1/proj-1")
	if err := os.WriteFile(cfgPath, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	brokers := testenv.KafkaBrokers(t)
	prefix := "sluice-test-" + time.Now().Format("150405.000000") + "."
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tc := bus.DefaultTopics()
	tc.Names = bus.NamesWithPrefix(prefix)
	tc.RequestPartitions = 2
	if _, err := bus.Ensure(ctx, kadm.NewClient(cl), tc.Specs()); err != nil {
		t.Fatalf("real Kafka required (make up): %v", err)
	}
	defer kadm.NewClient(cl).DeleteTopics(context.Background(), tc.Names.Created()...)

	args := []string{"apply", "--config", cfgPath, "--brokers", brokers, "--topic-prefix", prefix, patch}
	if err := runConfig(ctx, args); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(cfgPath); string(b) != y {
		t.Fatal("dry run changed the file")
	}
	if err := runConfig(ctx, append([]string{"apply", "--yes", "--actor", "alice", "--reason", "weekly calibration"}, args[1:]...)); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(cfgPath)
	if !strings.Contains(string(after), "p95_output_tokens: ") || string(after) == y {
		t.Fatal("--yes did not write the patched file")
	}
	if _, err := os.Stat(cfgPath + ".bak"); err != nil {
		t.Errorf("no backup: %v", err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(tc.Names.Requests),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	found := 0
	for found < 2 && pctx.Err() == nil {
		cons.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			var e schemas.Event
			if schemas.Decode(r.Value, &e) == nil && e.ConfigChanged != nil && e.ConfigChanged.Source == report.PatchSource {
				found++
				if e.ConfigChanged.Actor != "alice" || e.ConfigChanged.Reason != "weekly calibration" {
					t.Errorf("ConfigChanged actor %q reason %q, want the flags'", e.ConfigChanged.Actor, e.ConfigChanged.Reason)
				}
			}
		})
	}
	if found != 2 {
		t.Fatalf("%d ConfigChanged with source calibration, want one per partition (2)", found)
	}
}
