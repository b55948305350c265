package ledger

// QueueStat describes the queue of one traffic class across all scopes of a
// partition, for the service's metrics.
type QueueStat struct {
	Class string
	Depth int
	// OldestWaitMs is how long the oldest queued request of the class has
	// waited, in log time (0 when the queue is empty).
	OldestWaitMs int64
}

// Queues appends one QueueStat per configured class to dst, in class order.
// It only reads state: calling it changes no decision.
func (l *Ledger) Queues(dst []QueueStat) []QueueStat {
	base := len(dst)
	for _, c := range l.st.Config.Classes {
		dst = append(dst, QueueStat{Class: c.Name})
	}
	for si := range l.st.Scopes {
		for _, ri := range l.st.Scopes[si].Queue {
			r := &l.st.Res[ri]
			i := base + int(r.ClassIdx)
			if r.ClassIdx < 0 || i >= len(dst) {
				continue
			}
			dst[i].Depth++
			if w := l.st.Now - r.EnqMs; w > dst[i].OldestWaitMs {
				dst[i].OldestWaitMs = w
			}
		}
	}
	return dst
}
