package reserve

import (
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/schemas"
)

// Acting on produced decisions (docs/ledger-service.md): the client reads
// sluice.decisions read_uncommitted, so it sees a decision as soon as the
// ledger has produced it, before its transaction commits. If that
// transaction aborts, the same decisions — same ids, byte for byte — are
// produced again, by the same ledger or by the partition's next owner, after
// the first copies. Dedup drops the second copies. It is exported for the
// pipeline simulation (services/loadtest/pipesim), which runs the gateways' own
// dedup over its simulated decisions partitions.
//
// It needs no set of ids: the ledger produces the decisions of one input
// partition in input order (offset, then index within the input, as in the
// id "d-<partition>-<offset>-<index>"), and a Kafka partition keeps a
// producer's order, aborted copies included (a failed batch fails every
// later one of the producer, so an aborted run has no gaps). On the one
// decisions partition this client reads, a decision whose (offset, index)
// is not above the highest already delivered for its input partition is
// therefore a copy of a delivered one. That bounds the memory by the number
// of input partitions.
type Dedup struct {
	last map[int32]decisionPos // by input partition
}

type decisionPos struct{ offset, index int64 }

// NewDedup returns the dedup of one decisions partition's reader.
func NewDedup() *Dedup { return &Dedup{last: map[int32]decisionPos{}} }

// First reports whether ev (a decision) is delivered for the first time, and
// notes it.
func (s *Dedup) First(ev *schemas.Event) bool {
	d := ev.Decision
	pos := decisionPos{d.InputOffset, decisionIndex(ev.ID)}
	last, ok := s.last[d.InputPartition]
	if ok && (pos.offset < last.offset || pos.offset == last.offset && pos.index <= last.index) {
		return false
	}
	s.last[d.InputPartition] = pos
	return true
}

// decisionIndex is the index part of a decision id; -1 if there is none.
func decisionIndex(id string) int64 {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return -1
	}
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}
