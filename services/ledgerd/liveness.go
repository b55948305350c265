package ledgerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/internal/bus"
)

// Peer liveness: a crashed member is found, and its partitions handed on,
// within about a second instead of the group session timeout (6 s, the
// broker's group.min.session.timeout.ms floor) plus the transaction timeout
// (docs/ledger-service.md, Takeover).
//
// Every member appends a small heartbeat to the members topic every
// Config.PeerHeartbeat, from its own goroutine, and tails that topic. A peer
// is presumed dead when our own heartbeats have spanned Config.PeerDeadAfter
// of log append time since its last one: all go through the one partition
// and are stamped by its leader, so a broker that is slow or frozen for
// everybody holds back our own heartbeats too and judges no one, and what
// counts is the log order, not when we read it. When our own heartbeats
// stop for longer than PeerDeadAfter (the broker was down or frozen, or our
// process was paused), no peer is judged for a grace of 5 × PeerDeadAfter
// after they resume: peers reconnect at their own pace after an outage,
// and one that is slower than we are is not dead.
//
// A dead peer is then evicted the way the broker would evict it after the
// session timeout, only at once: its transactional id is fenced
// (InitProducerID, which makes the coordinator abort the transaction it left
// open, so the next owner's OffsetFetch, which requires stable offsets, is
// not held back until the transaction timeout), then it is removed from the
// group (LeaveGroup naming its member id, which the coordinator accepts from
// any client for a dynamic member), which starts the rebalance that gives its
// partitions to the survivors.
//
// A false positive (a peer that was only paused) costs a rebuild, never a
// decision: its transaction is aborted by the fence, its next produce or End
// fails fenced (a fatal error: the member recreates its session, rejoins and
// rebuilds), and the decisions it had produced are re-derived, byte for byte,
// by whoever takes the partitions, as after any crash.

// Defaults of Config.PeerHeartbeat and Config.PeerDeadAfter.
const (
	DefaultPeerHeartbeat = 100 * time.Millisecond
	DefaultPeerDeadAfter = 800 * time.Millisecond
)

// memberBeat is one record of the members topic (JSON, keyed by node).
type memberBeat struct {
	Node       string `json:"node"`
	Group      string `json:"group"`
	MemberID   string `json:"member_id,omitempty"`
	Generation int32  `json:"generation"`
	// SentMs is the sender's clock, for people reading the topic; the
	// judgement uses the broker's append time.
	SentMs int64 `json:"sent_ms"`
	// Leaving is set by a member that stops cleanly: peers forget it
	// instead of evicting it (it has left the group and committed).
	Leaving bool `json:"leaving,omitempty"`
}

// peer is what the tail knows of another member.
type peer struct {
	memberID   string
	generation int32
	// ownAfter is the append time (ms) of the first of our own heartbeats
	// that followed the peer's last one in the log (0: none yet).
	ownAfter int64
	// evicted: we evicted this member id already.
	evicted bool
}

// liveness runs the heartbeat and the tail of one member.
type liveness struct {
	s         *Service
	cl        *kgo.Client
	topic     string
	every     time.Duration
	deadAfter time.Duration
	// group returns the session's current member id and generation ("" when
	// not in the group).
	group func() (string, int32)

	peers map[string]*peer // the tail's only
	// ownLast is the append time (ms) of our newest heartbeat read back;
	// graceUntil the append time before which no peer is judged (after a
	// stall of our own heartbeats).
	ownLast, graceUntil int64
	wg                  sync.WaitGroup
}

