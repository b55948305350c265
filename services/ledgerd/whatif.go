package ledgerd

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/analytics/whatif"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
)

// WhatIfOptions configures `sluice whatif`.
type WhatIfOptions struct {
	Brokers    []string
	Topics     bus.Names // zero value = bus.DefaultNames()
	Partitions []int32   // empty = all partitions of sluice.requests
	// Group is the ledger's consumer group (default "sluice-ledger"): only
	// inputs it has committed are replayed, so every one has its recorded
	// decisions.
	Group string
	// Ledger is the new configuration (nil: the recorded ones).
	Ledger []byte
	// FromMs and ToMs bound the compared window in log time (ToMs 0 = now).
	FromMs, ToMs int64
	// Progress, when set, is called now and then with the inputs replayed
	// and the total to replay.
	Progress func(done, total int64)
}

// WhatIfReport is the result of a what-if run, both sides summed over the
// partitions.
type WhatIfReport struct {
	FromMs      int64                `json:"from_ms"`
	ToMs        int64                `json:"to_ms"`
	Partitions  int                  `json:"partitions"`
	Inputs      int64                `json:"inputs"`
	Ranges      []PartitionRange     `json:"ranges"`
	Recorded    whatif.Summary       `json:"recorded"`
	WhatIf      whatif.Summary       `json:"whatif"`
	Differences int                  `json:"differences"`
	First       []*whatif.Difference `json:"first_differences,omitempty"`
	// Budgets is the effect of the what-if's cross-scope budgets, when it
	// has any: the partitions were then replayed jointly, with the
	// what-if's own lease messages (whatif.Joint).
	Budgets []whatif.BudgetEffect `json:"budgets,omitempty"`
	// LeaseMessagesDropped counts the recorded lease messages a joint
	// replay replaced with its own.
	LeaseMessagesDropped int64 `json:"lease_messages_dropped,omitempty"`
	// ElapsedMs and EventsPerSec measure the run (reading, decoding and
	// replaying).
	ElapsedMs    int64   `json:"elapsed_ms"`
	EventsPerSec float64 `json:"events_per_sec"`
}

// WhatIf replays the committed inputs of each partition, from the start of
// the log up to the first input at or after ToMs, under o.Ledger, and
// compares the decisions of the window [FromMs, ToMs) with the recorded
// ones (see analytics/whatif).
func WhatIf(ctx context.Context, o WhatIfOptions) (*WhatIfReport, error) {
	start := time.Now()
	ro := ReplayOptions{Brokers: o.Brokers, Topics: o.Topics.OrDefault(), Partitions: o.Partitions, Group: o.Group}
	if ro.Group == "" {
		ro.Group = "sluice-ledger"
	}
	if o.ToMs == 0 {
		o.ToMs = time.Now().UnixMilli()
	}
	cl, err := bus.NewClient(ctx, o.Brokers, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	parts, ends, total, err := whatIfRanges(ctx, kadm.NewClient(cl), ro, o.ToMs)
	if err != nil {
		return nil, err
	}
	rep := &WhatIfReport{FromMs: o.FromMs, ToMs: o.ToMs}
	if whatif.NeedsJoint(o.Ledger) {
		err = whatIfJoint(ctx, ro, o, parts, ends, rep)
	} else {
		err = whatIfSeparate(ctx, ro, o, parts, ends, total, rep)
	}
	if err != nil {
		return rep, err
	}
	el := time.Since(start)
	rep.ElapsedMs = el.Milliseconds()
	if el > 0 {
		rep.EventsPerSec = float64(rep.Inputs) / el.Seconds()
	}
	return rep, nil
}

// whatIfRanges finds the partitions to replay (ro's, or every partition of
// the requests topic) and each one's range of committed inputs, ended by
// the first input at or after toMs; total is the inputs of all ranges.
func whatIfRanges(ctx context.Context, adm *kadm.Client, ro ReplayOptions, toMs int64) (parts []int32, ends map[int32]PartitionRange, total int64, err error) {
	parts = ro.Partitions
	if len(parts) == 0 {
		td, err := adm.ListTopics(ctx, ro.Topics.Requests)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("list %s: %w", ro.Topics.Requests, err)
		}
		t, ok := td[ro.Topics.Requests]
		if !ok || t.Err != nil {
			return nil, nil, 0, fmt.Errorf("topic %s missing", ro.Topics.Requests)
		}
		parts = t.Partitions.Numbers()
	}
	ends, err = inputEnds(ctx, adm, ro, parts)
	if err != nil {
		return nil, nil, 0, err
	}
	// The first input at or after ToMs ends each partition's range.
	after, err := adm.ListOffsetsAfterMilli(ctx, toMs, ro.Topics.Requests)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("offsets after %d ms of %s: %w", toMs, ro.Topics.Requests, err)
	}
	for _, p := range parts {
		pr := ends[p]
		if r, ok := after.Lookup(ro.Topics.Requests, p); ok && r.Err == nil && r.Offset >= 0 && r.Offset < pr.To {
			pr.To, pr.Bound = r.Offset, "to_ms"
		}
		ends[p] = pr
		total += max(0, pr.To-pr.From)
	}
	return parts, ends, total, nil
}

