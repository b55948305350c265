package ledgerd

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// The partition loop's encode path (issue 25): a decision used to cost its
// Event, a copy of its Decision, a 512-byte buffer of its own and a label
// lookup in the decisions counter (WithLabelValues hashes both labels and
// takes the vector's lock), all on the loop that every decision of the
// member waits behind. decisionEncoder reuses the Event and Decision and
// carves the record values out of slabs; decisionCounters remembers the
// counter of each (status, dimension). What is left per decision is its
// id string (Output.ID) and the slab's share (the value's and the key's).

// encodeSlabBytes is the size of one slab of record values: a few hundred
// decisions of a few hundred bytes each. A slab is never written again once
// a value is carved out of it (the producer holds the values until the
// broker acknowledges them, after the loop has moved on), so a full slab is
// replaced, not reset, and the garbage collector frees it with the last
// record that points into it.
const encodeSlabBytes = 64 << 10

// encodeSlabSpareMin is the room below which a new slab is started: more
// than any decision event takes, so that a value is almost never split by
// a growing append (Append then copies into a new array, which is still
// correct: the values carved before keep the old one).
const encodeSlabSpareMin = 2 << 10

// decisionEncoder encodes decisions into slabs. One per loop; not safe for
// concurrent use.
type decisionEncoder struct {
	ev   schemas.Event
	d    schemas.Decision
	slab []byte
}

// encode returns the encoding of o.Event(), byte for byte, as a slice the
// caller may hand to the producer and must not modify.
func (e *decisionEncoder) encode(o *ledger.Output) ([]byte, error) {
	o.EventInto(&e.ev, &e.d)
	return e.append(&e.ev)
}

// key returns k's bytes carved out of the slab, like a value: the record
// key of a decision ([]byte(d.Scope) was an allocation per decision).
func (e *decisionEncoder) key(k string) []byte {
	if cap(e.slab)-len(e.slab) < max(encodeSlabSpareMin, len(k)) {
		e.slab = make([]byte, 0, max(encodeSlabBytes, len(k)))
	}
	start := len(e.slab)
	e.slab = append(e.slab, k...)
	return e.slab[start:len(e.slab):len(e.slab)]
}

// encodeEvent is encode for any event (learned capacity).
func (e *decisionEncoder) encodeEvent(ev *schemas.Event) ([]byte, error) { return e.append(ev) }

func (e *decisionEncoder) append(ev *schemas.Event) ([]byte, error) {
	if cap(e.slab)-len(e.slab) < encodeSlabSpareMin {
		e.slab = make([]byte, 0, encodeSlabBytes)
	}
	start := len(e.slab)
	out, err := schemas.Append(e.slab, ev)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", ev.Type, err)
	}
	e.slab = out
	// The capacity is cut to the value: nothing appended to it can
	// reach the next value's bytes.
	return out[start:len(out):len(out)], nil
}

// decisionCounters caches the decisions counter of each (status, limit
// dimension): a few dozen pairs at most, looked up without the vector's
// hashing and lock. One per loop; not safe for concurrent use.
type decisionCounters struct {
	vec *prometheus.CounterVec
	by  map[[2]string]prometheus.Counter
}

func (c *decisionCounters) inc(d *schemas.Decision) {
	k := [2]string{string(d.Status), string(d.LimitDimension)}
	ctr, ok := c.by[k]
	if !ok {
		if c.by == nil {
			c.by = map[[2]string]prometheus.Counter{}
		}
		ctr = c.vec.WithLabelValues(k[0], k[1])
		c.by[k] = ctr
	}
	ctr.Inc()
}

// lagOf is the lag gauge of partition p, looked up once: apply sets it for
// every fetched partition of every poll, and WithLabelValues formatted the
// partition number and hashed it each time. Loop only.
func (m *metrics) lagOf(p int32) prometheus.Gauge {
	g, ok := m.lagBy[p]
	if !ok {
		if m.lagBy == nil {
			m.lagBy = map[int32]prometheus.Gauge{}
		}
		g = m.lag.WithLabelValues(strconv.Itoa(int(p)))
		m.lagBy[p] = g
	}
	return g
}
