package reserve

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
)

// Readiness (docs/gateway.md, Operational endpoints): a gateway is ready
// when it can get decisions now, which needs more than a connected client.
// The ledger may not have joined yet (start-up), may be stopped, or may own
// the partition and not be applying it. So the probe checks, for each
// scope the gateway routes to, that the ledger answers there:
//
//   - A decision for one of this node's requests proves a round trip in
//     its scope.
//   - The probe produces a Heartbeat keyed by the scope each round
//     (harmless: the node's own liveness signal). It is proven applied once
//     the ledger's consumer group has committed an offset past it, which
//     the ledger does only after applying it.
//   - The ledger commits only with output, though: a heartbeat decides
//     nothing, so in an idle partition its commit waits for the next
//     snapshot (every 30 s with input). So a scope also counts as answered
//     while a member of the ledger's group (group Stable) holds its
//     partition and no probe there has waited longer than StuckMs for
//     its commit: a ledger that left or lost the group fails at once, one
//     that holds the partition and applies nothing fails after StuckMs.
//
// The probe also lists the end offset of this node's partition of
// sluice.decisions, which needs that partition's leader, and counts fetch
// errors on it.

// ProbeConfig configures StartProbe.
type ProbeConfig struct {
	// Group is the ledger's consumer group (ledgerd.Config.Group; default
	// "sluice-ledger").
	Group string
	// Scopes returns the provider scopes to probe (called every round, so
	// a configuration reload is followed).
	Scopes func() []string
	// Interval between probe rounds (default 1s).
	Interval time.Duration
	// StuckMs: a probe not committed past after this long means the
	// partition's ledger is not applying (default 45000: the ledger's
	// snapshot interval, 30 s, plus its commit interval and slack).
	StuckMs int64
}

// Health is what the client knows of its path to the ledger.
type Health struct {
	// Probing is false until StartProbe: nothing below is known then.
	Probing bool
	// DecisionsOK: the last probe listed the end offset of this node's
	// decision partition and no fetch of it has failed since.
	DecisionsOK bool
	// RoundTripMs is, per scope, the unix ms at which the newest event
	// proven to have gone through the ledger was produced (a probe the
	// ledger committed past, or a request it decided).
	RoundTripMs map[string]int64
	// HeldMs is, per scope, the unix ms of the newest probe round that saw
	// a ledger member hold the scope's partition with no probe stuck.
	HeldMs map[string]int64
}

// probeSent is one probe heartbeat waiting for the ledger's commit.
type probeSent struct {
	scope  string
	offset int64
	atMs   int64
}

// pendingMax bounds the probes remembered per partition while the ledger
// does not commit (the oldest is forgotten first).
const pendingMax = 16

// roundTrips tracks proven ledger round trips. Time is a parameter (unix
// ms), so its rules are tested without a clock.
type roundTrips struct {
	mu        sync.Mutex
	pending   map[int32][]probeSent
	lastMs    map[string]int64
	heldMs    map[string]int64
	partition map[string]int32 // scope → its partition of the requests topic
}

func newRoundTrips() *roundTrips {
	return &roundTrips{pending: map[int32][]probeSent{}, lastMs: map[string]int64{}, heldMs: map[string]int64{}, partition: map[string]int32{}}
}

// sent notes a probe of scope produced at offset of partition at atMs.
func (r *roundTrips) sent(scope string, partition int32, offset, atMs int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.partition[scope] = partition
	p := append(r.pending[partition], probeSent{scope: scope, offset: offset, atMs: atMs})
	if len(p) > pendingMax {
		p = p[len(p)-pendingMax:]
	}
	r.pending[partition] = p
}

// committed notes that the ledger group's committed offset of partition is
// next (the next offset it will consume): every probe below it was applied.
func (r *roundTrips) committed(partition int32, next int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending[partition]
	i := 0
	for ; i < len(p) && p[i].offset < next; i++ {
		r.proveLocked(p[i].scope, p[i].atMs)
	}
	r.pending[partition] = p[i:]
}

// decided notes a decision in scope for a request produced at atMs.
func (r *roundTrips) decided(scope string, atMs int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.proveLocked(scope, atMs)
}

func (r *roundTrips) proveLocked(scope string, atMs int64) {
	if atMs > r.lastMs[scope] {
		r.lastMs[scope] = atMs
	}
}

