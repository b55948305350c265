package ledgerd

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// errClass is what the member does about a failed Kafka operation of its
// transactional session (Begin, a produce, the offset commit, End, a
// fetch).
type errClass uint8

const (
	// errRetriable: transient (a broker unreachable or frozen, a
	// coordinator moving, a deadline): the same session tries again.
	errRetriable errClass = iota
	// errAbortable: the open transaction cannot commit and is aborted;
	// the session survives, and franz-go re-initialises the producer id
	// itself where Kafka allows it (UNKNOWN_PRODUCER_ID,
	// TRANSACTION_ABORTABLE).
	errAbortable
	// errFatal: the session can never commit again (a fenced producer, a
	// producer epoch the broker has bumped, a refused authorization, a
	// closed client). franz-go returns the same error from every later
	// Begin and End, so the member recreates its session, and exits when
	// it cannot (D1: a fenced member kept its partitions for minutes).
	errFatal
)

func (c errClass) String() string {
	switch c {
	case errRetriable:
		return "retriable"
	case errAbortable:
		return "abortable"
	default:
		return "fatal"
	}
}

// fatalCodes are the Kafka errors after which a transactional producer
// cannot go on: franz-go's maybeRecoverProducerID recovers none of them
// under transaction version 2 (Kafka 4's default; only UNKNOWN_PRODUCER_ID
// and TRANSACTION_ABORTABLE are), and an authorization or protocol refusal
// repeats on every retry. INVALID_PRODUCER_EPOCH is recoverable before
// transaction version 2 (KIP-588), but recreating the session is always
// safe, only slower, so it is fatal here whatever the version.
var fatalCodes = []*kerr.Error{
	kerr.ProducerFenced,
	kerr.InvalidProducerEpoch,
	kerr.InvalidProducerIDMapping,
	kerr.InvalidTxnState,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.GroupAuthorizationFailed,
	kerr.TopicAuthorizationFailed,
	kerr.TransactionCoordinatorFenced,
	kerr.FencedInstanceID,
	kerr.InvalidTransactionTimeout,
	kerr.UnsupportedVersion,
	kerr.UnsupportedForMessageFormat,
	kerr.SaslAuthenticationFailed,
	kerr.IllegalSaslState,
	kerr.UnsupportedSaslMechanism,
}

// classify says what err calls for. It reads the Kafka error code inside
// err wherever franz-go wrapped it (Begin's "producer ID has a fatal,
// unrecoverable error, err: PRODUCER_FENCED" wraps the code), then
// franz-go's own view: a retriable code or broker error is transient, a
// record that could not be produced (ErrRecordRetries, ErrRecordTimeout,
// ErrAborting) only aborts its transaction. Anything unrecognised aborts;
// the member's abort budget (Config.AbortsMax) turns an abort that repeats
// forever into a fatal error, so that no unknown error can wedge it.
func classify(err error) errClass {
	switch {
	case err == nil:
		return errRetriable
	case errors.Is(err, kgo.ErrClientClosed):
		return errFatal
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return errRetriable
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		for _, f := range fatalCodes {
			if ke.Code == f.Code {
				return errFatal
			}
		}
		if ke.Retriable {
			return errRetriable
		}
		return errAbortable
	}
	switch {
	case errors.Is(err, kgo.ErrAborting), errors.Is(err, kgo.ErrRecordRetries), errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrMaxBuffered):
		return errAbortable
	case kgo.IsRetryableBrokerErr(err):
		return errRetriable
	}
	return errAbortable
}
