package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

const usageYAML = `providers:
  - {name: p, kind: openai, scope: s, base_url: "http://127.0.0.1:1/v1"}
routes:
  - {model: m, provider: p}
tenants:
  - id: t
    org: shared-org
    keys:
      - {id: k, sha256: KEYT, team: x}
  - id: u
    org: shared-org
    paused: true
    keys:
      - {id: k2, sha256: KEYU}
ledger:
  scopes:
    - name: s
      buckets:
        - {level: org, id: shared-org, dimension: requests, capacity: 6000}
        - {level: tenant, id: "*", dimension: requests, capacity: 600}
        - {level: tenant, id: t, dimension: requests_per_day, capacity: 1000}
        - {level: tenant, id: u, dimension: requests_per_day, capacity: 7}
        - {level: key, id: "*", dimension: concurrency, capacity: 4}
`

// ledgerLevels is a LevelSource over one real ledger, as SnapshotLevels
// is over restored snapshots.
type ledgerLevels struct{ l *ledger.Ledger }

func (s ledgerLevels) Levels(scope, level, id string, atMs int64) ([]ledger.BucketLevel, int64, bool) {
	if !s.l.HasScope(scope) {
		return nil, 0, false
	}
	lv, _ := s.l.Levels(scope, level, id, atMs)
	return lv, s.l.NowMs(), true
}

// usageLedger is one real ledger of cfg's ledger document, fed at log
// time now as the log would feed it, for the usage views to read: the
// document first, then each event, and the lease messages it sends come
// back to it (one partition is its own budget partition).
type usageLedger struct {
	l        *ledger.Ledger
	now, off int64
}

func newUsageLedger(t *testing.T, cfg *config.Config, now int64) *usageLedger {
	t.Helper()
	lc, err := ledger.ParseConfig(cfg.LedgerJSON())
	if err != nil {
		t.Fatal(err)
	}
	u := &usageLedger{l: ledger.New(0, lc), now: now}
	u.apply(&schemas.Event{V: 1, Type: schemas.TypeConfigChanged, ID: "c", ConfigChanged: &schemas.ConfigChanged{Ledger: cfg.LedgerJSON()}})
	return u
}

// apply applies ev and the lease messages that follow it, and returns
// ev's outputs.
func (u *usageLedger) apply(ev *schemas.Event) []ledger.Output {
	out := u.l.Apply(u.now, u.off, ev, nil)
	u.off++
	for n := 0; n < 20; n++ {
		los := u.l.LeaseOutputs()
		if len(los) == 0 {
			break
		}
		evs := make([]*schemas.Event, len(los))
		for i := range los {
			evs[i] = los[i].Event(0, u.off, u.now)
		}
		for _, e := range evs {
			u.l.Apply(u.now, u.off, e, nil)
			u.off++
		}
	}
	return out
}

// usageReserve is a one-token interactive reservation of tenant's key in
// scope, on path.
func usageReserve(id, scope, tenant, key string, path ...schemas.PathLevel) *schemas.Event {
	return &schemas.Event{V: 1, Type: schemas.TypeReserveRequested, ID: id, RequestID: id, Attempt: 1,
		Node: "gw", Scope: scope, Tenant: tenant, KeyID: key, Class: "interactive",
		ReserveRequested: &schemas.ReserveRequested{Path: path, InputTokens: 1}}
}

