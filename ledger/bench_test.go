package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/invariants"
)

func BenchmarkReserveReconcile6x4(b *testing.B) {
	w := NewBenchWorkload()
	w.Run(2 * benchPool)
	b.ReportAllocs()
	b.ResetTimer()
	var decisions int64
	for b.Loop() {
		d, _ := w.Step()
		decisions += int64(d)
	}
	b.ReportMetric(float64(decisions)/b.Elapsed().Seconds(), "decisions/s")
}

func BenchmarkStateSize100kTenants3Profiles(b *testing.B) {
	for b.Loop() {
		s := MeasureStateSize(100_000, 3)
		b.ReportMetric(float64(s.HeapBytes)/(1<<20), "MiB")
		b.ReportMetric(s.BytesPerBucket, "bytes/bucket")
	}
}

// TestGrantHotPathAllocFree proves the reserve+reconcile hot path allocates
// nothing once warm.
func TestGrantHotPathAllocFree(t *testing.T) {
	if invariants.Enabled {
		t.Skip("-tags invariants audits the whole state after every step, which allocates; the zero holds for the default build")
	}
	w := NewBenchWorkload()
	w.Run(2 * benchPool)
	allocs := testing.AllocsPerRun(5000, func() {
		if _, g := w.Step(); g != 1 {
			t.Fatal("not granted")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per reserve+reconcile, want 0", allocs)
	}
}

func TestStateSizeTarget(t *testing.T) {
	s := MeasureStateSize(100_000, 3)
	t.Logf("%+v (%.1f MiB)", s, float64(s.HeapBytes)/(1<<20))
	if s.HeapBytes > 256<<20 {
		t.Fatalf("state %d bytes > 256 MiB", s.HeapBytes)
	}
}
