package ledgerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClassify: every error the session can return, as franz-go wraps it,
// has the class that decides what the member does.
func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want errClass
	}{
		// D1: Begin after the broker bumped the epoch of a transaction it
		// timed out during a freeze.
		{"begin after a fence", fmt.Errorf("producer ID has a fatal, unrecoverable error, err: %w", kerr.ProducerFenced), errFatal},
		{"fenced", kerr.ProducerFenced, errFatal},
		{"invalid producer epoch", kerr.InvalidProducerEpoch, errFatal},
		{"invalid producer id mapping", kerr.InvalidProducerIDMapping, errFatal},
		{"invalid txn state", kerr.InvalidTxnState, errFatal},
		{"txn id authorization", kerr.TransactionalIDAuthorizationFailed, errFatal},
		{"cluster authorization", kerr.ClusterAuthorizationFailed, errFatal},
		{"group authorization in a poll", &kgo.ErrGroupSession{Err: kerr.GroupAuthorizationFailed}, errFatal},
		{"topic authorization", kerr.TopicAuthorizationFailed, errFatal},
		{"coordinator fenced", kerr.TransactionCoordinatorFenced, errFatal},
		{"fenced instance id", kerr.FencedInstanceID, errFatal},
		{"unsupported version", kerr.UnsupportedVersion, errFatal},
		{"client closed", kgo.ErrClientClosed, errFatal},
		{"wrapped fatal", fmt.Errorf("end: %w", fmt.Errorf("commit: %w", kerr.ProducerFenced)), errFatal},
		// franz-go re-initialises the producer id itself for these.
		{"unknown producer id", kerr.UnknownProducerID, errAbortable},
		{"transaction abortable", kerr.TransactionAbortable, errAbortable},
		{"rebalance in progress", kerr.RebalanceInProgress, errAbortable},
		{"illegal generation", kerr.IllegalGeneration, errAbortable},
		{"message too large", kerr.MessageTooLarge, errAbortable},
		{"record retries", kgo.ErrRecordRetries, errAbortable},
		{"record timeout", kgo.ErrRecordTimeout, errAbortable},
		{"aborting", kgo.ErrAborting, errAbortable},
		{"unknown error", errors.New("something else"), errAbortable},
		// Not retriable to kerr; a TxnOffsetCommit refused with it aborts
		// (TestAbortReproducesWithoutRebuild).
		{"concurrent transactions", kerr.ConcurrentTransactions, errAbortable},
		{"not coordinator", kerr.NotCoordinator, errRetriable},
		{"coordinator loading", kerr.CoordinatorLoadInProgress, errRetriable},
		{"request timed out", kerr.RequestTimedOut, errRetriable},
		{"connection dropped", fmt.Errorf("read: %w", io.EOF), errRetriable},
		{"deadline", context.DeadlineExceeded, errRetriable},
		{"canceled", context.Canceled, errRetriable},
	} {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("%s: classify(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
