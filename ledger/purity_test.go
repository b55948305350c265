package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/purity"
)

// TestPurity keeps the ledger a pure state machine: no clock, no
// randomness, no OS or network, no Kafka or ClickHouse, no goroutines in any
// non-test file under ledger/.
func TestPurity(t *testing.T) { purity.Check(t, ".", "the ledger", 5) }
