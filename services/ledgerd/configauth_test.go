package ledgerd

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/internal/configsig"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// TestDecodeRefusesUnsignedConfig: with a verifier, decodeInput turns every
// ConfigChanged without the writer's valid signature into the no-op tick of
// an undecodable record (ErrConfigRefused), so the ledger keeps its config;
// the signed one applies. Without a verifier every change applies, as
// before. The keys are process-wide: no test of this package runs in
// parallel.
func TestDecodeRefusesUnsignedConfig(t *testing.T) {
	t.Cleanup(func() { configsig.SetProcess(configsig.Keys{}) })
	writer, _ := configsig.Generate()
	stranger, _ := configsig.Generate()
	base := ledger.DefaultDevConfig()
	raised := ledger.DefaultDevConfig()
	raised.Scopes[0].Buckets[0].Capacity = 100_000_000
	doc, err := json.Marshal(raised)
	if err != nil {
		t.Fatal(err)
	}
	record := func(sign func(*schemas.ConfigChanged)) []byte {
		cc := schemas.ConfigChanged{ConfigVersion: "v", Source: "test", Ledger: doc}
		sign(&cc)
		ev := eventid.New(schemas.TypeConfigChanged, 1)
		ev.ConfigChanged = &cc
		b, err := schemas.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	unsigned := record(func(*schemas.ConfigChanged) {})
	foreign := record(stranger.Sign)
	signed := record(writer.Sign)
	for _, tc := range []struct {
		name    string
		keys    configsig.Keys
		rec     []byte
		refused error // nil: applied
	}{
		{"no verifier, unsigned", configsig.Keys{}, unsigned, nil},
		{"verifier, unsigned", configsig.Keys{Verifier: writer.Verifier()}, unsigned, configsig.ErrUnsigned},
		{"verifier, foreign key", configsig.Keys{Verifier: writer.Verifier()}, foreign, configsig.ErrUnknownKey},
		{"verifier, signed", configsig.Keys{Verifier: writer.Verifier()}, signed, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			configsig.SetProcess(tc.keys)
			l := ledger.New(0, base)
			var ev schemas.Event
			err := decodeInput(tc.rec, &ev)
			l.Apply(1, 0, &ev, nil)
			got := l.Config().Scopes[0].Buckets[0].Capacity
			if tc.refused != nil {
				if !errors.Is(err, ErrConfigRefused) || !errors.Is(err, tc.refused) || ev.Type != schemas.TypeTick {
					t.Fatalf("decode: %v, event %s; want %v as a no-op tick", err, ev.Type, tc.refused)
				}
				if got != base.Scopes[0].Buckets[0].Capacity {
					t.Fatalf("capacity %d after a refused change, want the old %d", got, base.Scopes[0].Buckets[0].Capacity)
				}
				return
			}
			if err != nil || got != 100_000_000 {
				t.Fatalf("decode: %v, capacity %d; want the change applied", err, got)
			}
		})
	}
}
