package ledgerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// refuse builds the broker's answer to a request of the ledger's
// transactional producer, with every error code in it set to code, or
// reports that req is not one (a plain producer's produce, another key).
func refuse(req kmsg.Request, code int16) (kmsg.Response, bool) {
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		if r.TransactionID == nil {
			return nil, false // the test's producer or the tick producer
		}
		return testenv.RefuseProduce(r, code), true
	case *kmsg.TxnOffsetCommitRequest:
		return testenv.RefuseTxnOffsetCommit(r, code), true
	case *kmsg.EndTxnRequest:
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = code
		return resp, true
	case *kmsg.InitProducerIDRequest:
		if r.TransactionalID == nil {
			return nil, false // an idempotent producer's
		}
		resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = code
		return resp, true
	case *kmsg.AddOffsetsToTxnRequest:
		resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
		resp.ErrorCode = code
		return resp, true
	}
	return nil, false
}

// fatalRig is a kfake cluster with a ledger member running on it, a
// producer of reserves and a read_committed reader of decisions.
type fatalRig struct {
	t       *testing.T
	rig     *kfakeRig
	svc     *Service
	loopErr chan error
	reg     *prometheus.Registry
	cons    *kgo.Client
	// perRequest and ids count committed decisions by request and by
	// decision id.
	perRequest, ids map[string]int
	sent            int
}

func newFatalRig(t *testing.T, ctx context.Context, prefix string, cfg Config, beforeStart func(*fatalRig)) *fatalRig {
	t.Helper()
	f := &fatalRig{t: t, rig: newKfakeRig(t, ctx, prefix, 2, benchLedgerConfig), reg: prometheus.NewRegistry(),
		loopErr: make(chan error, 1), perRequest: map[string]int{}, ids: map[string]int{}}
	if beforeStart != nil {
		beforeStart(f)
	}
	cfg.Brokers, cfg.Topics, cfg.Group, cfg.Registerer = f.rig.brokers, f.rig.names, prefix+"ledger", f.reg
	cfg.Node = "fatal-a"
	var w io.Writer = io.Discard
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		w = os.Stderr // the member's account of a failing case
	}
	cfg.Log = slog.New(slog.NewTextHandler(w, nil))
	var err error
	if f.svc, err = New(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	go func() { f.loopErr <- f.svc.Loop(lctx) }()
	t.Cleanup(func() {
		stop()
		<-f.loopErr
		f.svc.Close()
	})
	f.cons, err = kgo.NewClient(kgo.SeedBrokers(f.rig.brokers...), kgo.ConsumeTopics(f.rig.names.Decisions),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.cons.Close)
	return f
}

// send appends n reserves over four scopes (both partitions).
func (f *fatalRig) send(ctx context.Context, n int) {
	f.t.Helper()
	for range n {
		scope := fmt.Sprintf("scope-%d", f.sent%4)
		ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
		ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = fmt.Sprintf("req-%03d", f.sent), 1, "gw", scope, "t", "k-"+scope, "interactive"
		ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "key", ID: "k-" + scope}}, InputTokens: 10, OutputTokens: 10}
		b, err := schemas.Encode(ev)
		if err != nil {
			f.t.Fatal(err)
		}
		if err := f.rig.cl.ProduceSync(ctx, &kgo.Record{Topic: f.rig.names.Requests, Key: []byte(scope), Value: b}).FirstErr(); err != nil {
			f.t.Fatal(err)
		}
		f.sent++
	}
}

// awaitDecided reads committed decisions until every request sent has one,
// and fails if a decision was committed twice.
func (f *fatalRig) awaitDecided(ctx context.Context) {
	f.t.Helper()
	for len(f.perRequest) < f.sent && ctx.Err() == nil {
		f.cons.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			var ev schemas.Event
			if schemas.Decode(r.Value, &ev) == nil && ev.Decision != nil {
				f.perRequest[ev.RequestID]++
				f.ids[ev.ID]++
			}
		})
	}
	if len(f.perRequest) != f.sent {
		f.t.Fatalf("%d of %d requests decided", len(f.perRequest), f.sent)
	}
	for id, n := range f.ids {
		if n != 1 {
			f.t.Errorf("decision %s committed %d times", id, n)
		}
	}
}

