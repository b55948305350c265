package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
)

// TestKafkaStoresConverge runs two KafkaStores (two gateways) on kfake:
// each applies the other's changes, two changes from one base version give
// one commit and one 409, and sluice.requests gets the audit records.
func TestKafkaStoresConverge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := testenv.Kfake(t, ctx, "", 2)
	brokers, names := k.Brokers, k.Names
	file, err := config.Load(strings.NewReader(strings.Replace(testYAML, "SEEDHASH", config.HashKey(seedKey), 1)))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var stores [2]*KafkaStore
	var gws [2]*target
	for i := range stores {
		gws[i] = &target{cfg: file}
		b := NewBinding(gws[i], file, quiet)
		stores[i], err = OpenKafka(ctx, KafkaConfig{Brokers: brokers, Names: names, Seed: Seed(file), Check: b.Check, OnApply: b.Apply, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer stores[i].Close()
	}
	op := Actor{Name: "alice"}
	if _, err := stores[0].Update(ctx, 0, op, "onboard", Op{Kind: OpTenantCreate, Tenant: "beta"}); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, stores[1], 1)
	if gws[1].get().Lookup(seedKey) == nil {
		t.Fatal("the second gateway lost the file's key when it installed the admin state")
	}

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = stores[i].Update(ctx, 1, op, "race", Op{Kind: OpTeamCreate, Tenant: "beta", Team: []string{"a", "b"}[i]})
		}()
	}
	wg.Wait()
	won, lost := 0, 0
	for _, err := range errs {
		var e *apierr.Error
		switch {
		case err == nil:
			won++
		case errors.As(err, &e) && e.Code == apierr.CodeVersionConflict:
			lost++
		default:
			t.Fatalf("concurrent change: %v", err)
		}
	}
	if won != 1 || lost != 1 {
		t.Fatalf("two changes from one base: %d won, %d lost (%v)", won, lost, errs)
	}
	waitVersion(t, stores[0], 2)
	waitVersion(t, stores[1], 2)
	if a, b := marshalState(stores[0].State()), marshalState(stores[1].State()); string(a) != string(b) {
		t.Fatal("the two gateways hold different states")
	}

	// Audit: each committed change is on every requests partition.
	rc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Requests),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	n := 0
	for n < 4 && ctx.Err() == nil {
		rc.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.ConfigChanged != nil {
				if cc := ev.ConfigChanged; cc.Source != Source || cc.Actor != "operator:alice" || len(cc.Admission) != 0 {
					t.Errorf("ConfigChanged %+v", cc)
				}
				n++
			}
		})
	}
	if n != 4 {
		t.Fatalf("%d ConfigChanged records, want 2 changes × 2 partitions", n)
	}
}

func waitVersion(t *testing.T, s *KafkaStore, v int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.State().Version < v {
		if time.Now().After(deadline) {
			t.Fatalf("version %d not applied (at %d)", v, s.State().Version)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
