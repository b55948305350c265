package lifecycle

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/purity"
)

// TestPurity keeps the lifecycle a pure state machine, as ledger/ is: no
// clock, no randomness, no OS or network (not even net/http: statuses are
// numbers), no Kafka or ClickHouse, no goroutines in any non-test file.
// The shell (services/gateway) does all of that.
func TestPurity(t *testing.T) { purity.Check(t, ".", "the lifecycle", 3) }
