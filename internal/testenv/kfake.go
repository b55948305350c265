package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/internal/bus"
)

// FreezeProduce holds every produce request cluster gets until the returned
// thaw is called (any number of times): the broker accepts the connection
// and the request and does not answer, as a SIGSTOPped broker does. It is
// the in-process freeze; StartPrivateBroker gives a real broker to stop.
func FreezeProduce(cluster *kfake.Cluster) (thaw func()) {
	ice := make(chan struct{})
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		select {
		case <-ice:
			return nil, nil, false
		default:
		}
		cluster.SleepControl(func() { <-ice })
		return nil, nil, false
	})
	var once sync.Once
	return func() { once.Do(func() { close(ice) }) }
}

// RefuseProduce is the broker's answer to req with every partition refused
// with the error code.
func RefuseProduce(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// RefuseTxnOffsetCommit is the broker's answer to req with every
// partition's offset commit refused with the error code.
func RefuseTxnOffsetCommit(req *kmsg.TxnOffsetCommitRequest, code int16) *kmsg.TxnOffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// KfakeRig is an in-process one-broker kfake cluster holding Sluice's
// topics: the fast unit tests' stand-in for the broker (the integration
// tests use the real one).
type KfakeRig struct {
	Cluster *kfake.Cluster // for request hooks (ControlKey)
	Brokers []string
	Names   bus.Names
	Client  *kgo.Client // an ordinary client on the rig, for admin requests and produces
	Admin   *kadm.Client
	Topics  bus.TopicsConfig
}

// Kfake starts the cluster and creates the topics, named with prefix
// ("" for the default names), with partitions request partitions (0 for
// the default); opts are the client's extra options. Everything is closed
// when the test ends.
func Kfake(t testing.TB, ctx context.Context, prefix string, partitions int32, opts ...kgo.Opt) *KfakeRig {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := &KfakeRig{Cluster: c, Brokers: c.ListenAddrs(), Names: bus.NamesWithPrefix(prefix), Topics: bus.DefaultTopics()}
	if r.Client, err = bus.NewClient(ctx, r.Brokers, 10*time.Second, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Client.Close)
	r.Admin = kadm.NewClient(r.Client)
	r.Topics.Names = r.Names
	if partitions > 0 {
		r.Topics.RequestPartitions = partitions
	}
	if _, err := bus.Ensure(ctx, r.Admin, r.Topics.Specs()); err != nil {
		t.Fatal(err)
	}
	return r
}
