package budget

import (
	"bytes"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// FuzzLeaseMessages feeds the budget partition and a holder arbitrary
// lines of encoded events (any that decode, lease messages or not, in any
// order, at the times their produced_at_ms says): neither panics, a
// grant never takes the budget's holders past its pool, a holder never
// uses more than it holds, and a snapshot restores to the same state.
func FuzzLeaseMessages(f *testing.F) {
	seed := func(evs ...*schemas.Event) []byte {
		var b []byte
		for _, e := range evs {
			enc, _ := schemas.Encode(e)
			b = append(append(b, enc...), '\n')
		}
		return b
	}
	req := &schemas.Event{V: 1, ID: "a", Type: schemas.TypeLeaseRequested, ProducedAtMs: t0, LeaseRequested: &schemas.LeaseRequested{
		Budget: "b", Holder: "h", WindowStartMs: t0 / dayMs * dayMs, Seq: 1, Demand: 50, Need: 5}}
	grant := &schemas.Event{V: 1, ID: "g", Type: schemas.TypeLeaseGranted, ProducedAtMs: t0 + 1, LeaseGranted: &schemas.LeaseGranted{
		Budget: "b", Holder: "h", WindowStartMs: t0 / dayMs * dayMs, Seq: 1, AckSeq: 1, Granted: 50, Amount: 50, Target: 50, Available: 100, TermMs: 2000}}
	ret := &schemas.Event{V: 1, ID: "r", Type: schemas.TypeLeaseReturned, ProducedAtMs: t0 + 2, LeaseReturned: &schemas.LeaseReturned{
		Budget: "b", Holder: "h", WindowStartMs: t0 / dayMs * dayMs, Seq: 2, Granted: 50, Returned: 50, Reason: schemas.LeaseTermEnded}}
	f.Add(seed(req, grant, ret))
	f.Add(seed(req, req, grant, grant))
	f.Add([]byte("{}\n\n"))
	cfg := Config{Budgets: []Budget{{ID: "b", Level: "tenant", Subject: "a", Unit: UnitTokens, Limit: 100, Window: WindowDay},
		{ID: "r", Level: "key", Subject: "k", Unit: UnitRequests, Limit: 10, Window: WindowRolling, RollingMs: 60_000, Slots: 6}}}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := NewPartition(cfg)
		if err != nil {
			t.Fatal(err)
		}
		h, err := NewHolder("h", cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(data, []byte("\n")) {
			if i >= 64 {
				break
			}
			var ev schemas.Event
			if schemas.Decode(line, &ev) != nil {
				continue
			}
			now := ev.ProducedAtMs
			if ev.LeaseGranted != nil {
				h.Apply(now, ev.LeaseGranted, nil)
			} else {
				h.Tick(now, nil)
			}
			if _, out := h.Check(now, "b", int64(len(line)%7), nil); len(out) > 2*len(cfg.Budgets) {
				t.Fatalf("a check produced %d messages", len(out))
			}
			outs := p.Apply(now, &ev, nil)
			for _, b := range p.st.Budgets {
				if c := b.Cur.committed(); len(outs) > 0 && c > b.pool() && anyAmount(outs, b.B.ID) {
					t.Fatalf("%s: granted up to %d of a pool of %d", b.B.ID, c, b.pool())
				}
			}
			for _, l := range h.st.Leases {
				if l.Used > l.Granted-l.Returned {
					t.Fatalf("holder uses %d of a lease of %d−%d", l.Used, l.Granted, l.Returned)
				}
			}
		}
		snap, err := p.MarshalSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		r, err := RestorePartition(cfg, snap)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := r.MarshalSnapshot(); !bytes.Equal(again, snap) {
			t.Fatalf("snapshot does not restore to itself:\n%s\n%s", snap, again)
		}
	})
}

func anyAmount(outs []Output, id string) bool {
	for _, o := range outs {
		if o.Grant.Budget == id && o.Grant.Amount > 0 {
			return true
		}
	}
	return false
}
