package ledger

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// FuzzApply feeds arbitrary event sequences (decoded from the fuzz input,
// plus raw JSON events) to a ledger and checks that it never panics and
// keeps its invariants, and that its snapshot restores, plain and gzipped.
func FuzzApply(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, []byte(`{"v":1,"type":"Tick","id":"x","tick":{}}`))
	f.Add([]byte("reserve-reconcile-retry-config"), []byte(`{"v":1,"type":"ReserveRequested","id":"x","request_id":"r","scope":"s","reserve_requested":{"path":[{"level":"tenant","id":"t"}],"input_tokens":-1}}`))
	f.Add(make([]byte, 64), []byte(`{"v":1,"type":"ConfigChanged","id":"c","config_changed":{"ledger":"e30="}}`))
	f.Fuzz(func(t *testing.T, prog []byte, raw []byte) {
		l := New(0, simConfig(0))
		var out []Output
		now := int64(0)
		off := int64(0)
		var rawEv schemas.Event
		rawOK := schemas.Decode(raw, &rawEv) == nil
		ids := []string{"a", "b", "c", ""}
		for len(prog) >= 4 {
			op, a, b, c := prog[0], prog[1], prog[2], prog[3]
			prog = prog[4:]
			now += int64(int8(a)) * 37
			id := ids[int(b)%len(ids)]
			var ev *schemas.Event
			switch op % 12 {
			case 0, 1:
				ev = reserve(id, tokens(int64(c)*40-200, int64(b)*20), class([]string{"interactive", "agent", "batch", "x", ""}[int(c)%5]))
				ev.Attempt = int32(c % 3)
				ev.ReserveRequested.EmergencyAdmitted = c%17 == 0
				ev.ReserveRequested.Degraded = c%34 == 0 // degraded admissions are emergency ones
				ev.ReserveRequested.Streaming = c%3 == 0
				ev.ReserveRequested.MaxWaitMs = int64(int8(b)) * 100
				ev.ReserveRequested.Priority = int32(int8(a)) % 101
				if c%7 != 0 { // the rest: path_missing_level (simConfig requires the deployment)
					ev.ReserveRequested.Path = append(ev.ReserveRequested.Path, schemas.PathLevel{Level: "deployment", ID: "d1"})
				}
				if c%5 == 0 {
					ev.ReserveRequested.Path = append(ev.ReserveRequested.Path, schemas.PathLevel{Level: "deployment", ID: "d1"},
						schemas.PathLevel{Level: "profile", ID: string(rune(c))}, schemas.PathLevel{Level: "tenant", ID: "dup"})
				}
			case 2:
				ev = reconcileAtt(id, int32(c%3), int64(c)*50-100, int64(b)*10)
			case 3:
				ev = releaseEv(id)
			case 4:
				ev = rejected(id, int32(c%3), []schemas.RejectionKind{schemas.KindRateLimited, schemas.KindOverloaded, schemas.KindQuotaExhausted, schemas.KindRequestError, "?"}[int(c)%5], int64(int8(b))*100)
				ev.ProviderRejected.Limiter = schemas.Dimensions[int(b)%len(schemas.Dimensions)]
			case 5:
				ev = retryEv(id, int32(int8(c))%4, []schemas.RetryClass{schemas.RetryCapacity, schemas.RetryOverload, schemas.RetryPolicy, ""}[int(b)%4], int64(int8(c))*10)
			case 6:
				ev = observed(schemas.Dimensions[int(c)%len(schemas.Dimensions)], int64(int8(b)))
				if c%2 == 0 { // a reported limit: learned capacity (learn.go), sometimes headers only
					ev.ProviderObserved.Observations[0].Limit = int64(b) * int64(c) * 7
					ev.RequestID, ev.Attempt = id, int32(c%3)
					if c%4 == 0 {
						ev.ProviderObserved.Deployment = []string{"d1", "d2"}[int(b)%2]
					}
				}
			case 7:
				cfg := simConfig(int(c) % 2)
				if c%4 == 1 { // entitlements (entitle.go) on t1 and its key k1
					cfg.Entitlements = []EntitlementConfig{{Tenant: "t1", AllowedClasses: []string{"agent", "batch"}, MaxPriority: prio(0)},
						{Tenant: "t1", Key: "k1", AllowedProfiles: []string{"gpt"}}}
				}
				ev = configEv(t, cfg)
			case 8:
				if rawOK {
					ev = &rawEv
				} else {
					ev = tick()
				}
			case 9:
				ev = &schemas.Event{V: 1, Type: schemas.Type([]string{"ReserveRequested", "Reconciled", "RetryRequested", "Snapshot"}[int(c)%4]), ID: "bad", RequestID: id}
			default:
				ev = tick()
			}
			if op%29 == 28 {
				off -= int64(c) // stale offsets are ignored
			}
			out = l.Apply(now, off, ev, out[:0])
			off++
			for i := range out {
				if _, err := schemas.Encode(out[i].Event()); err != nil {
					t.Fatalf("decision does not encode: %v", err)
				}
			}
			if err := l.checkInvariants(); err != nil {
				t.Fatal(err)
			}
		}
		l.NextWakeMs()
		snap, err := l.MarshalSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Restore(snap); err != nil {
			t.Fatalf("restore own snapshot: %v", err)
		}
		// Gzipped, as the ledger service writes it, it restores to the
		// same state.
		r, err := Restore(gzipped(t, snap, gzip.BestSpeed))
		if err != nil {
			t.Fatalf("restore own gzipped snapshot: %v", err)
		}
		if again, _ := r.MarshalSnapshot(); !bytes.Equal(again, snap) {
			t.Fatal("own gzipped snapshot restores to another state")
		}
		// Corrupt snapshots, plain or gzipped, and bytes that only begin
		// like gzip must be refused or restore into a usable ledger.
		if len(raw) > 0 {
			bad := append([]byte(snapshotMagic), raw...)
			for _, b := range [][]byte{bad, gzipped(t, bad, gzip.BestSpeed), append([]byte{0x1f, 0x8b}, raw...)} {
				if l2, err := Restore(b); err == nil {
					l2.Apply(now+1, l2.Offset(), tick(), nil)
				}
			}
		}
	})
}
