package bus

import (
	"context"
	"fmt"

	"github.com/sluice-dev/sluice/schemas"
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

// ScopePartitioner is the partitioner of sluice.requests, whose records
// are keyed by scope: Kafka's (murmur2 of the key, as kgo's
// StickyKeyPartitioner), except that the sub-scopes of a split hot scope,
// "<scope>#<i>" (ledger.SubScope, read by schemas.SplitScopeOf), go to consecutive partitions from the
// one of "<scope>": sub-scope i to (partition of scope + i) mod n. So the
// N sub-scopes of a scope split over N ≤ n partitions always land on N
// different partitions, which is the point of splitting it, whatever the
// scope is called; hashed as names they shared one about as often as not
// (two of four sub-scopes on one partition, undoing the split). Every
// producer of sluice.requests and every computation of a scope's
// partition (ledgerd.PartitionOf) must use it.
func ScopePartitioner() kgo.Partitioner { return kgo.StickyKeyPartitioner(scopeHasher) }

// kafkaHash is Kafka's key partitioner (murmur2, as franz-go's default
// StickyKeyPartitioner hashes a keyed record), called on the key itself:
// going through the partitioner took a kgo.Record on the heap per record
// produced, about 200 bytes each (issue 25). TestScopePartitioner and
// TestKafkaHashIsKafkas hold it to franz-go's.
var kafkaHash = kgo.KafkaHasher(murmur2)

func scopeHasher(key []byte, n int) int {
	base, i, ok := schemas.SplitScopeOf(key)
	if !ok {
		return kafkaHash(key, n)
	}
	return (kafkaHash(base, n) + i) % n
}

// murmur2 is Kafka's (and franz-go's unexported) murmur2 of b.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		k := uint32(b[3])<<24 + uint32(b[2])<<16 + uint32(b[1])<<8 + uint32(b[0])
		b = b[4:]
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
