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
	// owns is our heartbeats every 200 ms over [from, to].
	owns := func(from, to int64) []beat {
		var bs []beat
		for ms := from; ms <= to; ms += 200 {
			bs = append(bs, own(ms))
		}
		return bs
	}
	peerB := func(member string) beat { return beat{node: "b", member: member} }
	cat := func(parts ...any) []beat {
		var bs []beat
		for _, p := range parts {
			switch p := p.(type) {
			case beat:
				bs = append(bs, p)
			case []beat:
				bs = append(bs, p...)
			}
		}
		return bs
	}
	cases := []struct {
		name  string
		log   []beat
		evict []string // node/member ids evicted, in order
		// An own beat's time is the record's (the broker's append time);
		// a peer's record carries the time of the own beat before it.
	}{
		{"peer heard recently", []beat{own(0), peerB("m1"), own(200), own(400), peerB("m1"), own(600), own(1000)}, nil},
		{"peer silent for 1 s of own heartbeats", []beat{own(0), peerB("m1"), own(200), own(400), own(800), own(1200)}, []string{"b/m1"}},
		{"our own pause is no peer's silence", []beat{own(0), peerB("m1"), peerB("m1"), own(2000), own(2200), own(2400)}, nil},
		{"after our own stall, a grace of 5 s", cat(own(0), peerB("m1"), own(200), owns(5000, 9800)), nil},
		{"a hiccup shorter than the bound is no stall", cat(own(0), peerB("m1"), own(200), owns(900, 1300)), []string{"b/m1"}},
		{"a peer not back after the grace is dead", cat(own(0), peerB("m1"), own(200), owns(5000, 10000)), []string{"b/m1"}},
		{"no own heartbeats, no judgement (broker frozen)", []beat{own(0), peerB("m1")}, nil},
		{"a leaving peer is forgotten", []beat{own(0), peerB("m1"), {node: "b", leaving: true}, own(200), own(1500)}, nil},
		{"another group's member is not ours", []beat{own(0), {node: "c", member: "x", group: "other"}, own(200), own(1500)}, nil},
		{"evicted once per member id", cat(own(0), peerB("m1"), owns(200, 3000)), []string{"b/m1"}},
		{"a rejoined peer is judged afresh", cat(own(0), peerB("m1"), owns(200, 1200), peerB("m2"), owns(1400, 2400)), []string{"b/m1", "b/m2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lv := &liveness{s: &Service{cfg: Config{Node: "a", Group: "g"}}, deadAfter: time.Second, peers: map[string]*peer{}}
			var got []string
			var at int64
			for _, b := range c.log {
				if b.node == "a" {
					at = b.sentMs
				}
				g := b.group
				if g == "" {
					g = "g"
				}
				v, _ := json.Marshal(memberBeat{Node: b.node, Group: g, MemberID: b.member, SentMs: b.sentMs, Leaving: b.leaving})
				lv.read(&kgo.Record{Value: v, Timestamp: time.UnixMilli(at)})
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

// FuzzMemberBeat: a members record of any bytes neither panics the tail
// nor makes it evict anyone (a record that does not decode is ignored).
func FuzzMemberBeat(f *testing.F) {
	for _, b := range []string{`{"node":"b","group":"g","member_id":"m","generation":3,"sent_ms":1}`, `{"node":"b","group":"g","leaving":true}`, `{}`, `null`, ``} {
		f.Add([]byte(b), int64(0))
	}
	f.Fuzz(func(t *testing.T, v []byte, at int64) {
		lv := &liveness{s: &Service{cfg: Config{Node: "a", Group: "g"}}, deadAfter: time.Second, peers: map[string]*peer{}}
		own, _ := json.Marshal(memberBeat{Node: "a", Group: "g"})
		lv.read(&kgo.Record{Value: own, Timestamp: time.UnixMilli(0)})
		lv.read(&kgo.Record{Value: v, Timestamp: time.UnixMilli(at)})
		for ms := int64(100); ms <= 900; ms += 100 {
			lv.read(&kgo.Record{Value: own, Timestamp: time.UnixMilli(ms)})
			if got := lv.judge(); len(got) != 0 {
				t.Fatalf("evicted %v within the bound after %q", got, v)
			}
		}
	})
}
