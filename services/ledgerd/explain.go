package ledgerd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// ExplainOptions says where to look for a request.
type ExplainOptions struct {
	Brokers   []string
	Topics    bus.Names // zero value = bus.DefaultNames()
	RequestID string
	// Partition, when ≥ 0, is the request's partition of sluice.requests.
	// Otherwise the candidate Scopes (record keys) determine the partitions
	// searched, and without any every partition is searched.
	Partition int32
	Scopes    []string
	// FromMs starts the search at the first input at or after this log
	// time (0: the log start). The replay still starts at a snapshot or
	// the log start, so that the state is right.
	FromMs int64
	// AfterMs is how much log time past the request's last decision the
	// replay keeps watching for its later events (a retry, a reconcile);
	// default 60 s.
	AfterMs int64
}

// ErrRequestNotFound is returned when no input of the request was found.
var ErrRequestNotFound = errors.New("request not found")

// Explain finds the request's partition and first input, replays the
// partition from the newest snapshot before that input (or from the log
// start) through a ledger.Explainer, and returns the request's timeline.
func Explain(ctx context.Context, o ExplainOptions) (*ledger.Explanation, error) {
	o.Topics = o.Topics.OrDefault()
	if o.AfterMs <= 0 {
		o.AfterMs = 60_000
	}
	cl, err := bus.NewClient(ctx, o.Brokers, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	parts, err := candidatePartitions(ctx, adm, o)
	if err != nil {
		return nil, err
	}
	// A fallback attempt is a reservation in another scope, so often in
	// another partition: every candidate partition holding an input of
	// the request is explained, and the timelines merged. The partitions
	// after the first are searched from the request's first step.
	var xs []*ledger.Explanation
	for _, p := range parts {
		first, err := findFirstInput(ctx, adm, o, p)
		if err != nil {
			return nil, err
		}
		if first < 0 {
			continue
		}
		x, err := explainPartition(ctx, o, p, first)
		if err != nil {
			return nil, err
		}
		if len(xs) == 0 && len(x.Steps) > 0 {
			o.FromMs = max(o.FromMs, x.Steps[0].LogTimeMs-fallbackSlackMs)
		}
		xs = append(xs, x)
	}
	if len(xs) > 0 {
		return mergeExplanations(xs), nil
	}
	return nil, fmt.Errorf("%w: no input of %q in partitions %v of %s", ErrRequestNotFound, o.RequestID, parts, o.Topics.Requests)
}

// fallbackSlackMs is how long before the request's first step the other
// partitions are searched: log times of partitions differ by the brokers'
// clocks.
const fallbackSlackMs = 10_000

// mergeExplanations joins the timelines of a request's partitions, in log
// time order: the header (scope, tenant, partition) is the first
// attempt's, the outcome the last decided attempt's, and the hops are
// every attempt's, a reservation in a new scope marked as a fallback.
func mergeExplanations(xs []*ledger.Explanation) *ledger.Explanation {
	if len(xs) == 1 {
		markFallbacks(xs[0].Hops)
		return xs[0]
	}
	m := *xs[0]
	m.Steps, m.Hops = nil, nil
	last := int32(-1) // the latest decided attempt
	for _, x := range xs {
		m.Steps = append(m.Steps, x.Steps...)
		m.Hops = append(m.Hops, x.Hops...)
		for _, h := range x.Hops {
			if h.Outcome != "" && h.Attempt > last {
				last, m.Outcome, m.LimitPath, m.LimitDimension = h.Attempt, x.Outcome, x.LimitPath, x.LimitDimension
			}
		}
	}
	slices.SortStableFunc(m.Steps, func(a, b ledger.ExplainStep) int {
		return cmp.Or(cmp.Compare(a.LogTimeMs, b.LogTimeMs), cmp.Compare(a.Attempt, b.Attempt))
	})
	slices.SortStableFunc(m.Hops, func(a, b ledger.ExplainHop) int {
		return cmp.Or(cmp.Compare(a.Attempt, b.Attempt), cmp.Compare(a.LogTimeMs, b.LogTimeMs))
	})
	markFallbacks(m.Hops)
	return &m
}

func markFallbacks(hops []ledger.ExplainHop) {
	for i := 1; i < len(hops); i++ {
		hops[i].Fallback = hops[i].Input == schemas.TypeReserveRequested && hops[i].Scope != hops[i-1].Scope
	}
}

// PartitionOf returns the partition of sluice.requests that a record keyed
// by scope lands in (the gateways' key partitioner, bus.ScopePartitioner:
// murmur2, as Kafka's default, and a split scope's sub-scopes on
// consecutive partitions).
func PartitionOf(scope string, partitions int) int32 {
	return int32(scopePartitioner.Partition(&kgo.Record{Key: []byte(scope)}, partitions))
}

// scopePartitioner is stateless for keyed records: safe to share.
var scopePartitioner = bus.ScopePartitioner().ForTopic("")

func candidatePartitions(ctx context.Context, adm *kadm.Client, o ExplainOptions) ([]int32, error) {
	if o.Partition >= 0 {
		return []int32{o.Partition}, nil
	}
	td, err := adm.ListTopics(ctx, o.Topics.Requests)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", o.Topics.Requests, err)
	}
	t, ok := td[o.Topics.Requests]
	if !ok || t.Err != nil {
		return nil, fmt.Errorf("topic %s missing", o.Topics.Requests)
	}
	if len(o.Scopes) == 0 {
		return t.Partitions.Numbers(), nil
	}
	scopes, err := expandSplitScopes(ctx, o, len(t.Partitions))
	if err != nil {
		return nil, err
	}
	var out []int32
	for _, sc := range scopes {
		if p := PartitionOf(sc, len(t.Partitions)); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// expandSplitScopes returns o.Scopes with each scope that a ledger
// document of the log splits over partitions (ledger/split.go) expanded
// to its sub-scopes: a request of a split scope is a record of one of
// them, keyed by its name and so in its partition, not in the scope's.
// The documents are read from the config history of the scope's own
// partition (every change is published to every partition), all of them,
// as the request may be older than the split in force.
func expandSplitScopes(ctx context.Context, o ExplainOptions, partitions int) ([]string, error) {
	var out []string
	for _, sc := range o.Scopes {
		if strings.Contains(sc, ledger.SplitSep) {
			out = append(out, sc) // a sub-scope, or a name that cannot be split
			continue
		}
		hist, err := ConfigHistory(ctx, o.Brokers, o.Topics, PartitionOf(sc, partitions))
		if err != nil {
			return nil, err
		}
		for _, s := range ExplainScopes(sc, hist) {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// ExplainScopes lists the ledger scopes a request of provider scope scope
// may be a record of, by the config history hist: scope itself (not
// split, or before a split), then the sub-scopes "<scope>#<i>" of every
// applied document that splits it, in index order, each once.
func ExplainScopes(scope string, hist []ConfigEntry) []string {
	out := []string{scope}
	for _, e := range hist {
		if e.Refused != "" {
			continue
		}
		lc, err := ledger.ParseConfig(e.Change.Ledger)
		if err != nil {
			continue // the ledger refused it too: it splits nothing
		}
		if n := lc.ScopePartitions(scope); n > 1 {
			for i := range n {
				if sub := ledger.SubScope(scope, i); !slices.Contains(out, sub) {
					out = append(out, sub)
				}
			}
		}
	}
	return out
}

// errFound stops a scan at the record looked for.
var errFound = errors.New("found")

// findFirstInput returns the offset of the request's first input in
// partition p at or after FromMs, or -1.
func findFirstInput(ctx context.Context, adm *kadm.Client, o ExplainOptions, p int32) (int64, error) {
	from := kgo.NewOffset().AtStart()
	if o.FromMs > 0 {
		offs, err := adm.ListOffsetsAfterMilli(ctx, o.FromMs, o.Topics.Requests)
		if err != nil {
			return -1, fmt.Errorf("offsets after %d ms: %w", o.FromMs, err)
		}
		if r, ok := offs.Lookup(o.Topics.Requests, p); ok && r.Err == nil {
			from = kgo.NewOffset().At(r.Offset)
		}
	}
	// Every record is decoded as the ledger decodes it: a byte filter on
	// `"request_id":"…"` missed inputs whose JSON spelled it otherwise
	// (a space, an escaped character), which the ledger applied all the
	// same.
	found := int64(-1)
	var ev schemas.Event
	err := ReadPartition(ctx, o.Brokers, o.Topics.Requests, p, from, -1, func(r *kgo.Record) error {
		if decodeInput(r.Value, &ev) == nil && ev.RequestID == o.RequestID {
			found = r.Offset
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return -1, err
	}
	return found, nil
}

// explainPartition replays partition p through an Explainer of the
// request whose first input is at offset first.
func explainPartition(ctx context.Context, o ExplainOptions, p int32, first int64) (*ledger.Explanation, error) {
	l := ledger.New(p, ledger.Config{})
	from := kgo.NewOffset().AtStart()
	snap, err := LatestSnapshot(ctx, o.Brokers, o.Topics, p)
	if err != nil {
		return nil, err
	}
	if snap != nil && snap.InputOffset <= first {
		if l, err = ledger.Restore(snap.State); err != nil {
			return nil, fmt.Errorf("partition %d: restore snapshot: %w", p, err)
		}
		from = kgo.NewOffset().At(snap.InputOffset)
	}
	x := ledger.NewExplainer(l, o.RequestID)
	var outs []ledger.Output
	var ev schemas.Event
	lastMs := int64(-1)
	err = ReadPartition(ctx, o.Brokers, o.Topics.Requests, p, from, -1, func(r *kgo.Record) error {
		if r.Offset < l.Offset() {
			return nil
		}
		_ = decodeInput(r.Value, &ev)
		n := len(x.Explanation().Steps)
		outs = x.Apply(r.Timestamp.UnixMilli(), r.Offset, &ev, outs[:0])
		if len(x.Explanation().Steps) > n {
			lastMs = l.NowMs()
		}
		if lastMs >= 0 && l.NowMs() > lastMs+o.AfterMs {
			return errFound // long past the request's last step: done
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return nil, err
	}
	return x.Explanation(), nil
}
