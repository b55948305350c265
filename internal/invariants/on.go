//go:build invariants

package invariants

// Enabled is true: this build checks invariants after every step.
const Enabled = true
