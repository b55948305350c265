package ledgerd

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
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
	k := testenv.Kfake(t, ctx, prefix, partitions, opts...)
	r := &kfakeRig{c: k.Cluster, brokers: k.Brokers, names: k.Names, cl: k.Client, adm: k.Admin, topics: k.Topics}
	if config != "" {
		if err := PublishConfig(ctx, r.brokers, r.names, []byte(config), "test"); err != nil {
			t.Fatal(err)
		}
	}
	return r
}
