package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestUnconfiguredSnapshotRestores: a partition that has taken inputs
// before any ConfigChanged (a heartbeat) is snapshotted with New's empty
// config, and that snapshot restores to the same state. Restore used to
// validate the empty config ("scopes: at least one scope is required") and
// refuse it, so the partition's next owner retried its catch-up forever.
func TestUnconfiguredSnapshotRestores(t *testing.T) {
	l := New(1, Config{})
	l.Apply(1_000, 0, &schemas.Event{V: schemas.Version, Type: schemas.TypeHeartbeat, ID: "h1", Node: "gw-1", Scope: "sim-openai"}, nil)
	b, err := l.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(b)
	if err != nil {
		t.Fatalf("restore of an unconfigured partition's snapshot: %v", err)
	}
	b2, err := r.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(b2) {
		t.Errorf("restored state differs:\n%s\n%s", b, b2)
	}
}
