package ledgerd

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// ReplayOptions configures a replay verification.
type ReplayOptions struct {
	Brokers    []string
	Topics     bus.Names // zero value = bus.DefaultNames()
	Partitions []int32   // empty = all partitions of sluice.requests
	// Group is the ledger's consumer group (default "sluice-ledger"). Its
	// committed offsets bound the verified range: an input the ledger has
	// not committed may have no recorded decision yet.
	Group string
	// FromSnapshot starts from the partition's newest snapshot instead of
	// the start of the log.
	FromSnapshot bool
	// ToOffset stops before this input offset (-1 or 0 = the current end).
	ToOffset int64
	// LedgerOverride, when set, replaces the ledger document of every
	// ConfigChanged event: a what-if run that is expected to diverge.
	LedgerOverride []byte
	// Progress, when non-nil, receives a progress line per partition.
	Progress io.Writer
}

// Divergence is the first difference between recorded and re-derived
// decisions of a partition.
type Divergence struct {
	Partition   int32    `json:"partition"`
	Index       int      `json:"index"`        // position in the partition's decision sequence
	InputOffset int64    `json:"input_offset"` // input that produced the decision, if known
	Recorded    string   `json:"recorded"`     // encoded recorded decision, or "" if missing
	Replayed    string   `json:"replayed"`     // encoded re-derived decision, or "" if missing
	Context     []string `json:"context,omitempty"`
}

// End bounds of a verified range: what fixed PartitionRange.To.
const (
	BoundStable    = "stable_offset"    // the last stable offset of sluice.requests
	BoundCommitted = "committed_offset" // the ledger group's committed offset
	BoundToOffset  = "to_offset"        // --to-offset
)

// PartitionRange is the input range [From, To) of one partition that a
// verification replayed, and whose decisions it compared. Decisions of
// inputs outside it were ignored.
type PartitionRange struct {
	Partition int32  `json:"partition"`
	From      int64  `json:"from_offset"`
	To        int64  `json:"to_offset"` // exclusive
	Bound     string `json:"bound"`     // what fixed To: BoundStable, BoundCommitted or BoundToOffset
	Inputs    int    `json:"inputs"`
	Decisions int    `json:"decisions"`
}

// ReplayReport summarises a verification.
type ReplayReport struct {
	Partitions  int              `json:"partitions"`
	Inputs      int              `json:"inputs"`
	Decisions   int              `json:"decisions"`
	Ranges      []PartitionRange `json:"ranges"`
	Divergences []*Divergence    `json:"divergences,omitempty"`
}

// inputEnd fixes where the verification of one partition stops (exclusive):
// below the last stable offset of sluice.requests (nothing above it can be
// read), below the ledger group's committed offset (decisions are committed
// in the same transaction as the consumed offsets, so every decision of an
// input below it is on sluice.decisions, and none of an input above it need
// be yet), and below to when to > 0. A negative stable or committed offset
// (unknown, or nothing committed) verifies nothing.
func inputEnd(stable, committed, to int64) (end int64, bound string) {
	end, bound = max(stable, 0), BoundStable
	if c := max(committed, 0); c < end {
		end, bound = c, BoundCommitted
	}
	if to > 0 && to < end {
		end, bound = to, BoundToOffset
	}
	return end, bound
}

