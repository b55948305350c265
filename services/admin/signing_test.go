package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configsig"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestOnlyTheAdminWriterWrites: where the deployment signs its config, the
// gateway that holds the signing key commits signed changes; a gateway
// with only the public key refuses every write with 403 not_admin_writer
// (and still follows the writer's changes); and a state written straight
// to the admin topic without the writer's signature is applied by no
// gateway. The keys are process-wide, so the test switches them between
// the two roles (no test of this package runs in parallel).
func TestOnlyTheAdminWriterWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Cleanup(func() { configsig.SetProcess(configsig.Keys{}) })
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	names := bus.DefaultNames()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := bus.Ensure(ctx, kadm.NewClient(cl), bus.DefaultTopics().Specs()); err != nil {
		t.Fatal(err)
	}
	file, err := config.Load(strings.NewReader(strings.Replace(testYAML, "SEEDHASH", config.HashKey(seedKey), 1)))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() *KafkaStore {
		t.Helper()
		b := NewBinding(&target{cfg: file}, file, quiet)
		s, err := OpenKafka(ctx, KafkaConfig{Brokers: brokers, Names: names, Seed: Seed(file), Check: b.Check, OnApply: b.Apply, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	writerKey, err := configsig.Generate()
	if err != nil {
		t.Fatal(err)
	}
	asWriter := configsig.Keys{Signer: writerKey, Verifier: writerKey.Verifier()}
	asGateway := configsig.Keys{Verifier: writerKey.Verifier()}

	configsig.SetProcess(asWriter)
	writer := open()
	if _, err := writer.Update(ctx, 0, Actor{Name: "alice"}, "onboard", Op{Kind: OpTenantCreate, Tenant: "beta"}); err != nil {
		t.Fatalf("the admin writer's change: %v", err)
	}

	configsig.SetProcess(asGateway)
	gw := open()
	if gw.State().Version != 1 {
		t.Fatalf("the gateway did not apply the writer's signed state: version %d", gw.State().Version)
	}
	_, err = gw.Update(ctx, 1, Actor{Name: "alice"}, "sneak", Op{Kind: OpTenantCreate, Tenant: "gamma"})
	var e *apierr.Error
	if !errors.As(err, &e) || e.Status != 403 || e.Code != apierr.CodeNotAdminWriter {
		t.Fatalf("a gateway without the signing key: %v, want 403 %s", err, apierr.CodeNotAdminWriter)
	}

	// A forged admin state (version 2), produced to the admin topic as
	// any gateway could.
	st := gw.State()
	st.Version = 2
	ev := eventid.New(schemas.TypeConfigChanged, time.Now().UnixMilli())
	ev.ConfigChanged = &schemas.ConfigChanged{ConfigVersion: "admin-2", Source: "mallory", Admission: marshalState(st), Ledger: st.Ledger}
	b, err := schemas.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: names.Admin, Partition: 0, Key: []byte(keyState), Value: b}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if late := open(); late.State().Version != 1 { // OpenKafka reads to the end of the topic
		t.Fatalf("a forged admin state was applied: version %d, want 1", late.State().Version)
	}

	// What the writer put on sluice.requests verifies.
	rc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(names.Requests),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	n := 0
	for n == 0 && ctx.Err() == nil {
		rc.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.ConfigChanged != nil {
				if err := writerKey.Verifier().Verify(ev.ConfigChanged); err != nil {
					t.Errorf("the writer's ConfigChanged on %s: %v", names.Requests, err)
				}
				n++
			}
		})
	}
}
