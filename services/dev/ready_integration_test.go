//go:build integration

package dev

import (
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
