// Package ledger is Sluice's quota model: a pure, deterministic state
// machine that turns the events of one partition of sluice.requests into
// decisions (granted, queued, denied, expired, cancelled, conflict).
//
// The ledger reads no clock, draws no randomness, starts no goroutine and
// does no I/O: its only clock is the log append time of the records it is
// given, and every choice it makes is a function of its state and the input.
// Replaying the same records therefore reproduces the same decisions byte for
// byte, and a snapshot restored at any offset continues exactly like an
// uninterrupted run. See README.md for the model, units and invariants.
package ledger

import (
	"github.com/sluice-dev/sluice/schemas"
)

// Ledger is the state of one partition. It is not safe for concurrent use:
// one goroutine owns a partition (single writer).
type Ledger struct {
	st       state
	cc       *compiled
	nodeIdx  map[nodeKey]int32
	resIdx   resIndex
	scopeIdx map[string]int32
	liveIdx  map[string]int32     // node → index in st.Live
	svcIdx   map[serviceKey]int32 // (scope, route) → index in st.Services; nil: rebuild
	paths    *pathCache           // resolved request paths; reset with the config
	// lastScope is the scope index scopeOf returned last (a one-entry
	// cache in front of scopeIdx), or -1.
	lastScope int32
	// doneBuf is the whole backing array of st.Done (see pushDone).
	doneBuf []int32
	epoch   uint32

	// Per-Apply context.
	offset int64
	start  int
	// prevNow is the clock before this Apply's record: a waiter whose
	// expiry falls after it was due inside this record's step of log time
	// (see visit, lateExpiry).
	prevNow int64
	// learnedOut holds the CapacityLearned records of the last Apply.
	learnedOut []LearnedOutput
	// bud holds the scopes' leases of cross-scope budgets (budgets.go).
	bud budgetSide
}

const (
	maxAmount        = int64(1) << 40 // largest accepted token/spend amount of one request
	maxPathLen       = 32
	maxStrLen        = 512
	noIdx      int32 = -1
)

// New returns an empty ledger for a partition. An invalid cfg is recorded
// (see ConfigError) and replaced by a configuration without scopes, under
// which every request is denied as unknown_scope.
func New(partition int32, cfg Config) *Ledger {
	l := &Ledger{lastScope: noIdx}
	l.st.Partition = partition
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		l.st.ConfigErr = err.Error()
		cfg = Config{}
		cfg.fillDefaults()
	}
	l.st.Config = cfg
	l.cc = compile(&l.st.Config)
	l.nodeIdx = map[nodeKey]int32{}
	l.scopeIdx = map[string]int32{}
	return l
}

// Offset returns the next input offset the ledger expects (last applied +
// 1). Records below it are ignored by Apply.
func (l *Ledger) Offset() int64 { return l.st.Next }

// NowMs returns the ledger's clock: the greatest log time applied so far.
func (l *Ledger) NowMs() int64 { return l.st.Now }

// Deadline returns the absolute deadline (log time, 0 = none) and the
// expected service time a held or queued attempt carries, as the ledger
// decided with them, so that an auditor outside the package (the
// pipeline simulation) can check a grant against its deadline without
// deriving either again. ok is false when the ledger holds no such
// attempt.
func (l *Ledger) Deadline(requestID string, attempt int32) (deadlineMs, serviceMs int64, ok bool) {
	ri, ok := l.resFind(requestID, max(1, attempt))
	if !ok {
		return 0, 0, false
	}
	r := &l.st.Res[ri]
	return r.Deadline, r.SvcMs, true
}

// Stats returns the lifecycle counters.
func (l *Ledger) Stats() Stats { return l.st.Stats }

// ConfigError returns why the last configuration offered (to New or in a
// ConfigChanged event) was refused, or "" if it was installed. A refused
// configuration leaves the running one in force.
func (l *Ledger) ConfigError() string { return l.st.ConfigErr }

// Config returns the configuration in force.
func (l *Ledger) Config() Config { return l.st.Config }