// held notes the partitions a stable ledger group holds at nowMs: each
// scope on one of them whose oldest uncommitted probe is not older than
// stuckMs is held.
func (r *roundTrips) held(assigned map[int32]bool, nowMs, stuckMs int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for sc, p := range r.partition {
		if !assigned[p] {
			continue
		}
		if q := r.pending[p]; len(q) > 0 && nowMs-q[0].atMs > stuckMs {
			continue
		}
		r.heldMs[sc] = nowMs
	}
}

func (r *roundTrips) snapshot() (proven, held map[string]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.lastMs), maps.Clone(r.heldMs)
}

// StartProbe starts probing the ledger round trip for the scopes pc names,
// once per interval until Close. Call it at most once.
func (c *Client) StartProbe(pc ProbeConfig) {
	if pc.Interval <= 0 {
		pc.Interval = time.Second
	}
	if pc.Group == "" {
		pc.Group = "sluice-ledger"
	}
	if pc.StuckMs <= 0 {
		pc.StuckMs = 45_000
	}
	c.probing.Store(true)
	c.probeStop, c.probeDone = make(chan struct{}), make(chan struct{})
	go c.probe(pc)
}

// Health reports the client's path to the ledger now.
func (c *Client) Health() Health {
	h := Health{Probing: c.probing.Load()}
	h.RoundTripMs, h.HeldMs = c.trips.snapshot()
	h.DecisionsOK = c.decisionsOK.Load() && c.fetchFailed.Load() == 0
	return h
}

func (c *Client) probe(pc ProbeConfig) {
	defer close(c.probeDone)
	adm := kadm.NewClient(c.prod)
	t := time.NewTicker(pc.Interval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), pc.Interval)
		if err := c.probeRound(ctx, adm, pc); err != nil {
			c.log.Debug("ledger probe", "err", err)
		}
		cancel()
		select {
		case <-c.probeStop:
			return
		case <-t.C:
		}
	}
}

// probeRound checks the decision partition, reads the ledger group's
// commits (proving earlier probes) and sends this round's probes.
func (c *Client) probeRound(ctx context.Context, adm *kadm.Client, pc ProbeConfig) error {
	c.fetchFailed.Store(0)
	ends, err := adm.ListEndOffsets(ctx, c.cfg.Topics.Decisions)
	own := int32(-1)
	if err == nil {
		if parts := len(ends[c.cfg.Topics.Decisions]); parts > 0 {
			own = bus.DecisionPartition(c.cfg.Node, int32(parts))
		}
	}
	e, ok := ends.Lookup(c.cfg.Topics.Decisions, own)
	c.decisionsOK.Store(err == nil && ok && e.Err == nil)

	if offs, ferr := adm.FetchOffsets(ctx, pc.Group); ferr == nil {
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == c.cfg.Topics.Requests && o.Err == nil && o.At >= 0 {
				c.trips.committed(o.Partition, o.At)
			}
		})
	} else if err == nil {
		err = fmt.Errorf("fetch offsets of group %s: %w", pc.Group, ferr)
	}
	if gs, gerr := adm.DescribeGroups(ctx, pc.Group); gerr == nil {
		if g, ok := gs[pc.Group]; ok && g.Err == nil && g.State == "Stable" {
			assigned := map[int32]bool{}
			for p := range g.AssignedPartitions()[c.cfg.Topics.Requests] {
				assigned[p] = true
			}
			c.trips.held(assigned, time.Now().UnixMilli(), pc.StuckMs)
		}
	} else if err == nil {
		err = fmt.Errorf("describe group %s: %w", pc.Group, gerr)
	}
	for _, sc := range pc.Scopes() {
		now := time.Now().UnixMilli()
		ev := heartbeatEvent(c.cfg.Node, sc, now)
		b, encErr := schemas.Encode(ev)
		if encErr != nil {
			return encErr
		}
		r, perr := c.prod.ProduceSync(ctx, &kgo.Record{Topic: c.cfg.Topics.Requests, Key: []byte(sc), Value: b}).First()
		if perr != nil {
			return fmt.Errorf("produce probe for scope %s: %w", sc, perr)
		}
		c.trips.sent(sc, r.Partition, r.Offset, now)
	}
	return err
}
