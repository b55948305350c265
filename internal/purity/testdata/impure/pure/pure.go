// Package pure imports nothing forbidden itself; it reaches net/http, the
// clock and a goroutine through helper.
package pure

import "github.com/sluice-dev/sluice/internal/purity/testdata/impure/helper"

// Status is helper's.
func Status() int { return helper.Status() }
