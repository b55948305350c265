package budget

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/purity"
)

// TestPurity keeps the budget machine a pure state machine: no clock, no
// randomness, no OS or network, no Kafka or ClickHouse, no goroutines in any
// non-test file under ledger/budget/.
func TestPurity(t *testing.T) { purity.Check(t, ".", "the budget machine", 4) }