// Apply applies one input record of the partition and appends the decisions
// it produces to out. logTimeMs is the record's log append time; a time
// earlier than the last seen one is treated as the last seen one. offset is
// the record's Kafka offset; records below Offset() were applied already and
// are ignored. Apply never panics: bad or unknown events change nothing
// (and, when they carry a request id, get a decision saying why).
func (l *Ledger) Apply(logTimeMs, offset int64, ev *schemas.Event, out []Output) []Output {
	if offset < l.st.Next || offset < 0 {
		return out
	}
	l.st.Next = offset + 1
	prevMs := l.st.Now
	l.prevNow = prevMs
	if logTimeMs > l.st.Now {
		l.st.Now = logTimeMs
	}
	l.offset = offset
	l.start = len(out)
	l.learnedOut = l.learnedOut[:0]
	l.bud.out = l.bud.out[:0]

	if len(l.st.Live) > 0 {
		// Liveness is tracked only once a node has heartbeated; the test
		// keeps both calls off the path of a ledger that tracks none.
		l.liveStall(prevMs)
		out = l.expireHolds(out)
		out = l.expireLostNodes(out)
	} else {
		out = l.expireHolds(out)
	}
	l.evictDone()
	if l.bud.holders != nil || l.bud.bp != nil {
		l.budgetTick()
	}
	if ev != nil {
		switch ev.Type {
		case schemas.TypeReserveRequested:
			if ev.ReserveRequested != nil {
				out = l.reserve(ev, out)
			} else {
				out = l.refuseEv(ev, out, schemas.ReasonMalformedEvent, schemas.RetryRequestError)
			}
		case schemas.TypeReconciled:
			if ev.Reconciled != nil {
				out = l.reconcile(ev, out)
			}
		case schemas.TypeReleased:
			if ev.Released != nil {
				out = l.release(ev, out)
			}
		case schemas.TypeProviderRejected:
			if ev.ProviderRejected != nil {
				out = l.providerRejected(ev, out)
			}
		case schemas.TypeProviderObserved:
			if ev.ProviderObserved != nil {
				l.providerObserved(ev)
			}
		case schemas.TypeRetryRequested:
			if ev.RetryRequested != nil {
				out = l.retry(ev, out)
			} else {
				out = l.refuseEv(ev, out, schemas.ReasonMalformedEvent, schemas.RetryRequestError)
			}
		case schemas.TypeConfigChanged:
			if ev.ConfigChanged != nil {
				l.configChanged(ev.ConfigChanged)
			}
		case schemas.TypeHeartbeat:
			if ev.Heartbeat != nil {
				l.heartbeat(ev)
			}
		case schemas.TypeLeaseGranted:
			if ev.LeaseGranted != nil {
				l.leaseGranted(ev.LeaseGranted)
			}
		case schemas.TypeLeaseRequested, schemas.TypeLeaseReturned:
			l.budgetPartitionApply(ev)
		}
	}
	out = l.pumpAll(out)
	if l.bud.holders != nil {
		l.budgetWants()
	}
	l.checkStep(ev)
	return out
}

// NextWakeMs reports the earliest log time at which a Tick could change
// something: a queued request's deadline or retry backoff, a refill that may
// grant a queued request, a cooldown end, a hold's TTL, a node's liveness
// deadline (and, while nodes are tracked, a liveness tick; see
// liveness.go). ok is false when nothing is pending.
func (l *Ledger) NextWakeMs() (ms int64, ok bool) {
	ms, ok = l.liveWakeMs()
	if w, bok := l.budgetWakeMs(); bok && (!ok || w < ms) {
		ms, ok = w, true
	}
	for i := range l.st.Scopes {
		sc := &l.st.Scopes[i]
		if len(sc.Queue) == 0 {
			continue
		}
		w := sc.WakeMs
		if sc.Dirty || w <= 0 {
			w = l.st.Now
		}
		if !ok || w < ms {
			ms, ok = w, true
		}
	}
	for i := range l.st.Lists {
		h := l.st.Lists[i].Head
		if h == noIdx {
			continue
		}
		w := l.st.Res[h].HoldExpMs
		if !ok || w < ms {
			ms, ok = w, true
		}
	}
	return ms, ok
}

