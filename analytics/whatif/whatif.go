// Package whatif answers "what would this ledger config have done to the
// demand we recorded?". It replays a partition's recorded inputs (the
// ledger's only input, so the demand exactly as it arrived) through the
// pure ledger under a new configuration, and tallies, side by side with the
// decisions that were recorded: grants, denials by reason, queue wait by
// class, each tenant's share and Jain's fairness index, and the predicted
// pressure on the provider.
//
// Provider pressure is measured with the ledger's shadow mode: the scope-
// and deployment-level buckets of the recorded configuration (the limits
// the provider is known to enforce) are added to the new configuration as
// shadow buckets, so every what-if grant records whether the provider's
// known limits would have covered it, without changing any what-if
// decision (the shadow property, ledger/shadow_test.go).
//
// The package does no I/O and reads no clock: services/ledgerd feeds it
// from Kafka, tests feed it from memory. A what-if is an approximation in
// one way, said here once: the inputs after each decision (reconciles,
// releases, retries) were produced by gateways that saw the recorded
// decisions. A request the what-if grants but the recorded run denied has
// no reconcile, so its estimate stays held until the hold TTL (pessimistic);
// a retry the recorded run asked for still arrives.
package whatif

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// Options configures a what-if run.
type Options struct {
	// Ledger is the new ledger configuration (JSON); it replaces the ledger
	// document of every recorded ConfigChanged. Nil replays the recorded
	// configurations (the run must then reproduce what happened).
	Ledger []byte
	// FromMs and ToMs bound, in log time, the decisions that are tallied
	// and compared: [FromMs, ToMs); ToMs = 0 means no upper bound. The
	// replay itself starts earlier (at the log start) so that the state at
	// FromMs is right.
	FromMs, ToMs int64
}

// Partition replays one partition. Feed it the recorded decisions of the
// partition (Recorded, in log order), then its inputs (Input, in offset
// order); Differences compares as it goes. Not safe for concurrent use.
type Partition struct {
	P      int32
	o      Options
	l      *ledger.Ledger
	out    []ledger.Output
	merged map[string][]byte // recorded ledger document → the document replayed

	// WhatIf and Recorded tally the two sides.
	WhatIf, Recorded *Tally
	recorded         []*schemas.Event
	cmp              int // next recorded decision to compare
	// Differences counts positions (in the partition's decision sequence
	// within the window) where the what-if decision differs from the
	// recorded one, plus the surplus of the longer sequence.
	Differences int
	// First is the first difference, for a reader to start from.
	First *Difference
	// Inputs counts the inputs applied.
	Inputs int64
	// shift scales input offsets in a joint replay (Joint): the ledger
	// sees offset<<shift, so that the what-if's own lease messages can
	// be applied between two recorded inputs; decisions are compared
	// with their offset scaled back.
	shift uint
}

// Difference is one position where the two sides differ.
type Difference struct {
	Partition int32  `json:"partition"`
	Index     int    `json:"index"`
	Recorded  string `json:"recorded"`
	WhatIf    string `json:"whatif"`
}

// decisionKey names a decision in a Difference. Decisions are compared by
// their envelope and decision without the shadow verdict (the what-if adds
// provider shadow buckets of its own).
type decisionKey struct {
	RequestID, Node, Scope, Tenant, KeyID, Route, Class string
	Attempt                                             int32
	D                                                   schemas.Decision
}

func (k decisionKey) String() string {
	return fmt.Sprintf("%s/%d %s %s %s (input offset %d)", k.RequestID, k.Attempt, k.D.Status, k.D.Reason, k.D.LimitPath, k.D.InputOffset)
}

// NewPartition returns the replay of partition p. A new configuration that
// does not parse is refused here rather than by the ledger mid-replay.
func NewPartition(p int32, o Options) (*Partition, error) {
	if o.Ledger != nil {
		if _, err := ledger.ParseConfig(o.Ledger); err != nil {
			return nil, fmt.Errorf("what-if ledger config: %w", err)
		}
	}
	return &Partition{
		P: p, o: o, l: ledger.New(p, ledger.Config{}), merged: map[string][]byte{},
		WhatIf: NewTally(), Recorded: NewTally(),
	}, nil
}

func (pt *Partition) inWindow(ms int64) bool {
	return ms >= pt.o.FromMs && (pt.o.ToMs == 0 || ms < pt.o.ToMs)
}

// RecordedDecision takes one recorded decision event of the partition.
func (pt *Partition) RecordedDecision(ev *schemas.Event) {
	d := ev.Decision
	if d == nil || !pt.inWindow(d.LogTimeMs) {
		return
	}
	pt.recorded = append(pt.recorded, ev)
	pt.Recorded.Decision(ev.RequestID, ev.Attempt, ev.Tenant, ev.Class, d)
}

// Input applies one recorded input record (logTimeMs is its log append
// time). A record that did not decode should be given as a Tick, as the
// ledger service applies it.
func (pt *Partition) Input(offset, logTimeMs int64, ev *schemas.Event) {
	if ev.Type == schemas.TypeConfigChanged && ev.ConfigChanged != nil {
		cp := *ev
		cc := *ev.ConfigChanged
		cc.Ledger = pt.replayedDoc(cc.Ledger)
		cp.ConfigChanged = &cc
		ev = &cp
	}
	if pt.inWindow(logTimeMs) {
		pt.Recorded.Input(ev)
		pt.WhatIf.Input(ev)
	}
	pt.Inputs++
	pt.apply(offset<<pt.shift, logTimeMs, ev)
}