// Verify fixes, per partition, the input range to check (see inputEnd),
// re-reads those inputs, re-runs the state machine and compares every
// decision, byte for byte, with the decisions recorded on sluice.decisions
// for the inputs of that range. It works on a live system: the ranges are
// fixed before anything is read, and decisions of later inputs are ignored.
func Verify(ctx context.Context, o ReplayOptions) (*ReplayReport, error) {
	o.Topics = o.Topics.OrDefault()
	if o.Group == "" {
		o.Group = "sluice-ledger"
	}
	cl, err := bus.NewClient(ctx, o.Brokers, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	parts := o.Partitions
	if len(parts) == 0 {
		td, err := adm.ListTopics(ctx, o.Topics.Requests)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", o.Topics.Requests, err)
		}
		t, ok := td[o.Topics.Requests]
		if !ok || t.Err != nil {
			return nil, fmt.Errorf("topic %s missing", o.Topics.Requests)
		}
		parts = t.Partitions.Numbers()
	}
	// Snapshots first: each is committed with the group offset it reflects,
	// so the offsets read next are at or past it.
	snaps := map[int32]*schemas.Snapshot{}
	if o.FromSnapshot {
		for _, p := range parts {
			if snaps[p], err = LatestSnapshot(ctx, o.Brokers, o.Topics, p); err != nil {
				return nil, fmt.Errorf("partition %d: %w", p, err)
			}
		}
	}
	ends, err := inputEnds(ctx, adm, o, parts)
	if err != nil {
		return nil, err
	}
	rep := &ReplayReport{}
	for _, p := range parts {
		pr, d, err := verifyPartition(ctx, o, p, ends[p], snaps[p])
		if err != nil {
			return rep, fmt.Errorf("partition %d: %w", p, err)
		}
		rep.Partitions++
		rep.Inputs += pr.Inputs
		rep.Decisions += pr.Decisions
		rep.Ranges = append(rep.Ranges, pr)
		if d != nil {
			rep.Divergences = append(rep.Divergences, d)
		}
	}
	return rep, nil
}

// inputEnds reads, once and before any input, the stable offsets of
// sluice.requests and the ledger group's committed offsets, and fixes the
// end of each partition's range. The committed offsets are read first, so
// that the stable offset of sluice.decisions read later covers their
// decisions.
func inputEnds(ctx context.Context, adm *kadm.Client, o ReplayOptions, parts []int32) (map[int32]PartitionRange, error) {
	committed, err := adm.FetchOffsets(ctx, o.Group)
	if err != nil {
		return nil, fmt.Errorf("committed offsets of ledger group %q: %w", o.Group, err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, o.Topics.Requests)
	if err != nil {
		return nil, fmt.Errorf("stable offsets of %s: %w", o.Topics.Requests, err)
	}
	starts, err := adm.ListStartOffsets(ctx, o.Topics.Requests)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", o.Topics.Requests, err)
	}
	out := map[int32]PartitionRange{}
	anyCommitted := false
	for _, p := range parts {
		c := int64(-1)
		if r, ok := committed.Lookup(o.Topics.Requests, p); ok && r.Err == nil {
			c = r.At
			anyCommitted = anyCommitted || c >= 0
		}
		s := int64(-1)
		if r, ok := stable.Lookup(o.Topics.Requests, p); ok && r.Err == nil {
			s = r.Offset
		}
		from := int64(0)
		if r, ok := starts.Lookup(o.Topics.Requests, p); ok && r.Err == nil && r.Offset > 0 {
			from = r.Offset
		}
		to, bound := inputEnd(s, c, o.ToOffset)
		out[p] = PartitionRange{Partition: p, From: from, To: to, Bound: bound}
	}
	if !anyCommitted {
		return nil, fmt.Errorf("ledger group %q has no committed offset on %s: nothing can be verified (is --group the ledger's group? has a ledger run?)", o.Group, o.Topics.Requests)
	}
	return out, nil
}

