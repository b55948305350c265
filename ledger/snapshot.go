package ledger

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/schemas"
)

// ErrConfigRollback is why a signed ConfigChanged older than the change in
// force is refused (its ConfigError contains this text). Each signed change
// carries the admin writer's increasing sequence (schemas.ConfigChanged.Seq,
// covered by the signature), so whoever can append to sluice.requests — any
// gateway — could otherwise re-append an old, validly signed change and put
// a config back in force that an operator replaced. Going back is a new
// change: publish the old document again (`sluice config apply`), which
// signs it with a new sequence.
var ErrConfigRollback = errors.New("signed change is older than the config in force (a re-appended old change cannot roll the config back)")

// configChanged installs a new configuration at this log position. A
// configuration that does not parse or validate is refused, and so is a
// signed one older than the change in force (ErrConfigRollback): the running
// one stays in force and ConfigError says why.
func (l *Ledger) configChanged(cc *schemas.ConfigChanged) {
	if cc.Seq != 0 && cc.Seq < l.st.ConfigSeq {
		l.st.ConfigErr = fmt.Sprintf("config %s: %v: sequence %d, in force %d", cc.ConfigVersion, ErrConfigRollback, cc.Seq, l.st.ConfigSeq)
		return
	}
	cfg, err := ParseConfig(cc.Ledger)
	if err != nil {
		msg := err.Error()
		if cc.ConfigVersion != "" {
			msg = "config " + cc.ConfigVersion + ": " + msg
		}
		l.st.ConfigErr = msg
		return
	}
	l.st.ConfigErr = ""
	l.st.ConfigSeq = max(l.st.ConfigSeq, cc.Seq)
	old, _ := json.Marshal(&l.st.Config)
	neu, _ := json.Marshal(&cfg)
	if bytes.Equal(old, neu) {
		return // redelivery or no-op: keep generations as they are
	}
	l.install(cfg)
}

// install replaces the configuration without losing held reservations:
// every node's buckets are re-stamped from the new config; a bucket whose
// dimension survives keeps its level (converted to the new unit scale and
// clamped to the new burst) and its generation; new buckets start full.
func (l *Ledger) install(cfg Config) {
	now := l.st.Now
	oldSpecs := l.cc.specs
	oldBuckets, oldRolls, oldRamps := l.st.Buckets, l.st.Rolls, l.st.Ramps
	l.st.Config = cfg
	l.st.Gen++
	l.cc = compile(&l.st.Config)
	l.paths = nil // levels with and without buckets may have changed
	l.st.Buckets, l.st.Rolls, l.st.Ramps = nil, nil, nil
	oldShadow := l.st.Shadow
	l.st.Shadow = nil
	for ni := range l.st.Nodes {
		n := &l.st.Nodes[ni]
		var specs []int32
		if ci, ok := l.cc.scopeFor(l.st.Scopes[n.Scope].Name); ok {
			specs = l.cc.scopes[ci].specsFor(n.Lvl, n.ID)
		}
		old := oldBuckets[n.First : n.First+n.N]
		n.First = int32(len(l.st.Buckets))
		l.st.Buckets = l.restamp(l.st.Buckets, specs, false, n.Scope, old, oldSpecs, oldRolls, oldRamps)
		n.N = int32(len(l.st.Buckets)) - n.First
		oldSh := oldShadow[n.SFirst : n.SFirst+n.SN]
		first := int32(len(l.st.Shadow))
		l.st.Shadow = l.restamp(l.st.Shadow, specs, true, n.Scope, oldSh, oldSpecs, oldRolls, oldRamps)
		n.SFirst, n.SN = first, int32(len(l.st.Shadow))-first
		if n.SN == 0 {
			n.SFirst = 0 // keeps snapshots without shadow buckets as they were
		}
	}
	l.rebaseLearned()
	l.syncHolders()
	// Classes may have been renamed, added or removed.
	for si := range l.st.Scopes {
		sc := &l.st.Scopes[si]
		sc.Depth = make([]int32, len(cfg.Classes))
		sc.RetryMilli = min(sc.RetryMilli, cfg.Retry.BurstMax*1000)
	}
	for ri := range l.st.Res {
		r := &l.st.Res[ri]
		if r.State == stFree {
			continue
		}
		ci, ok := l.cc.classIdx[r.Class]
		if !ok {
			ci = l.cc.defClass
		}
		r.ClassIdx = ci
		if r.State == stQueued {
			l.st.Scopes[r.Scope].Depth[ci]++
			l.st.Scopes[r.Scope].Dirty = true
		}
	}
	// Held amounts follow the new specs (e.g. exclude_cached_input changed).
	for bi := range l.st.Buckets {
		l.st.Buckets[bi].Held = 0
	}
	for bi := range l.st.Shadow {
		l.st.Shadow[bi].Held = 0
	}
	for ri := range l.st.Res {
		r := &l.st.Res[ri]
		if r.State != stGranted {
			continue
		}
		for i := 0; i < int(r.NPath); i++ {
			n := &l.st.Nodes[r.Path[i]]
			for bi := n.First; bi < n.First+n.N; bi++ {
				b := &l.st.Buckets[bi]
				if b.Gen <= r.Gen {
					b.Held += l.cc.specs[b.Spec].amount(r)
				}
			}
			if r.Flags&fShadowHeld == 0 {
				continue
			}
			for bi := n.SFirst; bi < n.SFirst+n.SN; bi++ {
				b := &l.st.Shadow[bi]
				if b.Gen <= r.Gen {
					b.Held += l.cc.specs[b.Spec].amount(r)
				}
			}
		}
	}
	_ = now
}

