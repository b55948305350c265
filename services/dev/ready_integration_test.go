//go:build integration

package dev

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
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