// apply gives the ledger one input at ledger offset off and tallies and
// compares its decisions.
func (pt *Partition) apply(off, logTimeMs int64, ev *schemas.Event) {
	pt.out = pt.l.Apply(logTimeMs, off, ev, pt.out[:0])
	for i := range pt.out {
		o := &pt.out[i]
		o.Decision.InputOffset >>= pt.shift
		if !pt.inWindow(o.Decision.LogTimeMs) {
			continue
		}
		pt.WhatIf.Decision(o.RequestID, o.Attempt, o.Tenant, o.Class, &o.Decision)
		pt.compare(o)
	}
}

// compare lines the what-if decision o up with the recorded decision at
// the same position.
func (pt *Partition) compare(o *ledger.Output) {
	i := pt.cmp
	pt.cmp++
	if i < len(pt.recorded) && sameDecision(pt.recorded[i], o) {
		return
	}
	pt.Differences++
	if pt.First == nil {
		d := &Difference{Partition: pt.P, Index: i, WhatIf: outputKey(o).String(), Recorded: "(none)"}
		if i < len(pt.recorded) {
			d.Recorded = eventKey(pt.recorded[i]).String()
		}
		pt.First = d
	}
}

// sameDecision compares a recorded decision with a what-if one, without
// their shadow verdicts.
func sameDecision(ev *schemas.Event, o *ledger.Output) bool {
	if ev.RequestID != o.RequestID || ev.Attempt != o.Attempt || ev.Node != o.Node || ev.Scope != o.Scope ||
		ev.Tenant != o.Tenant || ev.KeyID != o.KeyID || ev.Route != o.Route || ev.Class != o.Class {
		return false
	}
	a, b := *ev.Decision, o.Decision
	a.Shadow, b.Shadow = nil, nil
	return a == b
}

func outputKey(o *ledger.Output) decisionKey {
	return decisionKey{RequestID: o.RequestID, Node: o.Node, Scope: o.Scope, Tenant: o.Tenant, KeyID: o.KeyID,
		Route: o.Route, Class: o.Class, Attempt: o.Attempt, D: o.Decision}
}

func eventKey(ev *schemas.Event) decisionKey {
	return decisionKey{RequestID: ev.RequestID, Node: ev.Node, Scope: ev.Scope, Tenant: ev.Tenant, KeyID: ev.KeyID,
		Route: ev.Route, Class: ev.Class, Attempt: ev.Attempt, D: *ev.Decision}
}

// Finish accounts for recorded decisions the what-if did not reach and
// returns the partition's result.
func (pt *Partition) Finish() {
	if n := len(pt.recorded) - pt.cmp; n > 0 {
		pt.Differences += n
		if pt.First == nil {
			pt.First = &Difference{Partition: pt.P, Index: pt.cmp, Recorded: eventKey(pt.recorded[pt.cmp]).String(), WhatIf: "(none)"}
		}
		pt.cmp = len(pt.recorded)
	}
}

// replayedDoc returns the ledger document replayed in place of a recorded
// one: the new configuration (or the recorded one) plus the recorded
// provider limits as shadow buckets. A recorded document that does not
// parse is replayed as it is (the ledger refuses it, as it did live).
func (pt *Partition) replayedDoc(recorded []byte) []byte {
	if b, ok := pt.merged[string(recorded)]; ok {
		return b
	}
	base := pt.o.Ledger
	if base == nil {
		base = recorded
	}
	b, err := WithProviderShadow(base, recorded)
	if err != nil {
		if pt.o.Ledger != nil {
			b = pt.o.Ledger
		} else {
			b = recorded
		}
	}
	pt.merged[string(recorded)] = b
	return b
}

// ProviderLevel reports whether a shadow verdict's limit path ends at a
// provider level (the scope root or a deployment): the limits the provider
// enforces itself.
func ProviderLevel(limitPath string) bool {
	last := limitPath[strings.LastIndexByte(limitPath, '/')+1:]
	return strings.HasPrefix(last, ledger.LevelScope+":") || strings.HasPrefix(last, ledger.LevelDeployment+":")
}

// WithProviderShadow returns base with the scope- and deployment-level
// buckets of recorded added to the scope of the same name as shadow
// buckets (without guaranteed baselines or borrow reserves, which shadow
// buckets do not have; ramp buckets are a local governor, not a provider
// limit, and are left out). A bucket base already shadows is not added
// twice.
func WithProviderShadow(base, recorded []byte) ([]byte, error) {
	nc, err := ledger.ParseConfig(base)
	if err != nil {
		return nil, err
	}
	rc, err := ledger.ParseConfig(recorded)
	if err != nil {
		return nil, err
	}
	for si := range nc.Scopes {
		ns := &nc.Scopes[si]
		ri := slices.IndexFunc(rc.Scopes, func(s ledger.ScopeConfig) bool { return s.Name == ns.Name })
		if ri < 0 {
			continue
		}
		for _, b := range rc.Scopes[ri].Buckets {
			if b.Shadow || rc.Scopes[ri].Shadow || b.Refill == ledger.RefillRamp ||
				(b.Level != ledger.LevelScope && b.Level != ledger.LevelDeployment) {
				continue
			}
			dup := slices.ContainsFunc(ns.Buckets, func(x ledger.BucketConfig) bool {
				return (x.Shadow || ns.Shadow) && x.Level == b.Level && x.ID == b.ID && x.Dimension == b.Dimension
			})
			if dup {
				continue
			}
			b.Shadow, b.Guaranteed, b.BorrowReserve = true, 0, 0
			ns.Buckets = append(ns.Buckets, b)
		}
	}
	out, err := json.Marshal(&nc)
	if err != nil {
		return nil, err
	}
	if _, err := ledger.ParseConfig(out); err != nil {
		return nil, fmt.Errorf("config with provider shadow buckets: %w", err)
	}
	return out, nil
}
