package bus

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DecisionPartition is the partition of sluice.decisions that carries the
// decisions for gateway node (the envelope's Node of the request they
// answer), out of partitions. The ledger produces there and the gateway
// reads only there, so a gateway never reads, or decodes, another
// gateway's decisions. It is a stable hash (FNV-1a) of the node id: both
// sides compute it from the same id and the topic's partition count, which
// each reads once at start (adding partitions to sluice.decisions therefore
// needs a restart of the ledgers and the gateways).
func DecisionPartition(node string, partitions int32) int32 {
	if partitions <= 0 {
		panic(fmt.Sprintf("bus.DecisionPartition: %d partitions", partitions))
	}
	// FNV-1a, inline so the ledger's hot path does not allocate.
	h := uint32(2166136261)
	for i := 0; i < len(node); i++ {
		h ^= uint32(node[i])
		h *= 16777619
	}
	return int32(h % uint32(partitions))
}

// PartitionCount returns the number of partitions of topic, read through cl.
func PartitionCount(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("list topic %s: %w", topic, err)
	}
	t, ok := td[topic]
	if !ok || t.Err != nil || len(t.Partitions) == 0 {
		return 0, fmt.Errorf("topic %s has no partitions (run `sluice topics ensure`)", topic)
	}
	return int32(len(t.Partitions)), nil
}