// restamp appends to dst a bucket for every spec of specs whose shadow
// flag is shadow, each keeping the state of the old bucket of the same
// dimension and kind (converted to the new unit scale and clamped to the new
// burst) and its generation; new buckets start full.
func (l *Ledger) restamp(dst []bucket, specs []int32, shadow bool, scope int32, old []bucket, oldSpecs []spec, oldRolls []rollState, oldRamps []rampState) []bucket {
	for _, s := range specs {
		sp := &l.cc.specs[s]
		if sp.shadow != shadow {
			continue
		}
		nb := l.newBucket(s, scope)
		for obi := range old {
			ob := &old[obi]
			osp := &oldSpecs[ob.Spec]
			if osp.dim != sp.dim || osp.kind != sp.kind {
				continue
			}
			nb.Gen = ob.Gen
			nb.Held = ob.Held
			switch sp.kind {
			case kToken:
				nb.Level = min(sp.burst, mulSat(floorDiv(ob.Level, osp.period), sp.period))
				nb.Base = min(sp.gBurst, mulSat(floorDiv(ob.Base, osp.period), sp.period))
				nb.LastMs = ob.LastMs
			case kRamp:
				rs := oldRamps[ob.Ext]
				rs.Rate = min(rs.Rate, sp.capacity)
				l.st.Ramps[nb.Ext] = rs
				nb.Level = min(rampBurst(rs.Rate, sp.window), mulSat(floorDiv(ob.Level, osp.period), sp.period))
				nb.LastMs = ob.LastMs
			case kFixed:
				nb.Level = min(sp.capacity, ob.Level)
			case kConcurrency:
				nb.Level = sp.capacity - (osp.capacity - ob.Level)
			case kRolling:
				ors := &oldRolls[ob.Ext]
				nrs := &l.st.Rolls[nb.Ext]
				if len(ors.Ring) == len(nrs.Ring) && osp.slotMs == sp.slotMs {
					nrs.Cur, nrs.Sum = ors.Cur, ors.Sum
					copy(nrs.Ring, ors.Ring)
				} else {
					nrs.Sum = ors.Sum
					nrs.Ring[nrs.Cur%int64(len(nrs.Ring))] = ors.Sum
				}
			}
			break
		}
		dst = append(dst, nb)
	}
	return dst
}

// snapshotMagic prefixes snapshot bytes so that foreign bytes are refused.
const snapshotMagic = "sluice-ledger-v1\n"

// MarshalSnapshot serializes the whole state, including the next input
// offset. The bytes are deterministic: the same state gives the same bytes.
// It is Freeze then Marshal.
func (l *Ledger) MarshalSnapshot() ([]byte, error) { return l.Freeze().Marshal() }

