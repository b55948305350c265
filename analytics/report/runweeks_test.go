package report

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/analytics"
)

// weeksSource fails one query of the previous week and holds this week's
// same query until the run is cancelled, as a server does when the other
// week's query has failed.
type weeksSource struct{ prev analytics.Range }

func (weeksSource) Concurrent() bool { return true }

func (w weeksSource) Run(ctx context.Context, q analytics.Query, r analytics.Range) (*analytics.Result, error) {
	if q.Name != "retry_amplification" {
		return &analytics.Result{}, nil
	}
	if r == w.prev {
		return nil, errors.New("code: 241, Memory limit (for query) exceeded")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestRunWeeksReportsTheCauseNotTheCancellation: the week that failed
// first names the error; the other week's cancellation does not hide it.
func TestRunWeeksReportsTheCauseNotTheCancellation(t *testing.T) {
	cur := analytics.Range{From: time.Unix(1795392000, 0), To: time.Unix(1795996800, 0)}
	prev := analytics.Range{From: time.Unix(1794787200, 0), To: cur.From}
	_, _, err := runWeeks(context.Background(), weeksSource{prev: prev}, cur, prev, nil)
	if err == nil || !strings.Contains(err.Error(), "Memory limit") {
		t.Fatalf("err = %v, want the previous week's memory error", err)
	}
}