// verifyPartition replays the inputs of pr (from snap, when not nil) and
// compares their decisions with the recorded ones.
func verifyPartition(ctx context.Context, o ReplayOptions, p int32, pr PartitionRange, snap *schemas.Snapshot) (PartitionRange, *Divergence, error) {
	l := ledger.New(p, ledger.Config{})
	from := kgo.NewOffset().AtStart()
	if snap != nil {
		var err error
		if l, err = ledger.Restore(snap.State); err != nil {
			return pr, nil, fmt.Errorf("restore snapshot: %w", err)
		}
		from = kgo.NewOffset().At(snap.InputOffset)
		pr.From = snap.InputOffset
	}
	if pr.From >= pr.To {
		// Nothing to verify (e.g. a snapshot at or past the end).
		pr.From = pr.To
		return pr, nil, nil
	}
	var replayed []string
	var outs []ledger.Output
	var ev schemas.Event
	last := time.Now()
	err := ReadPartition(ctx, o.Brokers, o.Topics.Requests, p, from, pr.To, func(r *kgo.Record) error {
		if r.Offset < l.Offset() {
			return nil
		}
		_ = decodeInput(r.Value, &ev) // a bad record is the same no-op here as live
		if o.LedgerOverride != nil && ev.ConfigChanged != nil {
			ev.ConfigChanged.Ledger = o.LedgerOverride
		}
		outs = l.Apply(r.Timestamp.UnixMilli(), r.Offset, &ev, outs[:0])
		for i := range outs {
			b, err := schemas.Encode(outs[i].Event())
			if err != nil {
				return err
			}
			replayed = append(replayed, string(b))
		}
		for i := range l.LearnedOutputs() {
			b, err := schemas.Encode(l.LearnedOutputs()[i].Event())
			if err != nil {
				return err
			}
			replayed = append(replayed, string(b))
		}
		pr.Inputs++
		if o.Progress != nil && time.Since(last) > 200*time.Millisecond {
			fmt.Fprintf(o.Progress, "\rreplay partition %d: %d inputs, %d decisions", p, pr.Inputs, len(replayed))
			last = time.Now()
		}
		return nil
	})
	if err != nil {
		return pr, nil, err
	}
	pr.Decisions = len(replayed)
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "\rreplay partition %d: %d inputs, %d decisions\n", p, pr.Inputs, len(replayed))
	}
	recorded, err := recordedDecisions(ctx, o, p, pr.From, pr.To, len(replayed))
	if err != nil {
		return pr, nil, err
	}
	return pr, compare(p, recorded, replayed), nil
}

// decisionsSettle is how long the stable offset of a decisions partition
// may stand still, with fewer recorded decisions than replayed ones, before
// the missing ones are reported as missing rather than awaited.
const decisionsSettle = 3 * time.Second

// errPastEnd stops a read of sluice.decisions at the first decision of an
// input at or after the range's end.
var errPastEnd = errors.New("past the verified range")

// window selects, on one partition of sluice.decisions, the recorded
// decisions of the inputs [lo, end) of input partition part. Decisions go
// to the partition of their gateway (bus.DecisionPartition), so those of
// one input partition are spread over every decisions partition, each in
// input order: the first decision of part at an input at or after end
// closes the window.
type window struct {
	part     int32
	lo, end  int64
	recorded []recordedDecision
	next     int64 // next decisions offset to read
	closed   bool  // a decision of an input ≥ end was seen
}

// recordedDecision is one recorded decision and its place in its input
// partition's order: input offset, then index within the input.
type recordedDecision struct {
	offset int64
	index  int64
	raw    string
}

// add takes one record of sluice.decisions. A record that is not a
// decision is kept, on the decisions partition of the same number, so that
// it shows as a divergence.
func (w *window) add(r *kgo.Record) error {
	w.next = r.Offset + 1
	var d schemas.Event
	derr := schemas.Decode(r.Value, &d)
	if derr == nil && d.CapacityLearned != nil {
		// A learned capacity (ledger/learn.go): ordered after the
		// decisions of its input, as the ledger writes it.
		c := d.CapacityLearned
		if c.InputPartition != w.part {
			return nil
		}
		switch off := c.InputOffset; {
		case off >= w.end:
			w.closed = true
			return errPastEnd
		case off >= w.lo:
			w.recorded = append(w.recorded, recordedDecision{offset: off, index: learnedIndexBase + decisionIndex(d.ID), raw: string(r.Value)})
		}
		return nil
	}
	if derr != nil || d.Decision == nil {
		if r.Partition == w.part {
			w.recorded = append(w.recorded, recordedDecision{offset: -1, raw: string(r.Value)})
		}
		return nil
	}
	if d.Decision.InputPartition != w.part {
		return nil
	}
	switch off := d.Decision.InputOffset; {
	case off >= w.end:
		w.closed = true
		return errPastEnd
	case off >= w.lo:
		w.recorded = append(w.recorded, recordedDecision{offset: off, index: decisionIndex(d.ID), raw: string(r.Value)})
	}
	return nil
}

// learnedIndexBase orders a CapacityLearned record after every decision of
// its input.
const learnedIndexBase = 1 << 32