// Frozen is a copy of a ledger's state at one log position. Freeze takes
// it in a few slice copies; Marshal, the JSON encoding that costs tens of
// milliseconds on a ledger holding thousands of reservations, can then run
// elsewhere while the ledger goes on applying (services/ledgerd encodes
// snapshots off its decision loop). The ledger never writes into a Frozen.
type Frozen struct{ st state }

// Freeze copies the state: every slice the ledger may later write into is
// cloned (Config and strings are only ever replaced, never written into).
func (l *Ledger) Freeze() *Frozen {
	st := l.st
	st.Nodes = slices.Clone(l.st.Nodes)
	st.Buckets = slices.Clone(l.st.Buckets)
	st.Shadow = slices.Clone(l.st.Shadow)
	st.Rolls = slices.Clone(l.st.Rolls)
	for i := range st.Rolls {
		st.Rolls[i].Ring = slices.Clone(st.Rolls[i].Ring)
	}
	st.Ramps = slices.Clone(l.st.Ramps)
	st.Res = slices.Clone(l.st.Res)
	for i := range st.Res {
		if st.Res[i].Bud != nil {
			st.Res[i].Bud = slices.Clone(st.Res[i].Bud) // Apply writes their windows
		}
	}
	st.Free = slices.Clone(l.st.Free)
	st.Lists = slices.Clone(l.st.Lists)
	st.Done = slices.Clone(l.st.Done)
	st.Live = slices.Clone(l.st.Live)
	st.Services = slices.Clone(l.st.Services)
	st.Learned = slices.Clone(l.st.Learned)
	st.BudgetHolders = l.freezeHolders()
	st.BudgetPartition = l.freezeBudgetPartition()
	st.Scopes = slices.Clone(l.st.Scopes)
	nowUs := l.st.Now * 1000
	for i := range st.Scopes {
		sc := &st.Scopes[i]
		sc.Queue = slices.Clone(sc.Queue)
		sc.Depth = slices.Clone(sc.Depth)
		sc.Flows = nil
		for k, v := range sc.flows {
			if v > nowUs {
				sc.Flows = append(sc.Flows, flowEntry{Class: k.class, Tenant: k.tenant, LastUs: v})
			}
		}
		sc.flows = nil
		slices.SortFunc(sc.Flows, func(a, b flowEntry) int {
			if a.Class != b.Class {
				return int(a.Class - b.Class)
			}
			return strings.Compare(a.Tenant, b.Tenant)
		})
	}
	return &Frozen{st: st}
}

// NextOffset is the input offset the frozen state would apply next.
func (f *Frozen) NextOffset() int64 { return f.st.Next }

// Marshal encodes the frozen state as MarshalSnapshot would have at the
// moment of Freeze.
func (f *Frozen) Marshal() ([]byte, error) {
	b, err := json.Marshal(&f.st)
	if err != nil {
		return nil, fmt.Errorf("ledger snapshot: %w", err)
	}
	return append([]byte(snapshotMagic), b...), nil
}

// gzipMagic begins a gzip stream (RFC 1952): the ledger service writes a
// snapshot's MarshalSnapshot bytes gzipped (about 18 times smaller on a
// busy partition, docs/ledger-service.md, The snapshot's format) unless
// told to write them plain. Plain bytes begin with snapshotMagic, so the
// two cannot be confused.
var gzipMagic = []byte{0x1f, 0x8b}

// maxSnapshotState bounds what a gzipped snapshot may inflate to, so that
// a crafted record of a few kilobytes cannot make every reader of
// sluice.snapshots allocate gigabytes. A plain state was bounded by its
// record (bus.SnapshotMaxBytes, 64 MiB); gzipped, one that big inflates
// to about 1 GiB at the ratio a ledger's JSON has. A variable for the
// tests.
var maxSnapshotState int64 = 1 << 30

// inflateSnapshot returns the bytes a gzipped snapshot holds.
func inflateSnapshot(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("ledger snapshot: gzip: %w", err)
	}
	out := bytes.NewBuffer(make([]byte, 0, min(int64(len(b))*20, maxSnapshotState)+1))
	n, err := out.ReadFrom(io.LimitReader(zr, maxSnapshotState+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("ledger snapshot: gzip: %w", err)
	case n > maxSnapshotState:
		return nil, fmt.Errorf("ledger snapshot: gzip: inflates past %d bytes", maxSnapshotState)
	}
	return out.Bytes(), nil
}

