package eventid

import (
	"testing"

	"github.com/google/uuid"
)

// TestNewIDIsUUIDv7 checks that NewID's ids are what uuid.NewV7 made
// before it: canonical UUIDv7 strings with the RFC 9562 variant, carrying
// the current millisecond, strictly increasing within the process.
func TestNewIDIsUUIDv7(t *testing.T) {
	prev := ""
	for i := range 10000 {
		before := uuid.Must(uuid.NewV7()).Time()
		s := NewID()
		u, err := uuid.Parse(s)
		if err != nil {
			t.Fatalf("id %d %q: %v", i, s, err)
		}
		if u.String() != s || len(s) != 36 {
			t.Fatalf("id %d %q is not canonical (%q)", i, s, u.String())
		}
		if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("id %d %q: version %d variant %v", i, s, u.Version(), u.Variant())
		}
		if d := u.Time() - before; d < -10000 || d > 10000*1000 { // 100 ns units: within a second
			t.Fatalf("id %d %q: time %d off the clock's %d", i, s, u.Time(), before)
		}
		if s <= prev {
			t.Fatalf("id %d %q not after %q", i, s, prev)
		}
		prev = s
	}
}

func TestNewIDAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = NewID() }); n > 1 {
		t.Errorf("NewID: %v allocations, want 1 (the string)", n)
	}
}
