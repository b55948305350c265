//go:build integration

package dev

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// TestReadyzFollowsTheLedgerOnTheBroker is TestReadyzFollowsTheLedger on
// the real broker (its group protocol, session and commit timings).
func TestReadyzFollowsTheLedgerOnTheBroker(t *testing.T) {
	names := bus.NamesWithPrefix(fmt.Sprintf("readyz%d.", time.Now().UnixNano()))
	readyTimeline(t, Options{Addr: "127.0.0.1:0", Brokers: bus.SplitBrokers(testenv.KafkaBrokers(t)), Topics: names})
}

// TestHeaderPromotionRefusedOnTheBroker is the D6 reproduction on the real
// broker: the dev config's batch key asks for interactive at priority 100.
func TestHeaderPromotionRefusedOnTheBroker(t *testing.T) {
	load, err := ConfigFile("../../deploy/examples/dev-three-tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := bus.NamesWithPrefix(fmt.Sprintf("promote%d.", time.Now().UnixNano()))
	st, err := Start(ctx, Options{Addr: "127.0.0.1:0", Brokers: bus.SplitBrokers(testenv.KafkaBrokers(t)), Topics: names, Config: load})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	promotionRefused(t, ctx, st)
}

// TestReadyzOfASplitScopeOnTheBroker: with sim-openai split over two
// partitions, the gateway probes and checks each sub-scope's partition
// on the real broker (not the unsplit name's, which no ledger scope
// holds), both answer, and a chat completion goes through.
func TestReadyzOfASplitScopeOnTheBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	names := bus.NamesWithPrefix(fmt.Sprintf("subscope-readyz%d.", time.Now().UnixNano()))
	const key = "sk-subscope-readyz"
	split := func(lc *ledger.Config) {
		lc.Scopes[0].Partitions = 2
		lc.Scopes[0].Buckets = append(lc.Scopes[0].Buckets,
			ledger.BucketConfig{Level: ledger.LevelDeployment, ID: "sim-openai", Dimension: schemas.DimRequests, Capacity: 6000, PeriodMs: 60_000})
	}
	st, err := Start(ctx, Options{Addr: "127.0.0.1:0", Brokers: bus.SplitBrokers(testenv.KafkaBrokers(t)), Topics: names, APIKey: key,
		Config: func(u string) (*config.Config, error) { return devConfig(u, key, split) }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for {
		r := waitReady(t, ctx, st, true)
		ok := map[string]bool{}
		for _, c := range r.Checks {
			ok[c.Name] = c.OK
			if c.Name == "ledger_round_trip:sim-openai" {
				t.Fatalf("readyz checks the unsplit scope: %+v", r)
			}
		}
		if ok["ledger_round_trip:sim-openai#0"] && ok["ledger_round_trip:sim-openai#1"] {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the sub-scopes never both answered: %+v", r)
		case <-time.After(100 * time.Millisecond):
		}
	}
	checkChat(t, ctx, st, 200)
}