// Restore rebuilds a ledger from MarshalSnapshot bytes, plain or gzipped
// (gzipMagic: what the ledger service writes unless --snapshot-plain, so
// that a ledger takes over from the snapshots of an older one, which
// wrote them plain, and from a newer one's). It checks the state's
// internal references so that corrupt bytes give an error, not a ledger
// that panics later.
func Restore(b []byte) (*Ledger, error) {
	if bytes.HasPrefix(b, gzipMagic) {
		var err error
		if b, err = inflateSnapshot(b); err != nil {
			return nil, err
		}
	}
	if !bytes.HasPrefix(b, []byte(snapshotMagic)) {
		return nil, errors.New("ledger snapshot: bad magic")
	}
	l := &Ledger{lastScope: noIdx}
	if err := json.Unmarshal(b[len(snapshotMagic):], &l.st); err != nil {
		return nil, fmt.Errorf("ledger snapshot: %w", err)
	}
	l.st.Config.fillDefaults()
	// A partition with no scopes is one New left unconfigured (no document
	// yet, or a refused one): it takes inputs (heartbeats, probes) and is
	// snapshotted like any other, so its snapshot must restore. Refusing it
	// wedged the partition's next owner for good (catch-up retried the same
	// snapshot forever: TestStackKillLedgerRealBroker).
	if len(l.st.Config.Scopes) > 0 {
		if err := l.st.Config.Validate(); err != nil {
			return nil, fmt.Errorf("ledger snapshot: config: %w", err)
		}
	}
	l.cc = compile(&l.st.Config)
	if !l.relearn() {
		return nil, errors.New("ledger snapshot: learned capacity out of range")
	}
	if err := l.verify(); err != nil {
		return nil, fmt.Errorf("ledger snapshot: %w", err)
	}
	l.nodeIdx = make(map[nodeKey]int32, len(l.st.Nodes))
	for i, n := range l.st.Nodes {
		l.nodeIdx[nodeKey{n.Scope, n.Lvl, n.ID}] = int32(i)
	}
	l.resIdx = resIndex{}
	for i := range l.st.Scopes {
		l.st.Scopes[i].Flight = 0 // counted below (a snapshot before slow start has none)
	}
	for i := range l.st.Res {
		if r := &l.st.Res[i]; r.State == stGranted {
			l.st.Scopes[r.Scope].Flight++
		}
	}
	for i := range l.st.Res {
		if r := &l.st.Res[i]; r.State != stFree {
			if _, dup := l.resFind(r.RequestID, r.Attempt); dup {
				return nil, fmt.Errorf("ledger snapshot: reservation %s/%d appears twice", r.RequestID, r.Attempt)
			}
			l.resIdx.put(resHash(r.RequestID, r.Attempt), int32(i))
		}
	}
	l.liveIdx = make(map[string]int32, len(l.st.Live))
	for i, n := range l.st.Live {
		if _, dup := l.liveIdx[n.Node]; dup || n.Node == "" {
			return nil, fmt.Errorf("ledger snapshot: live node %q empty or listed twice", n.Node)
		}
		l.liveIdx[n.Node] = int32(i)
	}
	l.scopeIdx = make(map[string]int32, len(l.st.Scopes))
	for i := range l.st.Scopes {
		sc := &l.st.Scopes[i]
		l.scopeIdx[sc.Name] = int32(i)
		sc.flows = make(map[flowKey]int64, len(sc.Flows))
		for _, f := range sc.Flows {
			sc.flows[flowKey{f.Class, f.Tenant}] = f.LastUs
		}
		sc.Flows = nil
	}
	if err := l.restoreHolders(l.st.BudgetHolders, l.st.BudgetPartition); err != nil {
		return nil, fmt.Errorf("ledger snapshot: %w", err)
	}
	l.st.BudgetHolders, l.st.BudgetPartition = nil, nil
	return l, nil
}

