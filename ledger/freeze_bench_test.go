package ledger

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// heldLedger is a ledger holding n granted, unreconciled reservations: the
// state a busy partition snapshots.
func heldLedger(b *testing.B, n int) *Ledger {
	cfg, err := ParseConfig([]byte(`{"scopes":[{"name":"s","buckets":[
 {"level":"key","id":"*","dimension":"requests","capacity":100000000,"period_ms":60000,"window_ms":60000}]}],"hold_ttl_ms":600000}`))
	if err != nil {
		b.Fatal(err)
	}
	l := New(0, cfg)
	for i := 0; i < n; i++ {
		out := l.Apply(1_000_000+int64(i/10), int64(i), reserve(fmt.Sprintf("r%d", i)), nil)
		if len(out) != 1 || out[0].Decision.Status != schemas.StatusGranted {
			b.Fatalf("reserve %d not granted: %+v", i, out)
		}
	}
	return l
}

// BenchmarkFreeze is what a snapshot costs the ledger's loop now;
// BenchmarkMarshalSnapshot what it cost when the loop also encoded it.
func BenchmarkFreeze(b *testing.B) {
	l := heldLedger(b, 6000)
	b.ReportAllocs()
	for b.Loop() {
		_ = l.Freeze()
	}
}

func BenchmarkMarshalSnapshot(b *testing.B) {
	l := heldLedger(b, 6000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.MarshalSnapshot(); err != nil {
			b.Fatal(err)
		}
	}
}