// whatIfSeparate is WhatIf for a configuration without cross-scope
// budgets: each partition is replayed on its own, one after another.
func whatIfSeparate(ctx context.Context, ro ReplayOptions, o WhatIfOptions, parts []int32, ends map[int32]PartitionRange, total int64, rep *WhatIfReport) error {
	sum := newWhatIfSum(rep)
	var done int64
	for _, p := range parts {
		pt, err := whatIfPartition(ctx, ro, o, p, ends[p], &done, total)
		if err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
		sum.add(ends[p], pt)
	}
	sum.finish()
	return nil
}

// whatIfSum adds the partitions' comparisons up into one report, both
// sides' tallies merged.
type whatIfSum struct {
	rep     *WhatIfReport
	rec, wi *whatif.Tally
}

func newWhatIfSum(rep *WhatIfReport) *whatIfSum {
	return &whatIfSum{rep: rep, rec: whatif.NewTally(), wi: whatif.NewTally()}
}

// add counts one replayed partition, whose range was pr.
func (s *whatIfSum) add(pr PartitionRange, pt *whatif.Partition) {
	pr.Inputs, pr.Decisions = int(pt.Inputs), int(pt.WhatIf.Decisions)
	s.rep.Ranges = append(s.rep.Ranges, pr)
	s.rep.Partitions++
	s.rep.Inputs += pt.Inputs
	s.rep.Differences += pt.Differences
	if pt.First != nil {
		s.rep.First = append(s.rep.First, pt.First)
	}
	s.rec.Merge(pt.Recorded)
	s.wi.Merge(pt.WhatIf)
}

// finish writes the summed tallies into the report.
func (s *whatIfSum) finish() {
	s.rep.Recorded, s.rep.WhatIf = s.rec.Summary(), s.wi.Summary()
}

