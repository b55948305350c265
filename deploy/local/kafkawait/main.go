// Command kafkawait waits until a Kafka broker answers a metadata request.
//
// It is used by deploy/local/kafka.sh to detect when the local broker is ready.
// Exit status 0 means a metadata response was received before the timeout.
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
	flag.Parse()

	if err := wait(strings.Split(*brokers, ","), *timeout, *quiet); err != nil {
		fmt.Fprintln(os.Stderr, "kafkawait:", err)
		os.Exit(1)
	}
}

func wait(seeds []string, timeout time.Duration, quiet bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	var lastErr error
	for {
		resp, err := metadata(ctx, seeds)
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
func metadata(ctx context.Context, seeds []string) (*kmsg.MetadataResponse, error) {
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