// ---- decisions ----

func (l *Ledger) emit(out []Output, r *res, d schemas.Decision) []Output {
	out, o := l.emitTo(out, r)
	p, off, now := o.InputPartition, o.InputOffset, o.LogTimeMs
	*o = d
	o.InputPartition, o.InputOffset, o.LogTimeMs = p, off, now
	return out
}

// emitTo appends r's Output with its decision stamped (input partition,
// offset, log time) and otherwise zero, for the caller to fill in place:
// the grant of the hot path (emitGrant) writes its few fields there
// instead of building a Decision and copying its 176 bytes into emit.
func (l *Ledger) emitTo(out []Output, r *res) ([]Output, *schemas.Decision) {
	// Written in place: building the Output and appending it copied its
	// 300 bytes once more on every decision.
	n := len(out)
	out = append(out, Output{})
	o := &out[n]
	o.RequestID, o.Attempt, o.Node, o.Scope = r.RequestID, r.Attempt, r.Node, l.st.Scopes[r.Scope].Name
	o.Tenant, o.KeyID, o.Route, o.Class = r.Tenant, r.KeyID, r.Route, r.Class
	o.Decision.InputPartition = l.st.Partition
	o.Decision.InputOffset = l.offset
	o.Decision.LogTimeMs = l.st.Now
	o.Index = int32(n - l.start)
	return out, &o.Decision
}

// refuseEv answers an event that created no reservation.
func (l *Ledger) refuseEv(ev *schemas.Event, out []Output, reason schemas.Reason, retryClass schemas.RetryClass) []Output {
	if ev.RequestID == "" {
		return out
	}
	gd := schemas.GDRejectedLocally
	if retryClass == schemas.RetryPolicy {
		gd = schemas.GDRejectedPolicy
	}
	att := ev.Attempt
	if att <= 0 {
		att = 1
	}
	if ev.Type == schemas.TypeRetryRequested && ev.RetryRequested != nil && ev.Attempt <= 0 {
		att = ev.RetryRequested.PreviousAttempt + 1
	}
	return append(out, Output{
		RequestID: ev.RequestID, Attempt: att, Node: ev.Node, Scope: ev.Scope,
		Tenant: ev.Tenant, KeyID: ev.KeyID, Route: ev.Route, Class: ev.Class,
		Decision: schemas.Decision{
			Status: schemas.StatusDenied, Reason: reason, GatewayDecision: gd, RetryClass: retryClass,
			InputPartition: l.st.Partition, InputOffset: l.offset, LogTimeMs: l.st.Now,
		},
		Index: int32(len(out) - l.start),
	})
}

func (l *Ledger) conflict(ev *schemas.Event, att int32, out []Output) []Output {
	return append(out, Output{
		RequestID: ev.RequestID, Attempt: att, Node: ev.Node, Scope: ev.Scope,
		Tenant: ev.Tenant, KeyID: ev.KeyID, Route: ev.Route, Class: ev.Class,
		Decision: schemas.Decision{
			Status: schemas.StatusConflict, Reason: schemas.ReasonSameIDDifferentContent,
			GatewayDecision: schemas.GDRejectedLocally, RetryClass: schemas.RetryRequestError,
			InputPartition: l.st.Partition, InputOffset: l.offset, LogTimeMs: l.st.Now,
		},
		Index: int32(len(out) - l.start),
	})
}

// ---- fingerprints ----

// The fingerprint hash must be deterministic across processes (it is in
// snapshots), so it cannot use hash/maphash; this is a small 64-bit mixer
// that reads 8 bytes per round.

const (
	fnvOffset = 14695981039346656037
	mixMul    = 0x9e3779b97f4a7c15
)

