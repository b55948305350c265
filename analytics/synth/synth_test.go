package synth

import (
	"bytes"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

func TestGenerateIsSeeded(t *testing.T) {
	a := Generate(Options{Seed: 3, Requests: 300})
	b := Generate(Options{Seed: 3, Requests: 300})
	c := Generate(Options{Seed: 4, Requests: 300})
	if len(a) != len(b) {
		t.Fatalf("%d vs %d records", len(a), len(b))
	}
	for i := range a {
		if !bytes.Equal(a[i].Value, b[i].Value) || a[i].LogTimeMs != b[i].LogTimeMs || a[i].Partition != b[i].Partition {
			t.Fatalf("record %d differs for the same seed", i)
		}
	}
	same := len(a) == len(c)
	for i := 0; same && i < len(a); i++ {
		same = bytes.Equal(a[i].Value, c[i].Value)
	}
	if same {
		t.Fatal("another seed gave the same log")
	}
	types := map[schemas.Type]int{}
	for i, r := range a {
		if i > 0 && r.LogTimeMs < a[i-1].LogTimeMs {
			t.Fatalf("record %d goes back in log time", i)
		}
		var e schemas.Event
		if err := schemas.Decode(r.Value, &e); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		types[e.Type]++
	}
	for _, typ := range []schemas.Type{schemas.TypeConfigChanged, schemas.TypeReserveRequested, schemas.TypeDecision, schemas.TypeDispatched,
		schemas.TypeReconciled, schemas.TypeProviderRejected, schemas.TypeRetryRequested, schemas.TypeReleased, schemas.TypeOutcome} {
		if types[typ] == 0 {
			t.Errorf("no %s in the log", typ)
		}
	}
}