// startLiveness starts the member's heartbeat and tail; the returned func
// stops them and, if the stop is clean, publishes a leaving record. With PeerDeadAfter < 0, or a
// members topic that cannot be used, it returns a no-op: takeover then
// falls back to the group session timeout.
func (s *Service) startLiveness(ctx context.Context) func(clean bool) {
	if s.cfg.PeerDeadAfter < 0 {
		return func(bool) {}
	}
	cl, err := kgo.NewClient(bus.Opts(s.cfg.Brokers,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.cfg.Topics.Members: {0: kgo.NewOffset().AtEnd()}}),
		kgo.FetchMaxWait(50*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		// A heartbeat that cannot go out soon is worthless: the next one
		// replaces it.
		kgo.RecordDeliveryTimeout(2*time.Second),
		// Heartbeats resume within about a second of the broker's return
		// (bus.RetryBackoff), as the session does: peers judge each other
		// by them.
		kgo.RetryBackoffFn(bus.RetryBackoff),
	)...)
	if err != nil {
		s.log.Warn("peer liveness off: no client", "err", err)
		return func(bool) {}
	}
	lv := &liveness{s: s, cl: cl, topic: s.cfg.Topics.Members, every: s.cfg.PeerHeartbeat, deadAfter: s.cfg.PeerDeadAfter,
		group: s.groupMember, peers: map[string]*peer{}}
	lctx, cancel := context.WithCancel(ctx)
	lv.wg.Add(2)
	go lv.beat(lctx)
	go lv.tail(lctx)
	return func(clean bool) {
		cancel()
		lv.wg.Wait()
		if clean {
			// Tell peers we are gone on purpose, so that none fences
			// the transactional id a restarted member of this node
			// will use.
			// Not ProduceSync: a record already buffered is not failed
			// by its context, and with the brokers gone the wait never
			// ended (a kfake test hung for minutes); Close fails it.
			sent := make(chan struct{})
			lv.cl.Produce(context.Background(), lv.record(memberBeat{Leaving: true}), func(*kgo.Record, error) { close(sent) })
			select {
			case <-sent:
			case <-time.After(time.Second):
			}
		}
		cl.Close()
	}
}

// groupMember reads the current session's member id and generation; safe
// from any goroutine (the poll loop replaces the session on recreate).
func (s *Service) groupMember() (string, int32) {
	cl := s.sessClient.Load()
	if cl == nil {
		return "", -1
	}
	return cl.GroupMetadata()
}

func (lv *liveness) record(b memberBeat) *kgo.Record {
	b.Node, b.Group = lv.s.cfg.Node, lv.s.cfg.Group
	if b.SentMs == 0 {
		b.SentMs = time.Now().UnixMilli()
	}
	v, _ := json.Marshal(b)
	return &kgo.Record{Topic: lv.topic, Partition: 0, Key: []byte(b.Node), Value: v}
}

// beat appends a heartbeat every lv.every. It also beats while the member
// is not in the group (no member id): its own heartbeats are the clock
// against which it judges the others.
func (lv *liveness) beat(ctx context.Context) {
	defer lv.wg.Done()
	t := time.NewTicker(lv.every)
	defer t.Stop()
	for {
		id, gen := lv.group()
		lv.cl.Produce(ctx, lv.record(memberBeat{MemberID: id, Generation: gen}), nil)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tail reads the members topic and evicts the peers it finds dead.
func (lv *liveness) tail(ctx context.Context) {
	defer lv.wg.Done()
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, lv.every)
		fs := lv.cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(lv.read)
		for _, e := range lv.judge() {
			lv.wg.Add(1)
			go func() {
				defer lv.wg.Done()
				lv.evict(ctx, e)
			}()
		}
	}
}

// read applies one heartbeat record to the view of the group.
func (lv *liveness) read(r *kgo.Record) {
	var b memberBeat
	if json.Unmarshal(r.Value, &b) != nil || b.Group != lv.s.cfg.Group || b.Node == "" {
		return
	}
	at := r.Timestamp.UnixMilli()
	if b.Node == lv.s.cfg.Node {
		if b.Leaving {
			return
		}
		// A stall of our own heartbeats longer than the bound (an outage,
		// or this process paused): peers reconnect at their own pace.
		// Shorter hiccups (hundreds of ms on a loaded machine) keep the
		// connections and need no grace; with half the bound as the
		// trigger, one of them hid a crash for 2.8 s (issue 19).
		if lv.ownLast != 0 && at-lv.ownLast > lv.deadAfter.Milliseconds() {
			lv.graceUntil = at + 5*lv.deadAfter.Milliseconds()
		}
		lv.ownLast = at
		for _, p := range lv.peers {
			if p.ownAfter == 0 {
				p.ownAfter = at
			}
		}
		return
	}
	if b.Leaving {
		delete(lv.peers, b.Node)
		return
	}
	p := lv.peers[b.Node]
	if p == nil {
		p = &peer{}
		lv.peers[b.Node] = p
	}
	if p.memberID != b.MemberID {
		p.evicted = false
	}
	p.memberID, p.generation, p.ownAfter = b.MemberID, b.Generation, 0
}

