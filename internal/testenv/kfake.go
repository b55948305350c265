package testenv

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
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
