package ledger

import (
	"github.com/sluice-dev/sluice/schemas"
)

// Gateway liveness (DESIGN.md §11): a gateway that dies must not hold its
// grants until the hold TTL. Gateways send Heartbeat events into every
// partition where they hold grants; the ledger remembers, per node, the log
// time of the last one. A node that has heartbeated and then stays silent
// for Config.NodeLivenessMs of log time is lost: its grants are given back
// as a release would give them back (concurrency and the estimate return),
// its queued reservations are dropped, and each gets an expired decision
// with reason node_lost.
//
// Liveness applies only to nodes that have sent a heartbeat: a gateway that
// predates heartbeats (or runs with them off) keeps today's guarantee, the
// hold TTL, and is never released early by mistake.
//
// Time is the log's, and the log itself can stall: while the broker is down
// nobody's heartbeat can be appended, and the first record after it comes
// back may be far ahead of every node's last heartbeat. Treating that silence
// as the nodes' would release every live gateway's grants at once and let
// the next requests double the load on the provider. So a silence of the
// whole partition longer than half the bound is a log stall and does not
// count against any node: their last-heartbeat times move forward by the
// gap. NextWakeMs asks for a Tick at least every quarter of the bound while
// nodes are tracked, so that a dead gateway in an otherwise quiet partition
// never looks like a stall.

// liveNode is one node's last heartbeat (log time) in this partition.
type liveNode struct {
	Node   string `json:"n"`
	LastMs int64  `json:"t"`
}

// livenessStallMs is the partition silence that counts as a log stall.
func (l *Ledger) livenessStallMs() int64 { return l.st.Config.NodeLivenessMs / 2 }

// livenessTickMs is the longest NextWakeMs lets the log stay silent while
// nodes are tracked: well under the stall threshold.
func (l *Ledger) livenessTickMs() int64 { return max(1, l.st.Config.NodeLivenessMs/4) }

// liveStall forgives a log stall: prevMs was the ledger's time before this
// record.
func (l *Ledger) liveStall(prevMs int64) {
	gap := l.st.Now - prevMs
	if len(l.st.Live) == 0 || gap <= l.livenessStallMs() {
		return
	}
	for i := range l.st.Live {
		l.st.Live[i].LastMs += gap
	}
}

// heartbeat records that ev's node is alive now.
func (l *Ledger) heartbeat(ev *schemas.Event) {
	if ev.Node == "" || len(ev.Node) > maxStrLen {
		l.st.Stats.Ignored++
		return
	}
	if i, ok := l.liveIdx[ev.Node]; ok {
		l.st.Live[i].LastMs = l.st.Now
		return
	}
	if len(l.st.Live) >= l.st.Config.NodesMax {
		l.st.Stats.Ignored++ // its grants fall back to the hold TTL
		return
	}
	if l.liveIdx == nil {
		l.liveIdx = map[string]int32{}
	}
	l.liveIdx[ev.Node] = int32(len(l.st.Live))
	l.st.Live = append(l.st.Live, liveNode{Node: ev.Node, LastMs: l.st.Now})
}

// expireLostNodes releases what every lost node holds and forgets the
// node. A node that stopped heartbeating because it holds nothing any more
// is forgotten the same way, with no decision.
func (l *Ledger) expireLostNodes(out []Output) []Output {
	bound := l.st.Config.NodeLivenessMs
	lost := false
	for i := range l.st.Live {
		if l.st.Live[i].LastMs+bound <= l.st.Now {
			lost = true
			break
		}
	}
	if !lost {
		return out
	}
	keep := l.st.Live[:0]
	for _, n := range l.st.Live {
		if n.LastMs+bound > l.st.Now {
			keep = append(keep, n)
			continue
		}
		delete(l.liveIdx, n.Node)
		before := len(out)
		out = l.releaseNode(n.Node, out)
		if len(out) > before {
			l.st.Stats.NodesLost++
		}
	}
	clear(l.st.Live[len(keep):])
	l.st.Live = keep
	for i := range l.st.Live {
		l.liveIdx[l.st.Live[i].Node] = int32(i)
	}
	return out
}

// releaseNode expires every granted or queued reservation of node, in
// reservation-slot order (a function of the log, so replay agrees). It
// walks the whole slab: nodes are lost rarely, reservations are many, and an
// index by node would tax every grant.
func (l *Ledger) releaseNode(node string, out []Output) []Output {
	for i := range l.st.Res {
		ri := int32(i)
		r := &l.st.Res[ri]
		if r.Node != node {
			continue
		}
		switch r.State {
		case stGranted:
			actual := [numDims]int64{dRequests: 1, dRequestsPerDay: 1, dRamp: 1}
			l.settle(ri, &actual, 0, stExpired, true)
			l.st.Stats.NodeLost++
			out = l.emit(out, r, schemas.Decision{
				Status: schemas.StatusHoldExpired, Reason: schemas.ReasonNodeLost,
				GatewayDecision: admittedGD(r), Borrowed: r.Flags&fBorrowed != 0,
			})
		case stQueued:
			l.dequeue(ri)
			l.finish(ri, stExpired)
			l.st.Stats.NodeLost++
			l.st.Scopes[r.Scope].Dirty = true
			out = l.emit(out, r, schemas.Decision{
				Status: schemas.StatusExpired, Reason: schemas.ReasonNodeLost,
				GatewayDecision: schemas.GDQueuedThenExpired, RetryClass: schemas.RetryCapacity,
			})
		}
	}
	return out
}

// liveWakeMs is the earliest log time at which liveness needs a record:
// the first node's deadline, or sooner, one liveness tick from now, so the
// partition's log never looks stalled while a node is tracked.
func (l *Ledger) liveWakeMs() (ms int64, ok bool) {
	if len(l.st.Live) == 0 {
		return 0, false
	}
	ms = l.st.Now + l.livenessTickMs()
	bound := l.st.Config.NodeLivenessMs
	for i := range l.st.Live {
		ms = min(ms, l.st.Live[i].LastMs+bound)
	}
	return ms, true
}