// verify checks every index stored in the state.
func (l *Ledger) verify() error {
	st := &l.st
	nb, nn, nr := int32(len(st.Buckets)), int32(len(st.Nodes)), int32(len(st.Res))
	ns := int32(len(st.Scopes))
	for i, n := range st.Nodes {
		if n.Scope < 0 || n.Scope >= ns || n.First < 0 || n.N < 0 || n.First+n.N > nb || int(n.Lvl) >= numLevels ||
			n.SFirst < 0 || n.SN < 0 || n.SFirst+n.SN > int32(len(st.Shadow)) {
			return fmt.Errorf("node %d out of range", i)
		}
	}
	for i, b := range st.Buckets {
		if err := l.verifyBucket(&b, false); err != nil {
			return fmt.Errorf("bucket %d %w", i, err)
		}
	}
	for i, b := range st.Shadow {
		if err := l.verifyBucket(&b, true); err != nil {
			return fmt.Errorf("shadow bucket %d %w", i, err)
		}
	}
	if len(st.Services) > serviceRoutesMax {
		return fmt.Errorf("%d learned routes, above %d", len(st.Services), serviceRoutesMax)
	}
	seen := make(map[serviceKey]bool, len(st.Services))
	for i, s := range st.Services {
		k := serviceKey{s.Scope, s.Route, s.Stream}
		if s.Scope < 0 || s.Scope >= ns || seen[k] {
			return fmt.Errorf("learned route %d out of range or listed twice", i)
		}
		seen[k] = true
	}
	nc := int32(len(st.Config.Classes))
	for i := range st.Res {
		r := &st.Res[i]
		if r.State == stFree {
			continue
		}
		if r.Scope < 0 || r.Scope >= ns || r.ClassIdx < 0 || r.ClassIdx >= nc || int(r.NPath) > maxPath {
			return fmt.Errorf("reservation %d out of range", i)
		}
		for _, p := range r.Path[:r.NPath] {
			if p < 0 || p >= nn {
				return fmt.Errorf("reservation %d path out of range", i)
			}
		}
		if r.List < -1 || r.List >= int32(len(st.Lists)) || r.Prev < -1 || r.Prev >= nr || r.Next < -1 || r.Next >= nr {
			return fmt.Errorf("reservation %d links out of range", i)
		}
	}
	idx := func(v int32) bool { return v >= 0 && v < nr }
	for _, f := range st.Free {
		if !idx(f) {
			return errors.New("free list out of range")
		}
	}
	for _, d := range st.Done {
		if !idx(d) {
			return errors.New("done list out of range")
		}
	}
	for _, hl := range st.Lists {
		if (hl.Head != noIdx && !idx(hl.Head)) || (hl.Tail != noIdx && !idx(hl.Tail)) {
			return errors.New("hold list out of range")
		}
	}
	for _, sc := range st.Scopes {
		if len(sc.Depth) != int(nc) || sc.WakeMs < 0 {
			return errors.New("scope depth out of range")
		}
		for _, q := range sc.Queue {
			if !idx(q) {
				return errors.New("queue out of range")
			}
		}
	}
	return nil
}

// verifyBucket checks that a bucket is in the right list (shadow or
// enforced) and its references into the specs and the rolling
// and ramp states.
func (l *Ledger) verifyBucket(b *bucket, shadow bool) error {
	st := &l.st
	if b.Spec < 0 || int(b.Spec) >= len(l.cc.specs) {
		return errors.New("spec out of range")
	}
	sp := &l.cc.specs[b.Spec]
	if sp.shadow != shadow {
		// An enforced spec among the shadow buckets would never be enforced,
		// a shadow one among the enforced would be.
		return errors.New("shadow flag does not match its spec")
	}
	switch sp.kind {
	case kRolling:
		if b.Ext < 0 || int(b.Ext) >= len(st.Rolls) || int64(len(st.Rolls[b.Ext].Ring)) != sp.slots+1 || st.Rolls[b.Ext].Cur < 0 {
			return errors.New("rolling state out of range")
		}
	case kRamp:
		ns := int32(len(st.Scopes))
		if b.Ext < 0 || int(b.Ext) >= len(st.Ramps) || st.Ramps[b.Ext].Rate <= 0 || st.Ramps[b.Ext].Rate > sp.capacity ||
			st.Ramps[b.Ext].GrowMs < 0 || st.Ramps[b.Ext].GrowMs >= sp.period || st.Ramps[b.Ext].Scope < 0 || st.Ramps[b.Ext].Scope >= ns {
			return errors.New("ramp state out of range")
		}
	}
	return nil
}
