package ledgerd

import (
	"fmt"

	"github.com/sluice-dev/sluice/schemas"
)

// leaseOutputs queues the lease messages of cross-scope budgets that the
// last Apply of partition p produced (ledger/budgets.go): LeaseRequested
// and LeaseReturned keyed by budget id, LeaseGranted keyed by the holder's
// scope, each to the partition of sluice.requests its key hashes to (the
// gateways' partitioner, PartitionOf). They go out in the same
// transaction as the decisions of the same input, so a lease message is
// on the log exactly when the state that produced it is committed; a
// member that takes the partition over replays the inputs and derives
// them again, and the receivers ignore the repeats (cumulative counters,
// sequence numbers).
func (s *Service) leaseOutputs(ps *partState, p int32, offset, logTimeMs int64) error {
	los := ps.l.LeaseOutputs()
	for i := range los {
		lo := &los[i]
		b, err := schemas.Encode(lo.Event(p, offset, logTimeMs))
		if err != nil {
			return fmt.Errorf("encode lease message of partition %d offset %d: %w", p, offset, err)
		}
		key := lo.Key()
		ps.pending = append(ps.pending, output{topic: s.cfg.Topics.Requests,
			partition: PartitionOf(key, int(s.requestParts)), key: []byte(key), value: b, lease: true})
	}
	if n := len(los); n > 0 {
		s.m.leaseMessages.Add(float64(n))
	}
	return nil
}
