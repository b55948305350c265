package whatif

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/purity"
)

// TestPurity keeps the what-if engine as pure as the ledger it drives: the
// same recorded log and config give the same report.
func TestPurity(t *testing.T) { purity.Check(t, ".", "the what-if engine", 2) }
