package bus

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The partition of a node must never change between releases: a ledger and
// a gateway of different versions must agree on it.
func TestDecisionPartitionIsStable(t *testing.T) {
	for _, c := range []struct {
		node  string
		parts int32
		want  int32
	}{
		{"", 8, 5},
		{"gw-1", 8, 1},
		{"bench-gw", 4, 2},
		{"gw-1", 1, 0},
	} {
		if got := DecisionPartition(c.node, c.parts); got != c.want {
			t.Errorf("DecisionPartition(%q, %d) = %d, want %d", c.node, c.parts, got, c.want)
		}
	}
	seen := map[int32]bool{}
	for i := 0; i < 64; i++ {
		seen[DecisionPartition("gw-"+string(rune('a'+i%26))+string(rune('0'+i/26)), 8)] = true
	}
	if len(seen) < 6 {
		t.Errorf("64 node ids use only %d of 8 partitions", len(seen))
	}
}

// TestScopePartitioner: a key that is not a sub-scope goes where Kafka's
// default partitioner puts it (every scope stays where it was), and the
// sub-scopes of any scope split over N ≤ n partitions land on N
// different partitions.
func TestScopePartitioner(t *testing.T) {
	ours, kafkas := ScopePartitioner().ForTopic("t"), kgo.StickyKeyPartitioner(nil).ForTopic("t")
	part := func(tp kgo.TopicPartitioner, key string, n int) int {
		return tp.Partition(&kgo.Record{Key: []byte(key)}, n)
	}
	for _, key := range []string{"openai:gpt-4o", "anthropic:acme", "split:hot:dep:requests", "a#b#1", "x#01", "x#64", "x#999"} {
		for _, n := range []int{1, 3, 8} {
			if got, want := part(ours, key, n), part(kafkas, key, n); got != want {
				t.Errorf("%q over %d partitions: %d, Kafka's partitioner %d", key, n, got, want)
			}
		}
	}
	for s := 0; s < 200; s++ {
		scope := fmt.Sprintf("scope-%d", s)
		for _, n := range []int{2, 4, 8} {
			for _, split := range []int{2, n} {
				seen := map[int]bool{}
				for i := 0; i < split; i++ {
					seen[part(ours, fmt.Sprintf("%s#%d", scope, i), n)] = true
				}
				if len(seen) != split {
					t.Fatalf("%s split %d over %d partitions uses %d of them", scope, split, n, len(seen))
				}
			}
		}
	}
	if got, want := part(ours, "openai:hot#1", 4), (part(kafkas, "openai:hot", 4)+1)%4; got != want {
		t.Errorf("openai:hot#1 over 4: %d, want %d (the scope's partition + 1)", got, want)
	}
}

// TestKafkaHashIsKafkas: the hash scopeHasher calls directly is
// franz-go's default key partitioner, for keys of every length (murmur2's
// tail cases) and partition counts, and it allocates nothing.
func TestKafkaHashIsKafkas(t *testing.T) {
	kafkas := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for l := 0; l < 40; l++ {
		key := make([]byte, l)
		for i := range key {
			key[i] = byte(l*31 + i*7 + 0x80*(i%2))
		}
		for _, n := range []int{1, 2, 3, 7, 8, 64, 1000} {
			if got, want := kafkaHash(key, n), kafkas.Partition(&kgo.Record{Key: key}, n); got != want {
				t.Errorf("key %x over %d partitions: %d, Kafka's partitioner %d", key, n, got, want)
			}
		}
	}
	key := []byte("openai:gpt-4o#2")
	if a := testing.AllocsPerRun(100, func() { _ = scopeHasher(key, 8) }); a != 0 {
		t.Errorf("scopeHasher allocates %v times per call", a)
	}
}
