package bus

import (
	"math/rand/v2"
	"time"
)

// Bounds of RetryBackoff: those of Kafka's Java client (retry.backoff.ms,
// retry.backoff.max.ms, KIP-580), not franz-go's 250 ms and 5 s.
const (
	RetryBackoffMin = 100 * time.Millisecond
	RetryBackoffMax = time.Second
)

// RetryBackoff is a kgo.RetryBackoffFn: RetryBackoffMin doubled per
// consecutive failure, ±20 % jitter, at most RetryBackoffMax.
//
// franz-go's default doubles from 250 ms up to 5 s, and it is the wait of
// every stage that retries: the group management loop's rejoin after
// connection refusals, a JoinGroup or InitProducerID answered
// NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS while a restarted broker
// loads its coordinators. After a broker restart each of those stages had
// backed off to seconds by the time the broker could serve it, and a
// member took one such wait per stage before its first decision (issue 19,
// docs/ledger-service.md, Broker restart). With a 1 s cap each stage
// starts at most about a second after the broker can serve it, at the cost
// of one dial or one refused request per second per client while the
// broker is away. The number of tries (kgo.RequestRetries, 20) and the
// retry timeouts are unchanged; a request that runs out of them fails with
// the broker's retriable error, which the callers retry (errclass.go).
func RetryBackoff(fails int) time.Duration {
	if fails < 1 {
		fails = 1
	}
	d := RetryBackoffMax
	if fails <= 10 { // 100 ms << 9 is past the cap already
		d = RetryBackoffMin << (fails - 1)
	}
	d = time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
	return min(d, RetryBackoffMax)
}
