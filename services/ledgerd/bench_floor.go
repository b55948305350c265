package ledgerd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/admission/reserve"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
)

// Floor is the same admission round trip with the ledger member replaced by
// an echo (--floor): a plain consumer of the requests topic that answers
// every reserve with a grant, produced unlingered and outside any
// transaction to the asking gateway's decisions partition. It is what the
// Kafka hops alone cost on this broker and machine — two produces and two
// fetches — and so the least any Kafka-mediated decision can take, whatever
// the ledger does.
type Floor struct {
	Sequential RoundTrip   `json:"sequential"`
	RoundTrips []RoundTrip `json:"round_trips"`
}

// Sequential is the closed-loop round trip of one client sending its next
// reserve when the last decision arrived: the regime of a gateway's
// added latency at one client.
func sequential(ctx context.Context, rc *reserve.Client, n int, prefix string) RoundTrip {
	lat := make([]float64, 0, n)
	errs := 0
	start := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		ev := benchReserve(fmt.Sprintf("%s-%d", prefix, i))
		t0 := time.Now()
		dec, err := rc.Reserve(ctx, ev)
		el := time.Since(t0)
		if err != nil || dec.Status != schemas.StatusGranted {
			errs++
			continue
		}
		lat = append(lat, float64(el.Microseconds())/1000)
	}
	return tripStats(lat, errs, time.Since(start))
}

// benchFloor runs the sequential and open-loop round trips against the
// echo on fresh topics.
func benchFloor(ctx context.Context, o KafkaBenchOptions, seqN int) (*Floor, error) {
	names, cleanup, err := benchTopics(ctx, o.Brokers, 4)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	ectx, stop := context.WithCancel(ctx)
	echoErr := make(chan error, 1)
	ready := make(chan struct{})
	go func() { echoErr <- echo(ectx, o.Brokers, names, ready) }()
	defer func() { stop(); <-echoErr }()
	select {
	case <-ready:
	case err := <-echoErr:
		return nil, err
	}
	rc, err := benchClient(ctx, o.Brokers, names, "floor warm")
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	f := &Floor{}
	fmt.Fprintf(o.Progress, "floor: %d sequential round trips…\n", seqN)
	f.Sequential = sequential(ctx, rc, seqN, "fseq")
	for _, rate := range o.Rates {
		fmt.Fprintf(o.Progress, "floor: round trip at %d req/s for %v…\n", rate, o.Duration)
		f.RoundTrips = append(f.RoundTrips, roundTrips(ctx, rc, rate, o.Duration, nil))
	}
	return f, nil
}

// echo grants every reserve it reads on names.Requests until ctx ends. It
// closes ready after its first poll.
func echo(ctx context.Context, brokers []string, names bus.Names, ready chan<- struct{}) error {
	probe, err := bus.NewClient(ctx, brokers, 10*time.Second)
	if err != nil {
		return err
	}
	parts, err := bus.PartitionCount(ctx, probe, names.Decisions)
	probe.Close()
	if err != nil {
		return err
	}
	cl, err := bus.NewClient(ctx, brokers, 10*time.Second,
		kgo.ConsumeTopics(names.Requests),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), // fresh topics: nothing is missed
		kgo.FetchMaxWait(10*time.Millisecond),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	var once sync.Once
	var ev schemas.Event
	for {
		pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		once.Do(func() { close(ready) })
		var perr error
		fs.EachRecord(func(r *kgo.Record) {
			if perr != nil || schemas.Decode(r.Value, &ev) != nil || ev.Type != schemas.TypeReserveRequested {
				return
			}
			d := schemas.Decision{Status: schemas.StatusGranted, GatewayDecision: schemas.GDAdmitted,
				InputPartition: r.Partition, InputOffset: r.Offset, LogTimeMs: r.Timestamp.UnixMilli()}
			out := &schemas.Event{V: schemas.Version, Type: schemas.TypeDecision, ID: fmt.Sprintf("d-%d-%d-0", r.Partition, r.Offset),
				ProducedAtMs: d.LogTimeMs, RequestID: ev.RequestID, Attempt: ev.Attempt, Node: ev.Node, Scope: ev.Scope, Decision: &d}
			b, err := schemas.Encode(out)
			if err != nil {
				perr = err
				return
			}
			cl.Produce(ctx, &kgo.Record{Topic: names.Decisions, Partition: bus.DecisionPartition(ev.Node, parts), Key: []byte(ev.Scope), Value: b}, nil)
		})
		if perr != nil {
			return fmt.Errorf("floor echo: %w", perr)
		}
	}
}