func TestUsageShowsOnlyTheCallersBuckets(t *testing.T) {
	y := strings.NewReplacer("KEYT", config.HashKey("sk-t"), "KEYU", config.HashKey("sk-u")).Replace(usageYAML)
	cfg := mustLoad(t, y)
	// The log's time is the broker's clock: close to the gateway's.
	now := time.Now().UnixMilli()
	ul := newUsageLedger(t, cfg, now)
	for i, ten := range []string{"t", "u", "u"} {
		key := map[string]string{"t": "k", "u": "k2"}[ten]
		ul.apply(usageReserve("r"+string(rune('0'+i)), "s", ten, key, schemas.PathLevel{Level: "org", ID: "shared-org"}, schemas.PathLevel{Level: "tenant", ID: ten}, schemas.PathLevel{Level: "key", ID: key}))
	}
	s := New(cfg, nil, nil, WithLevels(ledgerLevels{ul.l}))

	get := func(key string) (int, Usage, string) {
		req := httptest.NewRequest("GET", "/v1/sluice/usage", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var u Usage
		_ = json.Unmarshal(rec.Body.Bytes(), &u)
		return rec.Code, u, rec.Body.String()
	}
	code, u, raw := get("sk-t")
	if code != 200 || u.Tenant != "t" || u.KeyID != "k" {
		t.Fatalf("%d %s", code, raw)
	}
	if strings.Contains(raw, `"u"`) || strings.Contains(raw, "shared-org") || strings.Contains(raw, "k2") {
		t.Fatalf("usage of t shows another tenant or the shared org: %s", raw)
	}
	byDim := map[schemas.Dimension]UsageLimit{}
	for _, lim := range u.Limits {
		byDim[lim.Dimension] = lim
	}
	if r := byDim[schemas.DimRequestsPerDay]; r.Capacity != 1000 || r.Remaining == nil || *r.Remaining != 999 || r.Source != "ledger_snapshot" || r.ResetsAtMs <= now || r.ResetsAtMs > now+86_400_000 {
		t.Errorf("requests_per_day %+v", r)
	}
	if r := byDim[schemas.DimRequests]; r.Capacity != 600 || r.Level != "tenant" {
		t.Errorf("the tenant template applies to t: %+v", r)
	}
	if r := byDim[schemas.DimConcurrency]; r.Level != "key" || r.Remaining == nil || *r.Remaining != 3 {
		t.Errorf("key concurrency %+v (the grant still holds one)", r)
	}
	if len(u.DailyHeadroom) != 1 || *u.DailyHeadroom[0].Percent != 99.9 {
		t.Errorf("daily headroom %+v", u.DailyHeadroom)
	}

	// A paused tenant still reads its usage, and sees that it is paused.
	code, u, raw = get("sk-u")
	if code != 200 || !u.Paused || u.Tenant != "u" {
		t.Fatalf("paused tenant: %d %s", code, raw)
	}
	for _, lim := range u.Limits {
		if lim.Dimension == schemas.DimRequestsPerDay && (lim.Remaining == nil || *lim.Remaining != 5) {
			t.Errorf("u's daily quota %+v, want 5 of 7", lim)
		}
	}
	if code, _, _ := get("sk-nobody"); code != 401 {
		t.Errorf("unknown key: %d", code)
	}

	// Without a level source, limits only: remaining is unknown, not full.
	s2 := New(cfg, nil, nil)
	req := httptest.NewRequest("GET", "/v1/sluice/usage", nil)
	req.Header.Set("x-api-key", "sk-t")
	rec := httptest.NewRecorder()
	s2.ServeHTTP(rec, req)
	if strings.Contains(rec.Body.String(), `"remaining"`) || !strings.Contains(rec.Body.String(), `"unobserved"`) {
		t.Errorf("without observations: %s", rec.Body.String())
	}
}

// TestUsageSaysUnitsAndOf: every limit names its unit (requests/min,
// requests/day, requests in flight, micro-USD) and says "used X of Y";
// a token bucket's Y is what it holds at once, its burst.
func TestUsageSaysUnitsAndOf(t *testing.T) {
	cases := []struct {
		b        ledger.BucketConfig
		rem      int64
		unit     string
		max      int64
		summary  string
		observed bool
	}{
		{ledger.BucketConfig{Dimension: schemas.DimRequestsPerDay, Capacity: 1000}, 999, "requests/day", 1000, "used 1 of 1000 requests/day, 999 left", true},
		{ledger.BucketConfig{Dimension: schemas.DimRequests, Capacity: 120}, 1, "requests/min", 2, "used 1 of 2 (the burst of 120 requests/min), 1 left", true},
		{ledger.BucketConfig{Dimension: schemas.DimTotalTokens, Capacity: 120000}, 0, "total tokens/min", 2000, "limit 2000 (the burst of 120000 total tokens/min); use not yet observed", false},
		{ledger.BucketConfig{Dimension: schemas.DimConcurrency, Capacity: 4}, 3, "requests in flight", 4, "used 1 of 4 requests in flight, 3 left", true},
		{ledger.BucketConfig{Dimension: schemas.DimSpend, Capacity: 5_000_000}, 4_000_000, "micro-USD/day", 5_000_000, "used 1000000 of 5000000 micro-USD/day, 4000000 left", true},
	}
	for _, c := range cases {
		c.b.Level, c.b.ID = ledger.LevelTenant, "t"
		doc := ledger.Config{Scopes: []ledger.ScopeConfig{{Name: "s", Buckets: []ledger.BucketConfig{c.b}}}}
		raw, _ := json.Marshal(doc)
		lc, err := ledger.ParseConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		b := lc.Scopes[0].Buckets[0]
		ul := UsageLimit{Dimension: b.Dimension, Capacity: b.Capacity, Unit: UsageUnit(b.Dimension, b.Refill, b.PeriodMs), Max: bucketMax(b)}
		if c.observed {
			used := ul.Max - c.rem
			ul.Remaining, ul.Used = &c.rem, &used
		}
		if ul.Unit != c.unit || ul.Max != c.max || usageSummary(ul) != c.summary {
			t.Errorf("%s: unit %q max %d summary %q; want %q %d %q", b.Dimension, ul.Unit, ul.Max, usageSummary(ul), c.unit, c.max, c.summary)
		}
	}
}

func (s ledgerLevels) Learned(scope string) ([]ledger.LearnedBucket, int64, bool) {
	if !s.l.HasScope(scope) {
		return nil, 0, false
	}
	var out []ledger.LearnedBucket
	for _, lb := range s.l.LearnedBuckets() {
		if lb.Scope == scope {
			out = append(out, lb)
		}
	}
	return out, s.l.NowMs(), true
}

// TestUsageShowsLearnedProviderCapacity: the provider's headers report 120
// RPM against 600 configured on deployment d1; usage shows both, and d2's
// configured capacity as nothing learned.
func TestUsageShowsLearnedProviderCapacity(t *testing.T) {
	y := strings.NewReplacer("KEYT", config.HashKey("sk-t"), "KEYU", config.HashKey("sk-u"),
		// d1 and d2 are deployments of this config (a bucket naming an
		// unknown one is a config error).
		"  - {name: p, kind: openai, scope: s, base_url: \"http://127.0.0.1:1/v1\"}\n",
		"  - {name: p, kind: openai, scope: s, base_url: \"http://127.0.0.1:1/v1\"}\n"+
			"  - {name: d1, kind: openai, scope: s, base_url: \"http://127.0.0.1:1/v1\"}\n"+
			"  - {name: d2, kind: openai, scope: s, base_url: \"http://127.0.0.1:1/v1\"}\n",
		"        - {level: key, id: \"*\", dimension: concurrency, capacity: 4}\n",
		"        - {level: key, id: \"*\", dimension: concurrency, capacity: 4}\n"+
			"        - {level: deployment, id: d1, dimension: requests, capacity: 600}\n"+
			"        - {level: deployment, id: d2, dimension: requests, capacity: 300}\n").Replace(usageYAML)
	cfg := mustLoad(t, y)
	lc, err := ledger.ParseConfig(cfg.LedgerJSON())
	if err != nil {
		t.Fatal(err)
	}
	lc.Scopes[0].RequiredLevels = []string{}
	l := ledger.New(0, lc)
	now := time.Now().UnixMilli()
	ev := &schemas.Event{V: 1, Type: schemas.TypeReserveRequested, ID: "r", RequestID: "r", Attempt: 1, Node: "gw", Scope: "s", Tenant: "t", KeyID: "k",
		Class: "interactive", ReserveRequested: &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "tenant", ID: "t"}, {Level: "key", ID: "k"}, {Level: "deployment", ID: "d1"}}, InputTokens: 1}}
	out := l.Apply(now, 0, ev, nil)
	if len(out) != 1 || out[0].Decision.Status != schemas.StatusGranted {
		t.Fatalf("reserve: %+v", out)
	}
	obs := &schemas.Event{V: 1, Type: schemas.TypeProviderObserved, ID: "o", RequestID: "r", Attempt: 1, Scope: "s",
		ProviderObserved: &schemas.ProviderObserved{Deployment: "d1", Observations: []schemas.Observation{{Dimension: schemas.DimRequests, Limit: 120, Remaining: 100}}}}
	l.Apply(now, 1, obs, nil)
	if len(l.LearnedOutputs()) != 1 {
		t.Fatalf("learned %+v", l.LearnedOutputs())
	}
	s := New(cfg, nil, nil, WithLevels(ledgerLevels{l}))
	req := httptest.NewRequest("GET", "/v1/sluice/usage", nil)
	req.Header.Set("Authorization", "Bearer sk-t")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var u Usage
	if err := json.Unmarshal(rec.Body.Bytes(), &u); err != nil {
		t.Fatal(err)
	}
	// Reported 120, enforced at the default learn.headroom_permille (97 %).
	want := []ProviderCapacity{
		{Scope: "s", Level: "deployment", ID: "d1", Dimension: schemas.DimRequests, PeriodMs: 60_000, Configured: 600, Learned: 116, Reported: 120, Source: "learned", ObservedAtMs: now},
		{Scope: "s", Level: "deployment", ID: "d2", Dimension: schemas.DimRequests, PeriodMs: 60_000, Configured: 300, Learned: 300, Source: "configured"},
	}
	if len(u.ProviderCapacity) != len(want) {
		t.Fatalf("provider capacity %+v", u.ProviderCapacity)
	}
	for i := range want {
		if !reflect.DeepEqual(u.ProviderCapacity[i], want[i]) {
			t.Errorf("provider capacity %d: %+v, want %+v", i, u.ProviderCapacity[i], want[i])
		}
	}
}