// decisionIndex is the index part of a decision id "d-<p>-<offset>-<index>"
// (ledger.Output.ID); -1 if id has no such part.
func decisionIndex(id string) int64 {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return -1
	}
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// mergeWindows returns the recorded decisions of every window in their
// input partition's order.
func mergeWindows(ws []*window) []string {
	var all []recordedDecision
	for _, w := range ws {
		all = append(all, w.recorded...)
	}
	slices.SortStableFunc(all, func(a, b recordedDecision) int {
		if c := cmp.Compare(a.offset, b.offset); c != 0 {
			return c
		}
		return cmp.Compare(a.index, b.index)
	})
	out := make([]string, len(all))
	for i := range all {
		out[i] = all[i].raw
	}
	return out
}

// recordedDecisions reads the recorded decisions of the inputs [lo, end)
// of partition p, where want decisions were re-derived, from every
// partition of sluice.decisions. It stops once every decisions partition
// has shown a decision of a later input of p, or once it has read, up to
// stable offsets, at least want decisions: then the transaction of the
// last of them is complete too. With fewer, it waits (the commit markers of
// the last transaction may still be on their way) until the stable offsets
// stand still for decisionsSettle.
func recordedDecisions(ctx context.Context, o ReplayOptions, p int32, lo, end int64, want int) ([]string, error) {
	parts, err := decisionPartitions(ctx, o)
	if err != nil {
		return nil, err
	}
	ws := make([]*window, parts)
	for i := range ws {
		ws[i] = &window{part: p, lo: lo, end: end}
	}
	lastStable, still := int64(-1), time.Now()
	for {
		n, closed := 0, true
		for dp, w := range ws {
			if !w.closed {
				err := ReadPartition(ctx, o.Brokers, o.Topics.Decisions, int32(dp), kgo.NewOffset().At(w.next), -1, w.add)
				if err != nil && !errors.Is(err, errPastEnd) {
					return nil, err
				}
			}
			n += len(w.recorded)
			closed = closed && w.closed
		}
		if closed || n >= want {
			return mergeWindows(ws), nil
		}
		s, err := stableOffsetSum(ctx, o.Brokers, o.Topics.Decisions)
		if err != nil {
			return nil, err
		}
		if s != lastStable {
			lastStable, still = s, time.Now()
		} else if time.Since(still) > decisionsSettle {
			return mergeWindows(ws), nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// decisionPartitions is the partition count of sluice.decisions.
func decisionPartitions(ctx context.Context, o ReplayOptions) (int32, error) {
	cl, err := bus.NewClient(ctx, o.Brokers, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	return bus.PartitionCount(ctx, cl, o.Topics.Decisions)
}

// stableOffsetSum returns the sum of the last stable offsets of topic's
// partitions: it changes whenever any of them moves.
func stableOffsetSum(ctx context.Context, brokers []string, topic string) (int64, error) {
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	lso, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("stable offsets of %s: %w", topic, err)
	}
	var sum int64
	lso.Each(func(r kadm.ListedOffset) {
		if r.Err == nil {
			sum += r.Offset
		}
	})
	return sum, nil
}

// compare finds the first position where the sequences differ.
func compare(p int32, recorded, replayed []string) *Divergence {
	n := max(len(recorded), len(replayed))
	for i := 0; i < n; i++ {
		var a, b string
		if i < len(recorded) {
			a = recorded[i]
		}
		if i < len(replayed) {
			b = replayed[i]
		}
		if a == b {
			continue
		}
		d := &Divergence{Partition: p, Index: i, Recorded: a, Replayed: b}
		for j := max(0, i-3); j < i; j++ {
			d.Context = append(d.Context, recorded[j])
		}
		var ev schemas.Event
		src := a
		if src == "" {
			src = b
		}
		if json.Unmarshal([]byte(src), &ev) == nil && ev.Decision != nil {
			d.InputOffset = ev.Decision.InputOffset
		}
		return d
	}
	return nil
}

// String renders a divergence for a terminal.
func (d *Divergence) String() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "partition %d: decision #%d (input offset %d) differs\n", d.Partition, d.Index, d.InputOffset)
	for _, c := range d.Context {
		fmt.Fprintf(&b, "  before:   %s\n", c)
	}
	fmt.Fprintf(&b, "  recorded: %s\n  replayed: %s\n", orNone(d.Recorded), orNone(d.Replayed))
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