func mix(h, v uint64) uint64 {
	h ^= v
	h *= mixMul
	return h ^ (h >> 29)
}

func fnvStr(h uint64, s string) uint64 {
	if len(s) < 8 {
		// Most ids and level names: one round, inlined.
		return mix(h, loadShort(s)^uint64(len(s))<<56)
	}
	return fnvStrLong(h, s)
}

func fnvStrLong(h uint64, s string) uint64 {
	n := len(s)
	i := 0
	for ; i+8 <= n; i += 8 {
		h = mix(h, load64(s, i))
	}
	var v uint64
	if rem := n - i; rem > 0 {
		// The last rem < 8 bytes, from the word that ends the string.
		v = load64(s, n-8) >> (8 * (8 - rem))
	}
	return mix(h, v^uint64(n)<<56)
}

// loadShort returns the bytes of s (len(s) < 8) little-endian, read with
// whole-word loads rather than byte by byte (the same value).
func loadShort(s string) uint64 {
	n := len(s)
	if n >= 4 {
		return load32(s, 0) | load32(s, n-4)<<(8*(n-4))
	}
	if n == 0 {
		return 0
	}
	return uint64(s[0]) | uint64(s[n/2])<<(8*(n/2)) | uint64(s[n-1])<<(8*(n-1))
}

// load64 and load32 read s[i:i+8] and s[i:i+4] little-endian (the compiler
// turns each into one load).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func load32(s string, i int) uint64 {
	s = s[i : i+4]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

func fnvInt(h uint64, v int64) uint64 { return mix(h, uint64(v)) }

func fnvBool(h uint64, b bool) uint64 {
	if b {
		return mix(h, 1)
	}
	return mix(h, 2)
}

// fingerprint hashes everything of a reserve that the ledger acts on, so
// that a redelivery (same hash) changes nothing and a different request
// under the same id and attempt is a conflict.
//
// It also returns pathHash, a hash of the request path alone (the key of
// the path cache, never stored): computed in the same loop as an
// independent chain, it costs next to nothing.
func fingerprint(ev *schemas.Event) (fp, pathHash uint64) {
	rr := ev.ReserveRequested
	h := uint64(fnvOffset)
	h = fnvStr(h, ev.Scope)
	h = fnvStr(h, ev.Tenant)
	h = fnvStr(h, ev.KeyID)
	h = fnvStr(h, ev.Route)
	h = fnvStr(h, ev.Class)
	ph := fnvInt(fnvOffset, int64(len(rr.Path)))
	for _, p := range rr.Path {
		h = fnvStr(h, p.Level)
		h = fnvStr(h, p.ID)
		ph = fnvStr(ph+uint64(len(p.Level)), p.ID) // level names: their length will do
	}
	h = fnvInt(h, int64(len(rr.Path)))
	h = fnvInt(h, rr.InputTokens)
	h = fnvInt(h, rr.CachedInputTokens)
	h = fnvInt(h, rr.OutputTokens)
	h = fnvInt(h, rr.SpendMicros)
	h = fnvBool(h, rr.Streaming)
	h = fnvInt(h, int64(rr.Priority))
	h = fnvInt(h, rr.MaxWaitMs)
	h = fnvInt(h, rr.DeadlineMs)
	h = fnvInt(h, int64(rr.MaxAttempts))
	h = fnvBool(h, rr.FallbackAllowed)
	h = fnvBool(h, rr.EmergencyAdmitted)
	if rr.MaxOutputTokens != 0 {
		// Mixed in only when set, so fingerprints of events from before
		// the field existed do not change.
		h = fnvInt(h, rr.MaxOutputTokens)
	}
	return h, ph
}

// jitter derives a number in [0, n] from a request id and attempt (splitmix
// over FNV): the ledger's only "randomness", a pure function of event data.
func jitter(id string, attempt int32, n int64) int64 {
	if n <= 0 {
		return 0
	}
	z := fnvInt(fnvStr(fnvOffset, id), int64(attempt))
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return int64(z % uint64(n+1))
}