// TestFatalErrorRecreatesSession injects, for each request of a
// transaction and each error code after which franz-go's producer cannot go
// on, one refusal by the broker. The member recreates its session, rejoins
// and rebuilds, and decisions flow again: every request sent before and
// after is decided, each decision committed once. Before, a fenced
// producer failed every Begin for good while the member kept its
// partitions (D1).
func TestFatalErrorRecreatesSession(t *testing.T) {
	for _, tc := range []struct {
		key     kmsg.Key
		code    *kerr.Error
		atStart bool // the request is only sent when the session starts
	}{
		{kmsg.EndTxn, kerr.ProducerFenced, false},
		{kmsg.EndTxn, kerr.InvalidProducerEpoch, false},
		{kmsg.EndTxn, kerr.InvalidTxnState, false},
		{kmsg.EndTxn, kerr.TransactionalIDAuthorizationFailed, false},
		{kmsg.Produce, kerr.ProducerFenced, false},
		{kmsg.Produce, kerr.InvalidProducerEpoch, false},
		{kmsg.Produce, kerr.TransactionalIDAuthorizationFailed, false},
		{kmsg.TxnOffsetCommit, kerr.ProducerFenced, false},
		{kmsg.TxnOffsetCommit, kerr.GroupAuthorizationFailed, false},
		{kmsg.InitProducerID, kerr.ProducerFenced, true},
		{kmsg.InitProducerID, kerr.TransactionalIDAuthorizationFailed, true},
		{kmsg.InitProducerID, kerr.ClusterAuthorizationFailed, true},
	} {
		t.Run(tc.key.Name()+"/"+tc.code.Message, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var fired atomic.Int32
			inject := func(f *fatalRig) {
				f.rig.c.ControlKey(int16(tc.key), func(req kmsg.Request) (kmsg.Response, error, bool) {
					resp, ok := refuse(req, tc.code.Code)
					if ok {
						fired.Add(1)
					}
					return resp, nil, ok
				})
			}
			var f *fatalRig
			if tc.atStart {
				f = newFatalRig(t, ctx, "fataltest.", Config{}, inject)
			} else {
				f = newFatalRig(t, ctx, "fataltest.", Config{}, nil)
				f.send(ctx, 12)
				f.awaitDecided(ctx) // the member works
				inject(f)
			}
			f.send(ctx, 12)
			f.awaitDecided(ctx)
			if n := fired.Load(); n != 1 {
				t.Fatalf("the broker refused %d requests, want 1", n)
			}
			if n := testutil.ToFloat64(f.svc.m.recreates); n < 1 {
				t.Errorf("session recreated %v times, want at least 1", n)
			}
			// Recreated on the error itself, not by the abort budget
			// (Config.AbortsMax) that catches errors classify misses.
			if n := testutil.ToFloat64(f.svc.m.aborts); n > 2 {
				t.Errorf("%v transactions aborted before the session was recreated, want at most 2", n)
			}
			if err := f.svc.Health().Check(time.Now()); err != nil {
				t.Errorf("health after recovering: %v", err)
			}
		})
	}
}

// TestFatalErrorForeverExits: when every new session fails the same way
// (the broker refuses the transactional id for good), the member gives up
// after Config.RecreateAttempts sessions, has left the group, reports
// ErrSessionUnusable for its process to exit non-zero, and its health says
// why.
func TestFatalErrorForeverExits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var fired atomic.Int32
	f := newFatalRig(t, ctx, "fatalexit.", Config{RecreateAttempts: 2}, func(f *fatalRig) {
		c := f.rig.c
		c.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			resp, ok := refuse(req, kerr.TransactionalIDAuthorizationFailed.Code)
			if ok {
				fired.Add(1)
			}
			return resp, nil, ok
		})
	})
	f.send(ctx, 4)
	var err error
	select {
	case err = <-f.loopErr:
		f.loopErr <- err // for the cleanup
	case <-ctx.Done():
		t.Fatal("the member never gave up")
	}
	if !errors.Is(err, ErrSessionUnusable) || !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		t.Fatalf("loop ended with %v, want ErrSessionUnusable of TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
	}
	if n := fired.Load(); n != 3 {
		t.Errorf("InitProducerID refused %d times, want 3 (the first session and 2 recreated)", n)
	}
	if herr := f.svc.Health().Check(time.Now()); !errors.Is(herr, ErrSessionUnusable) {
		t.Errorf("health = %v, want ErrSessionUnusable", herr)
	}
	// The member has left the group: nobody holds its partitions.
	g, err := f.rig.adm.DescribeGroups(ctx, "fatalexit.ledger")
	if err != nil {
		t.Fatal(err)
	}
	if d := g["fatalexit.ledger"]; len(d.Members) != 0 {
		t.Errorf("group still has %d members after the member gave up", len(d.Members))
	}
}