// judge returns the peers silent for deadAfter of our own heartbeats, and
// marks them evicted. A peer that heartbeats again with the same member id
// after its eviction is not evicted twice; one with a new member id (it
// rejoined) is judged afresh.
func (lv *liveness) judge() []evictee {
	if lv.ownLast < lv.graceUntil {
		return nil
	}
	var out []evictee
	for node, p := range lv.peers {
		if p.ownAfter == 0 || lv.ownLast-p.ownAfter < lv.deadAfter.Milliseconds() {
			continue
		}
		if p.evicted {
			if lv.ownLast-p.ownAfter > 10*lv.deadAfter.Milliseconds() {
				delete(lv.peers, node) // long gone: forget it
			}
			continue
		}
		p.evicted = true
		out = append(out, evictee{node: node, memberID: p.memberID, silent: time.Duration(lv.ownLast-p.ownAfter) * time.Millisecond})
	}
	return out
}

// evictee is a peer judge found dead.
type evictee struct {
	node, memberID string
	silent         time.Duration
}

// evict fences node's transactional id and removes its member from the
// group. Both are idempotent: several survivors may evict the same peer.
func (lv *liveness) evict(ctx context.Context, e evictee) {
	s, node, memberID, silent := lv.s, e.node, e.memberID, e.silent
	start := time.Now()
	s.log.Warn("ledger peer silent; fencing its transactions and removing it from the group", "peer", node, "member_id", memberID, "silent", silent)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ferr := fenceTransactionalID(ctx, lv.cl, transactionalID(node), s.cfg.TransactionTimeout)
	var lerr error
	if memberID != "" {
		lerr = removeMember(ctx, lv.cl, s.cfg.Group, memberID, fmt.Sprintf("sluice ledger %s found %s silent for %v", s.cfg.Node, node, silent))
	}
	s.m.peerEvictions.Inc()
	s.log.Warn("ledger peer evicted", "peer", node, "member_id", memberID, "took", time.Since(start), "fence_err", ferr, "leave_err", lerr)
}

// transactionalID is the transactional id of node's sessions.
func transactionalID(node string) string { return "sluice-ledger-" + node }

// fenceTransactionalID bumps txnID's producer epoch with an InitProducerID,
// as a restarted producer would: the coordinator aborts the transaction the
// old producer left open (answering CONCURRENT_TRANSACTIONS until the abort
// markers are written, which we retry), and refuses the old producer from
// then on.
func fenceTransactionalID(ctx context.Context, cl *kgo.Client, txnID string, timeout time.Duration) error {
	backoff := 10 * time.Millisecond
	for {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &txnID
		req.TransactionTimeoutMillis = int32(timeout.Milliseconds())
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err == nil {
			return nil
		}
		// A transport error is retried while ctx allows, as are the
		// coordinator's retriable answers (CONCURRENT_TRANSACTIONS while
		// it writes the abort markers, a coordinator loading or moving).
		var ke *kerr.Error
		if errors.As(err, &ke) && !ke.Retriable && ke != kerr.ConcurrentTransactions {
			return fmt.Errorf("fence %s: %w", txnID, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fence %s: %w", txnID, errors.Join(err, ctx.Err()))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 40*time.Millisecond) // the abort takes tens of ms: poll it closely
	}
}

// removeMember sends LeaveGroup for memberID of group on its behalf
// (LeaveGroup v3+, KIP-345's batch form). The classic group coordinator
// removes a dynamic member named by id whoever asks, and prepares a
// rebalance at once. A member already gone answers UNKNOWN_MEMBER_ID,
// which is success here.
func removeMember(ctx context.Context, cl *kgo.Client, group, memberID, reason string) error {
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = memberID
	m.Reason = &reason
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("leave group %s for %s: %w", group, memberID, err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("leave group %s for %s: %w", group, memberID, err)
	}
	for _, mr := range resp.Members {
		if err := kerr.ErrorForCode(mr.ErrorCode); err != nil && err != kerr.UnknownMemberID {
			return fmt.Errorf("leave group %s for %s: %w", group, memberID, err)
		}
	}
	return nil
}

// ensureMembersTopic creates the members topic if it is missing.
func ensureMembersTopic(ctx context.Context, brokers []string, names bus.Names) error {
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = bus.Ensure(ctx, kadm.NewClient(cl), []bus.TopicSpec{bus.MembersSpec(names, -1)})
	return err
}
