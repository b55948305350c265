package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestQueuesReportsDepthAndOldestWait: two requests wait behind a full
// bucket; the stats count them in their class and age the oldest in log time.
func TestQueuesReportsDepthAndOldestWait(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"scopes":[{"name":"s","buckets":[
	  {"level":"key","id":"*","dimension":"requests","capacity":1,"period_ms":60000,"window_ms":60000}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	l := New(0, cfg)
	reserve := func(off, at int64, id string) {
		ev := &schemas.Event{V: 1, Type: schemas.TypeReserveRequested, ID: id, RequestID: id, Attempt: 1, Scope: "s", Class: "batch",
			ReserveRequested: &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "key", ID: "k"}}, InputTokens: 1, OutputTokens: 1}}
		l.Apply(at, off, ev, nil)
	}
	reserve(0, 1000, "a") // granted: takes the only unit
	reserve(1, 1100, "b") // queued
	reserve(2, 1300, "c") // queued
	var got QueueStat
	for _, q := range l.Queues(nil) {
		if q.Class == "batch" {
			got = q
		}
	}
	if got.Depth != 2 || got.OldestWaitMs != 200 {
		t.Fatalf("batch queue = %+v, want depth 2, oldest wait 200 ms", got)
	}
}
