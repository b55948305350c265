package ledgerd

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLivenessJudge: a peer is presumed dead only once our own heartbeats
// span PeerDeadAfter in the log after its last one, so that neither a
// broker that stalls everybody nor a pause of our own process makes a peer
// look silent; a leaving peer, one of another group, and one already
// evicted under the same member id are left alone.
func TestLivenessJudge(t *testing.T) {
	type beat struct {
		node, member, group string
		sentMs              int64
		leaving             bool
	}
	own := func(ms int64) beat { return beat{node: "a", sentMs: ms} }
	peerB := func(member string) beat { return beat{node: "b", member: member} }
	cases := []struct {
		name  string
		log   []beat
		evict []string // node/member ids evicted after the log, in order of judge calls
	}{
		{"peer heard recently", []beat{own(0), peerB("m1"), own(200), own(400), peerB("m1"), own(600), own(1000)}, nil},
		{"peer silent for 1 s of own heartbeats", []beat{own(0), peerB("m1"), own(200), own(400), own(800), own(1200)}, []string{"b/m1"}},
		{"our own pause is no peer's silence", []beat{own(0), peerB("m1"), peerB("m1"), own(2000)}, nil},
		{"no own heartbeats, no judgement (broker frozen)", []beat{own(0), peerB("m1")}, nil},
		{"a leaving peer is forgotten", []beat{own(0), peerB("m1"), {node: "b", leaving: true}, own(200), own(1500)}, nil},
		{"another group's member is not ours", []beat{own(0), {node: "c", member: "x", group: "other"}, own(200), own(1500)}, nil},
		{"evicted once per member id", []beat{own(0), peerB("m1"), own(100), own(1200), own(1400)}, []string{"b/m1"}},
		{"a rejoined peer is judged afresh", []beat{own(0), peerB("m1"), own(100), own(1200), peerB("m2"), own(1300), own(2400)}, []string{"b/m1", "b/m2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lv := &liveness{s: &Service{cfg: Config{Node: "a", Group: "g"}}, deadAfter: time.Second, peers: map[string]*peer{}}
			var got []string
			for _, b := range c.log {
				g := b.group
				if g == "" {
					g = "g"
				}
				v, _ := json.Marshal(memberBeat{Node: b.node, Group: g, MemberID: b.member, SentMs: b.sentMs, Leaving: b.leaving})
				lv.read(&kgo.Record{Value: v})
				for _, e := range lv.judge() {
					got = append(got, e.node+"/"+e.memberID)
				}
			}
			if !slices.Equal(got, c.evict) {
				t.Errorf("evicted %v, want %v", got, c.evict)
			}
		})
	}
}
