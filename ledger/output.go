package ledger

import (
	"strconv"

	"github.com/sluice-dev/sluice/schemas"
)

// Output is one decision of the ledger, a value type so that the hot path
// does not allocate. The envelope fields are copied from the input that
// created the reservation (Node is the gateway waiting for the answer).
type Output struct {
	RequestID string
	Attempt   int32
	Node      string
	Scope     string
	Tenant    string
	KeyID     string
	Route     string
	Class     string
	Decision  schemas.Decision
	// Index is the position of this decision among the decisions produced
	// by its input record; with the input offset it names the decision.
	Index int32
}

// ID returns the decision's deterministic event id
// "d-<partition>-<input offset>-<index>".
func (o *Output) ID() string {
	b := make([]byte, 0, 40)
	b = append(b, "d-"...)
	b = strconv.AppendInt(b, int64(o.Decision.InputPartition), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, o.Decision.InputOffset, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(o.Index), 10)
	return string(b)
}

// Event converts o to a wire event. Its id is deterministic and its
// ProducedAtMs is the decision's log time, so replaying the same log yields
// byte-identical encoded decisions.
func (o *Output) Event() *schemas.Event {
	ev := new(schemas.Event)
	o.EventInto(ev, new(schemas.Decision))
	return ev
}

// EventInto is Event into storage the caller reuses (the ledger service's
// encoder, so that a decision costs no Event and Decision allocation): ev
// and d are overwritten, and ev.Decision points to d.
func (o *Output) EventInto(ev *schemas.Event, d *schemas.Decision) {
	*d = o.Decision
	*ev = schemas.Event{
		V:            schemas.Version,
		Type:         schemas.TypeDecision,
		ID:           o.ID(),
		ProducedAtMs: d.LogTimeMs,
		RequestID:    o.RequestID,
		Attempt:      o.Attempt,
		Node:         o.Node,
		Scope:        o.Scope,
		Tenant:       o.Tenant,
		KeyID:        o.KeyID,
		Route:        o.Route,
		Class:        o.Class,
		Decision:     d,
	}
}
