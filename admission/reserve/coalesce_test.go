package reserve

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// TestReconcileLingerBound: a linger above the bound is refused before
// any connection, with the reason; within it, and off, are accepted by
// the check (the connection is another matter).
func TestReconcileLingerBound(t *testing.T) {
	_, err := New(context.Background(), Config{Node: "gw", Brokers: []string{"127.0.0.1:1"}, ReconcileLinger: time.Second})
	if err == nil || !strings.Contains(err.Error(), "reconcile linger") {
		t.Fatalf("New with a 1 s linger = %v, want the bound's error", err)
	}
}

// TestWhatWaitsForARide: only a Reconciled and its ProviderObserved wait;
// a Released, a ProviderRejected and the reserves go at once, and nothing
// waits with the linger off.
func TestWhatWaitsForARide(t *testing.T) {
	for _, tc := range []struct {
		typ    schemas.Type
		linger time.Duration
		waits  bool
	}{
		{schemas.TypeReconciled, DefaultReconcileLinger, true},
		{schemas.TypeProviderObserved, DefaultReconcileLinger, true},
		{schemas.TypeReleased, DefaultReconcileLinger, false},
		{schemas.TypeProviderRejected, DefaultReconcileLinger, false},
		{schemas.TypeReserveRequested, DefaultReconcileLinger, false},
		{schemas.TypeHeartbeat, DefaultReconcileLinger, false},
		{schemas.TypeReconciled, -1, false},
	} {
		co := coalescer{linger: tc.linger}
		if got := co.waits(&schemas.Event{Type: tc.typ}); got != tc.waits {
			t.Errorf("%s with linger %v: waits %v, want %v", tc.typ, tc.linger, got, tc.waits)
		}
	}
}
