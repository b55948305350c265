package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestReadOnlyFollower: a read-only store (what `sluice view` opens) starts
// on an empty topic, starts after committed changes with the newest state
// applied, follows later changes, never writes to the topic, and refuses
// Update.
func TestReadOnlyFollower(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := testenv.Kfake(t, ctx, "", 0)
	brokers, names, adm := k.Brokers, k.Names, k.Admin
	end := func() int64 {
		t.Helper()
		o, err := adm.ListEndOffsets(ctx, names.Admin)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := o.Lookup(names.Admin, 0)
		return l.Offset
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	follow := func() (*KafkaStore, chan State) {
		t.Helper()
		applied := make(chan State, 16)
		s, err := OpenKafka(ctx, KafkaConfig{Brokers: brokers, Names: names, Log: quiet, ReadOnly: true,
			OnApply: func(st State) { applied <- st }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s, applied
	}

	empty, _ := follow()
	if v, e := empty.State().Version, end(); v != 0 || e != 0 {
		t.Fatalf("on an empty topic: version %d, end offset %d; want 0 and no record written", v, e)
	}
	if _, err := empty.Update(ctx, 0, Actor{}, "no", Op{Kind: OpTenantCreate, Tenant: "x"}); !errors.Is(err, errReadOnly) {
		t.Fatalf("Update on a read-only store: %v", err)
	}

	file, err := config.Load(strings.NewReader(strings.Replace(testYAML, "SEEDHASH", config.HashKey(seedKey), 1)))
	if err != nil {
		t.Fatal(err)
	}
	writer, err := OpenKafka(ctx, KafkaConfig{Brokers: brokers, Names: names, Seed: Seed(file), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	for i, tenant := range []string{"beta", "gamma"} {
		if _, err := writer.Update(ctx, int64(i), Actor{Name: "alice"}, "onboard", Op{Kind: OpTenantCreate, Tenant: tenant}); err != nil {
			t.Fatal(err)
		}
	}
	before := end()
	late, applied := follow()
	if v := late.State().Version; v != 2 {
		t.Fatalf("a follower opened after two changes holds version %d", v)
	}
	var last State
	for len(applied) > 0 { // every state in commit order (kfake does not compact), the newest last
		last = <-applied
	}
	if last.Version != 2 {
		t.Fatalf("OnApply's last state before OpenKafka returned: version %d, want 2", last.Version)
	}
	if after := end(); after != before {
		t.Fatalf("opening a read-only follower wrote %d records to the admin topic", after-before)
	}
	if _, err := writer.Update(ctx, 2, Actor{Name: "alice"}, "onboard", Op{Kind: OpTenantCreate, Tenant: "delta"}); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, late, 3)
	waitVersion(t, empty, 3)
}
