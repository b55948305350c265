package ledgerd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	Partition   int32
	Index       int    // position in the partition's decision sequence
	InputOffset int64  // input that produced the decision, if known
	Recorded    string // encoded recorded decision, or "" if missing
	Replayed    string // encoded re-derived decision, or "" if missing
	Context     []string
}

// ReplayReport summarises a verification.
type ReplayReport struct {
	Partitions  int           `json:"partitions"`
	Inputs      int           `json:"inputs"`
	Decisions   int           `json:"decisions"`
	Divergences []*Divergence `json:"divergences,omitempty"`
}

// Verify re-reads each partition's inputs, re-runs the state machine and
// compares every decision, byte for byte, with the decisions recorded on
// sluice.decisions for that partition.
func Verify(ctx context.Context, o ReplayOptions) (*ReplayReport, error) {
	o.Topics = o.Topics.OrDefault()
	cl, err := bus.NewClient(ctx, o.Brokers, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	parts := o.Partitions
	if len(parts) == 0 {
		td, err := kadm.NewClient(cl).ListTopics(ctx, o.Topics.Requests)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", o.Topics.Requests, err)
		}
		t, ok := td[o.Topics.Requests]
		if !ok || t.Err != nil {
			return nil, fmt.Errorf("topic %s missing", o.Topics.Requests)
		}
		parts = t.Partitions.Numbers()
	}
	rep := &ReplayReport{}
	for _, p := range parts {
		d, in, n, err := verifyPartition(ctx, o, p)
		if err != nil {
			return rep, fmt.Errorf("partition %d: %w", p, err)
		}
		rep.Partitions++
		rep.Inputs += in
		rep.Decisions += n
		if d != nil {
			rep.Divergences = append(rep.Divergences, d)
		}
	}
	return rep, nil
}

func verifyPartition(ctx context.Context, o ReplayOptions, p int32) (*Divergence, int, int, error) {
	l := ledger.New(p, ledger.Config{})
	from := kgo.NewOffset().AtStart()
	if o.FromSnapshot {
		snap, err := LatestSnapshot(ctx, o.Brokers, o.Topics, p)
		if err != nil {
			return nil, 0, 0, err
		}
		if snap != nil {
			if l, err = ledger.Restore(snap.State); err != nil {
				return nil, 0, 0, fmt.Errorf("restore snapshot: %w", err)
			}
			from = kgo.NewOffset().At(snap.InputOffset)
		}
	}
	upto := int64(-1)
	if o.ToOffset > 0 {
		upto = o.ToOffset
	}
	var replayed []string
	var outs []ledger.Output
	var ev schemas.Event
	inputs := 0
	last := time.Now()
	err := ReadPartition(ctx, o.Brokers, o.Topics.Requests, p, from, upto, func(r *kgo.Record) error {
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
		inputs++
		if o.Progress != nil && time.Since(last) > 200*time.Millisecond {
			fmt.Fprintf(o.Progress, "\rreplay partition %d: %d inputs, %d decisions", p, inputs, len(replayed))
			last = time.Now()
		}
		return nil
	})
	if err != nil {
		return nil, inputs, 0, err
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "\rreplay partition %d: %d inputs, %d decisions\n", p, inputs, len(replayed))
	}
	// The recorded decisions of inputs in the replayed range.
	lo := int64(-1)
	if o.FromSnapshot {
		lo = from.EpochOffset().Offset
	}
	var recorded []string
	err = ReadPartition(ctx, o.Brokers, o.Topics.Decisions, p, kgo.NewOffset().AtStart(), -1, func(r *kgo.Record) error {
		var d schemas.Event
		if schemas.Decode(r.Value, &d) != nil || d.Decision == nil {
			recorded = append(recorded, string(r.Value))
			return nil
		}
		if d.Decision.InputOffset < lo || (upto >= 0 && d.Decision.InputOffset >= upto) {
			return nil
		}
		recorded = append(recorded, string(r.Value))
		return nil
	})
	if err != nil {
		return nil, inputs, 0, err
	}
	return compare(p, recorded, replayed), inputs, len(replayed), nil
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
