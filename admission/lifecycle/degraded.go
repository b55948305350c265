package lifecycle

// Degraded mode (DESIGN.md §14; docs/gateway.md, "Degraded mode"): while
// no ledger answers, a gateway may admit a request locally, within its
// share of the capacity the ledger last reported, for a bounded time — as
// Envoy's global rate limit falls back to a local one. Every such admission
// is an emergency ReserveRequested flagged Degraded, which the ledger
// charges (into debt if need be) when it reads it.
//
// The share is what makes it safe: each gateway takes at most
// Share × (what the ledger last reported left, and its refill) ÷ N, where N
// is the number of gateways the ledger last saw alive in the partition
// (never less than one, this gateway counted). N gateways together take at
// most Share of what the provider's limit leaves, so with Share ≤ 0.5 even
// a gateway the snapshot did not count (it joined after it) keeps the sum
// within the capacity. MaxMs bounds how long: past it, the gateway fails
// closed (503 ledger_unavailable) until a ledger answers again.
//
// Degraded is the budget, pure like the rest of the package (time is a
// parameter); the shell owns one per gateway and guards it with a mutex.

// DegradedConfig bounds the degraded mode. The zero value admits nothing.
type DegradedConfig struct {
	// Share of the last known capacity all gateways together may use
	// (0 < Share ≤ 1; the default 0.5).
	Share float64
	// MaxMs is the longest a scope's episode of ledger silence is admitted
	// locally, from the first request the ledger left unanswered.
	MaxMs int64
}

// DegradedBucket is one bucket of a request's path as the ledger last
// reported it (a partition snapshot), with what the request needs of it.
type DegradedBucket struct {
	// Key names the bucket across requests (scope, level:id, dimension).
	Key string
	// Concurrency: Capacity is a number of in-flight slots, given back by
	// DegradedDone; otherwise the bucket refills Capacity units per
	// PeriodMs and holds at most BurstUnits.
	Concurrency bool
	Capacity    int64
	PeriodMs    int64
	BurstUnits  int64
	// Remaining is what the bucket could grant at the observation,
	// projected by refill to now (negative: debt).
	Remaining int64
	// Need is what the request takes (0: the bucket is not charged).
	Need int64
}

// DegradedVerdict is the outcome of Degraded.Admit.
type DegradedVerdict uint8

// Verdicts.
const (
	// DegradedAdmitted: within the share; the request goes ahead.
	DegradedAdmitted DegradedVerdict = iota + 1
	// DegradedExpired: the scope has been silent longer than MaxMs.
	DegradedExpired
	// DegradedUnknown: no ledger observation of the scope (no capacity is
	// known, so none is assumed).
	DegradedUnknown
	// DegradedOverShare: a bucket's local share cannot cover the request.
	DegradedOverShare
)

// String is the verdict's metric label.
func (v DegradedVerdict) String() string {
	switch v {
	case DegradedAdmitted:
		return "admitted"
	case DegradedExpired:
		return "expired"
	case DegradedUnknown:
		return "unknown_capacity"
	case DegradedOverShare:
		return "over_share"
	}
	return "none"
}

// Degraded is one gateway's local budget per scope while no ledger answers.
// The zero value is not usable; create it with NewDegraded.
type Degraded struct {
	cfg    DegradedConfig
	scopes map[string]*episode
	// inFlight counts the degraded admissions holding a concurrency slot,
	// by bucket key: it outlives an episode, as the requests do.
	inFlight map[string]int64
}

// episode is one scope's stretch of ledger silence.
type episode struct {
	sinceMs int64
	buckets map[string]*localBucket
}

// localBucket is this gateway's share of one bucket: a token bucket in
// units (fractions kept) that refills at share ÷ N of the bucket's rate.
type localBucket struct {
	level, max, perMs float64
	atMs              int64
	slots             int64 // concurrency: the share of the slots
}

// NewDegraded returns an empty budget under cfg.
func NewDegraded(cfg DegradedConfig) *Degraded {
	return &Degraded{cfg: cfg, scopes: map[string]*episode{}, inFlight: map[string]int64{}}
}

// Active reports whether any scope is in an episode (the shell skips its
// lock on every ledger answer otherwise).
func (d *Degraded) Active() bool { return len(d.scopes) > 0 }

// Answered ends scope's episode: a ledger answered, so the next silence
// starts a new one from what the ledger reports then.
func (d *Degraded) Answered(scope string) { delete(d.scopes, scope) }

// Admit decides, at nowMs, whether a request the ledger left unanswered in
// scope is admitted locally: gateways is how many gateways the ledger last
// saw alive there, bs the buckets of its path (known says whether the
// ledger reported the scope at all). An admitted request takes its Need of
// every bucket, or of none.
func (d *Degraded) Admit(nowMs int64, scope string, known bool, gateways int, bs []DegradedBucket) DegradedVerdict {
	ep := d.scopes[scope]
	if ep == nil {
		ep = &episode{sinceMs: nowMs, buckets: map[string]*localBucket{}}
		d.scopes[scope] = ep
	}
	if nowMs-ep.sinceMs >= d.cfg.MaxMs {
		return DegradedExpired
	}
	if !known {
		return DegradedUnknown
	}
	part := d.cfg.Share / float64(max(1, gateways))
	for i := range bs {
		b := &bs[i]
		if b.Need <= 0 {
			continue
		}
		lb := ep.bucket(nowMs, b, part)
		if b.Concurrency {
			if d.inFlight[b.Key]+1 > lb.slots {
				return DegradedOverShare
			}
			continue
		}
		lb.refill(nowMs)
		if lb.level < float64(b.Need) {
			return DegradedOverShare
		}
	}
	for i := range bs {
		b := &bs[i]
		if b.Need <= 0 {
			continue
		}
		if b.Concurrency {
			d.inFlight[b.Key]++
			continue
		}
		ep.buckets[b.Key].level -= float64(b.Need)
	}
	return DegradedAdmitted
}

// Done gives back the concurrency slots of an admitted request's buckets
// once it has ended.
func (d *Degraded) Done(bs []DegradedBucket) {
	for i := range bs {
		if b := &bs[i]; b.Concurrency && b.Need > 0 && d.inFlight[b.Key] > 0 {
			if d.inFlight[b.Key]--; d.inFlight[b.Key] == 0 {
				delete(d.inFlight, b.Key)
			}
		}
	}
}

// bucket is the episode's share of b, made from the ledger's observation
// the first time the episode meets it: part of what was left (never more
// than the burst), refilling at part of the bucket's rate.
func (ep *episode) bucket(nowMs int64, b *DegradedBucket, part float64) *localBucket {
	if lb := ep.buckets[b.Key]; lb != nil {
		return lb
	}
	lb := &localBucket{atMs: nowMs}
	if b.Concurrency {
		lb.slots = int64(part * float64(b.Capacity))
	} else {
		lb.max = part * float64(b.BurstUnits)
		lb.level = part * float64(max(0, min(b.Remaining, b.BurstUnits)))
		if b.PeriodMs > 0 {
			lb.perMs = part * float64(b.Capacity) / float64(b.PeriodMs)
		}
	}
	ep.buckets[b.Key] = lb
	return lb
}

func (lb *localBucket) refill(nowMs int64) {
	if nowMs > lb.atMs {
		lb.level = min(lb.max, lb.level+float64(nowMs-lb.atMs)*lb.perMs)
		lb.atMs = nowMs
	}
}
