package ledger

import (
	"encoding/json"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

func TestLevelsObserveWithoutChanging(t *testing.T) {
	cfg := Config{Scopes: []ScopeConfig{{Name: "s", Buckets: []BucketConfig{
		{Level: LevelTenant, ID: "*", Dimension: schemas.DimRequests, Capacity: 60, PeriodMs: 60_000, WindowMs: 60_000},
		{Level: LevelTenant, ID: "*", Dimension: schemas.DimRequestsPerDay, Capacity: 1000},
		{Level: LevelTenant, ID: "*", Dimension: schemas.DimSpend, Capacity: 500},
		{Level: LevelKey, ID: "*", Dimension: schemas.DimConcurrency, Capacity: 4},
	}}}}
	cfg.fillDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l := New(0, cfg)
	cc, _ := json.Marshal(cfg)
	var out []Output
	out = l.Apply(1_000, 0, &schemas.Event{V: 1, Type: schemas.TypeConfigChanged, ID: "c", ConfigChanged: &schemas.ConfigChanged{Ledger: cc}}, out[:0])
	out = l.Apply(1_000, 1, reserve("r1", spend(100)), out[:0])
	if len(out) == 0 || out[0].Event().Decision.Status != schemas.StatusGranted {
		t.Fatalf("reserve: %+v", out)
	}
	before, _ := l.MarshalSnapshot()

	lv, found := l.Levels("s", LevelTenant, "t1", 31_000)
	if !found {
		t.Fatal("tenant node not found")
	}
	got := map[schemas.Dimension]BucketLevel{}
	for _, b := range lv {
		got[b.Dimension] = b
	}
	// 60/min: one taken at 1 s, 30 s of refill gives back half a minute's
	// worth, capped at the capacity: the bucket is full again.
	if b := got[schemas.DimRequests]; b.Remaining != 60 || b.FullAtMs != 0 {
		t.Errorf("requests %+v", b)
	}
	if b := got[schemas.DimRequestsPerDay]; b.Remaining != 999 || b.FullAtMs != 86_400_000 {
		t.Errorf("requests_per_day %+v, want 999 left and full at the next day", b)
	}
	if b := got[schemas.DimSpend]; b.Remaining != 400 || b.FullAtMs <= 31_000 {
		t.Errorf("spend %+v", b)
	}
	if lv, _ := l.Levels("s", LevelTenant, "t1", 1_500); lv[0].Remaining != 59 || lv[0].FullAtMs != 2_000 {
		t.Errorf("requests at 1.5 s: %+v, want 59 left, full at 2 s", lv[0])
	}
	if lv, _ := l.Levels("s", LevelKey, "k1", 1_000); len(lv) != 1 || lv[0].Remaining != 3 || lv[0].Refill != RefillConcurrency {
		t.Errorf("key concurrency %+v", lv)
	}
	if _, found := l.Levels("s", LevelTenant, "t2", 1_000); found {
		t.Error("a tenant the ledger never saw was found")
	}
	if !l.HasScope("s") || l.HasScope("other") {
		t.Error("HasScope")
	}
	after, _ := l.MarshalSnapshot()
	if string(before) != string(after) {
		t.Fatal("Levels changed the ledger's state")
	}
}
