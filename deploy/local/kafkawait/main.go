// Command kafkawait waits until a Kafka broker answers a metadata request.
//
// It is used by deploy/local/kafka.sh to detect when the local broker is ready,
// and by deploy/local/cluster.sh to detect when the three-node cluster is: with
// -min-brokers the answer must list that many brokers, and with -in-sync every
// partition of every topic must have a leader and all its replicas in sync
// (a rolling restart moves to the next node only then, or it could take the
// last in-sync replica of a partition down).
// Exit status 0 means such a metadata response was received before the timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:19092", "comma-separated seed brokers")
	timeout := flag.Duration("timeout", 90*time.Second, "give up after this long")
	quiet := flag.Bool("q", false, "print nothing on success")
	minBrokers := flag.Int("min-brokers", 1, "the answer must list at least this many brokers")
	inSync := flag.Bool("in-sync", false, "also wait until every partition has a leader and every replica in sync")
	flag.Parse()

	w := want{minBrokers: *minBrokers, inSync: *inSync}
	if err := wait(strings.Split(*brokers, ","), *timeout, *quiet, w); err != nil {
		fmt.Fprintln(os.Stderr, "kafkawait:", err)
		os.Exit(1)
	}
}

// want is what a metadata answer must show to count as ready.
type want struct {
	minBrokers int
	inSync     bool
}

// check returns why resp is not ready yet, or nil.
func (w want) check(resp *kmsg.MetadataResponse) error {
	if len(resp.Brokers) < w.minBrokers {
		return fmt.Errorf("metadata lists %d broker(s), want %d", len(resp.Brokers), w.minBrokers)
	}
	if !w.inSync {
		return nil
	}
	behind := 0
	first := ""
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 && p.Leader >= 0 && len(p.ISR) == len(p.Replicas) {
				continue
			}
			if behind == 0 {
				first = fmt.Sprintf("%s/%d: leader %d, isr %v of replicas %v, error code %d", deref(t.Topic), p.Partition, p.Leader, p.ISR, p.Replicas, p.ErrorCode)
			}
			behind++
		}
	}
	if behind > 0 {
		return fmt.Errorf("%d partition(s) not fully in sync, e.g. %s", behind, first)
	}
	return nil
}

func wait(seeds []string, timeout time.Duration, quiet bool, w want) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	var lastErr error
	for {
		resp, err := metadata(ctx, seeds, w.inSync)
		if err == nil {
			err = w.check(resp)
		}
		if err == nil {
			if !quiet {
				fmt.Printf("kafka ready: cluster %s, controller %d, %d broker(s)\n",
					deref(resp.ClusterID), resp.ControllerID, len(resp.Brokers))
			}
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("no metadata response from %s within %s: %v",
				strings.Join(seeds, ","), timeout, lastErr)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// metadata issues one metadata request with a fresh client, so that a broker
// that was not listening yet is dialed again on the next attempt.
// With allTopics it asks for every topic (for the in-sync check), else for
// none (cluster metadata only).
func metadata(ctx context.Context, seeds []string, allTopics bool) (*kmsg.MetadataResponse, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.DialTimeout(2*time.Second),
		kgo.RequestRetries(0),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()

	reqCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()

	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // no topics: cluster metadata only
	if allTopics {
		req.Topics = nil // nil: every topic
	}
	raw, err := cl.Request(reqCtx, req)
	if err != nil {
		return nil, err
	}
	kresp, ok := raw.(*kmsg.MetadataResponse)
	if !ok {
		return nil, fmt.Errorf("unexpected response type %T", raw)
	}
	if len(kresp.Brokers) == 0 {
		return nil, fmt.Errorf("metadata response lists no brokers yet")
	}
	return kresp, nil
}

func deref(s *string) string {
	if s == nil {
		return "?"
	}
	return *s
}
