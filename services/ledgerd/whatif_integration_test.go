//go:build integration

package ledgerd

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestWhatIfRealBroker runs the what-if scenario (whatif_test.go) on the
// real Kafka broker.
func TestWhatIfRealBroker(t *testing.T) {
	whatIfScenario(t, bus.SplitBrokers(testenv.KafkaBrokers(t)), fmt.Sprintf("whatif%d.", time.Now().UnixNano()))
}

// TestExplainRealBroker runs the explain scenario (explain_test.go) on the
// real Kafka broker.
func TestExplainRealBroker(t *testing.T) {
	explainScenario(t, bus.SplitBrokers(testenv.KafkaBrokers(t)), fmt.Sprintf("explain%d.", time.Now().UnixNano()))
}
