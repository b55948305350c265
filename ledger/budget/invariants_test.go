package budget

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestInvariantsCatchCorruption proves the -tags invariants checks are not
// vacuous: a healthy partition and holder pass, and each corruption of
// their state is reported with what broke.
func TestInvariantsCatchCorruption(t *testing.T) {
	cfg := Config{Budgets: []Budget{{ID: "acme-daily", Level: "tenant", Subject: "acme", Unit: UnitRequests, Limit: 100, Window: WindowDay}}}
	fresh := func(t *testing.T) (*Partition, *Holder) {
		t.Helper()
		p, err := NewPartition(cfg)
		if err != nil {
			t.Fatal(err)
		}
		h, err := NewHolder("s1", cfg)
		if err != nil {
			t.Fatal(err)
		}
		msgs := h.Want(t0, "acme-daily", 5, 1, nil)
		for _, m := range msgs {
			if m.Requested != nil {
				p.Apply(t0, &schemas.Event{Type: schemas.TypeLeaseRequested, LeaseRequested: m.Requested}, nil)
			}
		}
		if p.st.Budgets[0].Cur.Holders == nil {
			t.Fatal("the partition heard no holder")
		}
		return p, h
	}
	for _, tc := range []struct {
		name    string
		corrupt func(p *Partition, h *Holder)
		want    string
	}{
		{"healthy", func(*Partition, *Holder) {}, ""},
		{"partition: returned beyond granted", func(p *Partition, _ *Holder) { p.st.Budgets[0].Cur.Holders[0].Returned = 1 << 40 }, "returned only lags"},
		{"partition: window behind the clock", func(p *Partition, _ *Holder) { p.st.NowMs = p.st.Budgets[0].Cur.EndMs }, "does not lie ahead"},
		{"partition: index", func(p *Partition, _ *Holder) { p.idx["ghost"] = 0 }, "index holds"},
		{"holder: acked beyond sent", func(_ *Partition, h *Holder) { h.st.Leases[0].Acked = h.st.Leases[0].Seq + 1 }, "acked"},
		{"holder: returned beyond granted", func(_ *Partition, h *Holder) { h.st.Leases[0].Returned = h.st.Leases[0].Granted + 1 }, "returns only what it holds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, h := fresh(t)
			tc.corrupt(p, h)
			err := p.checkInvariants()
			if err == nil {
				err = h.checkInvariants()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("healthy state reported: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
