package ledgerd

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
)

// kfakeRig is an in-process one-broker cluster holding Sluice's topics:
// the fast unit tests' stand-in for the broker (the integration tests use
// the real one).
type kfakeRig struct {
	c       *kfake.Cluster // for request hooks (ControlKey)
	brokers []string
	names   bus.Names
	cl      *kgo.Client // an ordinary client on the rig, for admin requests and produces
	adm     *kadm.Client
	topics  bus.TopicsConfig
}

// newKfakeRig creates the topics (prefix, request partitions) and, with
// config, publishes it as the ledger's first ConfigChanged. Everything is
// closed when the test ends. opts are the client's extra options.
func newKfakeRig(t *testing.T, ctx context.Context, prefix string, partitions int32, config string, opts ...kgo.Opt) *kfakeRig {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := &kfakeRig{c: c, brokers: c.ListenAddrs(), names: bus.NamesWithPrefix(prefix)}
	if r.cl, err = bus.NewClient(ctx, r.brokers, 10*time.Second, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.cl.Close)
	r.adm = kadm.NewClient(r.cl)
	r.topics = bus.DefaultTopics()
	r.topics.RequestPartitions, r.topics.Names = partitions, r.names
	if _, err := bus.Ensure(ctx, r.adm, r.topics.Specs()); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := PublishConfig(ctx, r.brokers, r.names, []byte(config), "test"); err != nil {
			t.Fatal(err)
		}
	}
	return r
}
