package ledger

// sendAt is the log time at which a grant of r should reach the
// provider, or 0 for at once: the grant's log time plus
// learn.pace_delivery_ms when r's path has an enforced requests bucket
// whose window holds at most one request (capacity × window ≤ period,
// where paceBound applies to a reported limit).
//
// Such a bucket spaces its grants one provider interval apart (plus the
// pace margin) in the ledger's log time, but the provider counts each
// one when it arrives, and the delay from grant to gateway varies with
// the machine's load (p50 4 ms, p95 17 ms, max 112 ms at load average
// 4–12): a grant delayed and the next one not arrive closer than the
// interval, and the provider refuses the second. Widening the margin to
// that maximum would cost more than 5 % of the goodput (services/loadtest
// README, "Send at"). Holding every such grant at the gateway until a
// common offset after its log time instead gives each the same delay, so
// the spacing at the provider is the ledger's whenever the delivery took
// less than the allowance. It is a function of the configuration and the
// log time only, so replay derives the same decisions.
func (l *Ledger) sendAt(r *res) int64 {
	if !l.cc.anyPace {
		return 0 // no spec paces (compiled.anyPace): the walk would find none
	}
	dl := l.st.Config.Learn.delivery()
	if dl == 0 {
		return 0
	}
	for _, ni := range r.Path[:r.NPath] {
		n := &l.st.Nodes[ni]
		for bi := n.First; bi < n.First+n.N; bi++ {
			sp := &l.cc.specs[l.st.Buckets[bi].Spec]
			if onePerWindow(sp) {
				return l.st.Now + dl
			}
		}
	}
	return 0
}

// onePerWindow reports whether sp is an enforced requests token bucket
// whose window holds at most one request at its current capacity, so
// that it admits one grant when full and paces the next.
func onePerWindow(sp *spec) bool {
	return !sp.shadow && sp.kind == kToken && sp.dim == dRequests && sp.capacity > 0 &&
		mulSat(sp.capacity, sp.window) <= sp.period
}
