// Package invariants says whether this build checks the pure machines'
// invariants after every step (pebble's internal/invariants). Build or test
// with -tags invariants (make simulate does) and the ledger, the budget
// machine and the lifecycle audit their whole state after each step,
// panicking with what broke: a broken invariant is a programmer error, and
// the seed that found it reproduces it. Without the tag Enabled is a false
// constant, every check sits behind `if invariants.Enabled` and compiles to
// nothing, so the hot paths keep their zero allocations.
package invariants
