package bus

import "testing"

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