// whatIfPartition reads the recorded decisions of the inputs of pr, then
// replays the inputs. Three stages overlap: while the recorded decisions
// are read and fed to the replay, the inputs are already being fetched and
// decoded, a batch at a time on every core, and the replay then applies
// the decoded batches in offset order.
func whatIfPartition(ctx context.Context, ro ReplayOptions, o WhatIfOptions, p int32, pr PartitionRange, done *int64, total int64) (*whatif.Partition, error) {
	pt, err := whatif.NewPartition(p, whatif.Options{Ledger: o.Ledger, FromMs: o.FromMs, ToMs: o.ToMs})
	if err != nil {
		return nil, err
	}
	if pr.From >= pr.To {
		return pt, nil
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches, free := make(chan *inputBatch, 3), make(chan *inputBatch, 4)
	for range cap(free) {
		free <- &inputBatch{recs: make([]*kgo.Record, 0, inputBatchMax), evs: make([]schemas.Event, inputBatchMax)}
	}
	readErr := make(chan error, 1)
	go func() {
		defer close(batches)
		readErr <- readInputs(rctx, ro, p, pr, batches, free)
	}()

	// The range ends at committed inputs, so their decisions are committed
	// (same transaction): one read up to the stable offset has them all.
	if err := feedRecorded(ctx, ro, p, pr, pt); err != nil {
		return nil, err
	}
	last := time.Now()
	for b := range batches {
		for i, r := range b.recs {
			pt.Input(r.Offset, r.Timestamp.UnixMilli(), &b.evs[i])
		}
		*done += int64(len(b.recs))
		b.recs = b.recs[:0]
		free <- b
		if o.Progress != nil && time.Since(last) > 100*time.Millisecond {
			o.Progress(*done, total)
			last = time.Now()
		}
	}
	if err := <-readErr; err != nil {
		return nil, err
	}
	pt.Finish()
	if o.Progress != nil {
		o.Progress(*done, total)
	}
	return pt, nil
}

// feedRecorded reads the recorded decisions of the inputs of pr and gives
// them to pt in their input partition's order. Decisions go to the
// partition of the gateway that asked (bus.DecisionPartition), so they are
// gathered from every decisions partition and merged, as recordedDecisions
// does for replay --verify. The range ends at committed inputs, so their
// decisions are committed (same transaction): one read up to the stable
// offsets has them all.
func feedRecorded(ctx context.Context, ro ReplayOptions, p int32, pr PartitionRange, pt *whatif.Partition) error {
	recorded, err := recordedDecisions(ctx, ro, p, pr.From, pr.To, 0)
	if err != nil {
		return err
	}
	evs := make([]schemas.Event, len(recorded)) // pt keeps pointers into it
	decodeParallel(len(recorded), func(i int) { _ = schemas.Decode([]byte(recorded[i]), &evs[i]) })
	for i := range evs {
		if evs[i].Decision != nil {
			pt.RecordedDecision(&evs[i])
		}
	}
	return nil
}

// inputBatchMax is the number of inputs decoded together.
const inputBatchMax = 4096

// inputBatch is a run of consecutive input records and their decoded
// events.
type inputBatch struct {
	recs []*kgo.Record
	evs  []schemas.Event
}

// readInputs reads the inputs of pr, decodes them a batch at a time on
// every core and sends the batches in offset order; it takes empty
// batches from free.
func readInputs(ctx context.Context, ro ReplayOptions, p int32, pr PartitionRange, out, free chan *inputBatch) error {
	var b *inputBatch
	send := func() error {
		// A bad record is the same no-op here as live.
		decodeParallel(len(b.recs), func(i int) { _ = decodeInput(b.recs[i].Value, &b.evs[i]) })
		select {
		case out <- b:
			b = nil
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := ReadPartition(ctx, ro.Brokers, ro.Topics.Requests, p, kgo.NewOffset().At(pr.From), pr.To, func(r *kgo.Record) error {
		if b == nil {
			select {
			case b = <-free:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		b.recs = append(b.recs, r)
		if len(b.recs) == inputBatchMax {
			return send()
		}
		return nil
	})
	if err == nil && b != nil && len(b.recs) > 0 {
		err = send()
	}
	return err
}

// decodeParallel calls fn(i) for every i in [0, n), spread over the
// available cores in contiguous chunks.
func decodeParallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), max(1, n/256))
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := min(n, lo+chunk)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// whatIfJoint is WhatIf for a configuration with cross-scope budgets: the
// inputs of every partition are read, merged in log order (log time, then
// partition, then offset) and replayed together, so the budgets' lease
// messages go between the partitions' what-if ledgers (whatif.Joint). It
// holds the whole range in memory: a budget what-if is for a day or a
// week of a deployment's log, not for its whole history at once.
func whatIfJoint(ctx context.Context, ro ReplayOptions, o WhatIfOptions, parts []int32, ends map[int32]PartitionRange, rep *WhatIfReport) error {
	nparts := requestPartitions(ctx, ro, len(parts))
	j, err := whatif.NewJoint(parts, whatif.Options{Ledger: o.Ledger, FromMs: o.FromMs, ToMs: o.ToMs},
		func(key string) int32 { return PartitionOf(key, nparts) })
	if err != nil {
		return err
	}
	all, err := readJointInputs(ctx, ro, parts, ends, j)
	if err != nil {
		return err
	}
	for i := range all {
		j.Input(all[i].p, all[i].off, all[i].ms, &all[i].ev)
		if o.Progress != nil && i%4096 == 0 {
			o.Progress(int64(i), int64(len(all)))
		}
	}
	sum := newWhatIfSum(rep)
	for _, p := range parts {
		pt := j.Partition(p)
		pt.Finish()
		sum.add(ends[p], pt)
	}
	sum.finish()
	rep.LeaseMessagesDropped = j.Dropped
	if j.Overflow > 0 {
		return fmt.Errorf("what-if lease messages overflowed between two recorded inputs %d times", j.Overflow)
	}
	if o.Progress != nil {
		o.Progress(int64(len(all)), int64(len(all)))
	}
	rep.Budgets, err = j.Budgets(o.Ledger)
	return err
}

// requestPartitions is the requests topic's partition count, which routes
// a budget's lease messages as the ledgers do; fallback (the partitions
// replayed) if the topic cannot be listed.
func requestPartitions(ctx context.Context, ro ReplayOptions, fallback int) int {
	cl, err := bus.NewClient(ctx, ro.Brokers, 10*time.Second)
	if err != nil {
		return fallback
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(ctx, ro.Topics.Requests)
	if err != nil {
		return fallback
	}
	return len(td[ro.Topics.Requests].Partitions)
}

// jointInput is one recorded input of a joint replay, with where and when
// it was appended.
type jointInput struct {
	p   int32
	off int64
	ms  int64
	ev  schemas.Event
}

// readJointInputs feeds each partition's recorded decisions to j and reads
// its inputs, then merges them all in log order: log time, then
// partition, then offset.
func readJointInputs(ctx context.Context, ro ReplayOptions, parts []int32, ends map[int32]PartitionRange, j *whatif.Joint) ([]jointInput, error) {
	var all []jointInput
	for _, p := range parts {
		pr := ends[p]
		if pr.From >= pr.To {
			continue
		}
		if err := feedRecorded(ctx, ro, p, pr, j.Partition(p)); err != nil {
			return nil, fmt.Errorf("partition %d: %w", p, err)
		}
		err := ReadPartition(ctx, ro.Brokers, ro.Topics.Requests, p, kgo.NewOffset().At(pr.From), pr.To, func(r *kgo.Record) error {
			in := jointInput{p: p, off: r.Offset, ms: r.Timestamp.UnixMilli()}
			_ = decodeInput(r.Value, &in.ev) // a bad record is the same no-op here as live
			all = append(all, in)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", p, err)
		}
	}
	slices.SortStableFunc(all, func(a, b jointInput) int {
		switch {
		case a.ms != b.ms:
			return cmp.Compare(a.ms, b.ms)
		case a.p != b.p:
			return cmp.Compare(a.p, b.p)
		}
		return cmp.Compare(a.off, b.off)
	})
	return all, nil
}
