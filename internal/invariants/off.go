//go:build !invariants

package invariants

// Enabled is false: the checks compile to nothing.
const Enabled = false
