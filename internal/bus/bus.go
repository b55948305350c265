// Package bus holds what every Sluice service needs to talk to Kafka: the
// topic names and their settings, client construction that fails with a
// clear, actionable message, and `topics ensure`.
package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Names are the topic names of one Sluice installation. sluice.requests is
// the ledger's only input, keyed by provider scope; decisions go to
// sluice.decisions; the ledger's state snapshots to the compacted
// sluice.snapshots; analytics-only events (Dispatched, Outcome) to
// sluice.telemetry. A prefix lets several installations (or test runs)
// share one cluster.
type Names struct {
	Requests, Decisions, Snapshots, Telemetry string
	// Admin is the admin API's compacted topic: the newest admin state
	// (tenants, keys, partners, limits) that every gateway follows. It is
	// not in All(): the sink copies All() to analytics, and this topic
	// holds key hashes and partner token hashes.
	Admin string
	// Members is the ledger members' heartbeat topic (services/ledgerd
	// liveness.go): how a crashed member is found within a second. Not in
	// All(): it is no event log.
	Members string
}

// DefaultNames are the production topic names.
func DefaultNames() Names { return NamesWithPrefix("") }

// NamesWithPrefix prepends prefix to every default name.
func NamesWithPrefix(prefix string) Names {
	return Names{
		Requests:  prefix + "sluice.requests",
		Decisions: prefix + "sluice.decisions",
		Snapshots: prefix + "sluice.snapshots",
		Telemetry: prefix + "sluice.telemetry",
		Admin:     prefix + "sluice.admin",
		Members:   prefix + "sluice.ledger.members",
	}
}

// OrDefault returns n, or the default names if n is the zero value.
func (n Names) OrDefault() Names {
	if n == (Names{}) {
		return DefaultNames()
	}
	return n
}

// All lists every topic.
func (n Names) All() []string { return []string{n.Requests, n.Decisions, n.Snapshots, n.Telemetry} }

// Created lists every topic that Ensure creates, the admin topic included:
// what a test or a bench deletes when it is done with its prefix.
func (n Names) Created() []string { return append(n.All(), n.Admin, n.Members) }

// SplitBrokers turns "a:1,b:2" into a seed list.
func SplitBrokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// NewClient creates a client with the security installed by Configure and
// checks within timeout that the cluster answers a metadata request, so
// that an unreachable broker (or refused credentials) is reported at
// start, once and clearly, instead of as endless retries later.
func NewClient(ctx context.Context, brokers []string, timeout time.Duration, opts ...kgo.Opt) (*kgo.Client, error) {
	if len(brokers) == 0 {
		return nil, errors.New("no Kafka brokers given (set --brokers or SLUICE_KAFKA_BROKERS)")
	}
	cl, err := kgo.NewClient(Opts(brokers, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", strings.Join(brokers, ","), err)
	}
	if err := Ping(ctx, cl, timeout); err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka at %s unreachable: %w (start a local broker with `make up`, or point --brokers / SLUICE_KAFKA_BROKERS at a running one)", strings.Join(brokers, ","), err)
	}
	return cl, nil
}

// Ping issues one metadata request, bounded by timeout.
func Ping(ctx context.Context, cl *kgo.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // no topics: just the brokers
	var last error
	for {
		_, err := req.RequestWith(ctx, cl)
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			if last != nil {
				return last
			}
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
