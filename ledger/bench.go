package ledger

import (
	"runtime"
	"strconv"

	"github.com/sluice-dev/sluice/schemas"
)

// BenchResult is what one benchmark run did. The caller times Run and
// divides: decisions_per_sec = Decisions / elapsed, ns_per_decision =
// elapsed / Decisions, allocs_per_decision from runtime.MemStats.Mallocs
// before and after Run.
type BenchResult struct {
	Events    int64 `json:"events"`
	Decisions int64 `json:"decisions"`
	Granted   int64 `json:"granted"`
	Buckets   int   `json:"buckets"`
}

// benchLevels is the 6-level path of the benchmark; each level has four
// dimensions (requests, input tokens, output tokens, concurrency).
var benchLevels = [...]string{LevelOrg, LevelTenant, LevelTeam, LevelKey, LevelProfile, LevelDeployment}

const benchPool = 1 << 12 // distinct request ids, reused after the dedup TTL (4 s of log time > 1 s)

// BenchConfig is the benchmark's configuration: every level of the path has
// a requests, input-token, output-token and concurrency bucket, all large
// enough that every reservation is granted (the hot path).
func BenchConfig() Config {
	var bs []BucketConfig
	for _, lv := range benchLevels {
		bs = append(bs,
			BucketConfig{Level: lv, ID: "*", Dimension: schemas.DimRequests, Capacity: 1 << 30, PeriodMs: minuteMs, WindowMs: 1000},
			BucketConfig{Level: lv, ID: "*", Dimension: schemas.DimInputTokens, Capacity: 1 << 40, PeriodMs: minuteMs, WindowMs: 1000},
			BucketConfig{Level: lv, ID: "*", Dimension: schemas.DimOutputTokens, Capacity: 1 << 40, PeriodMs: minuteMs, WindowMs: 1000},
			BucketConfig{Level: lv, ID: "*", Dimension: schemas.DimConcurrency, Capacity: 1 << 30},
		)
	}
	c := Config{
		Scopes:     []ScopeConfig{{Name: "bench", Buckets: bs}},
		HoldTTLMs:  1000,
		DedupTTLMs: 1000,
	}
	c.fillDefaults()
	return c
}

// BenchWorkload is a prepared reserve+reconcile workload over a 6-level
// path with 4 dimensions per level. Preparing it allocates; Run does not.
type BenchWorkload struct {
	l        *Ledger
	reserves []*schemas.Event
	recons   []*schemas.Event
	out      []Output
	next     int
	offset   int64
	nowMs    int64
}

// NewBenchWorkload prepares the events (64 tenants, 4 keys each).
func NewBenchWorkload() *BenchWorkload {
	w := &BenchWorkload{l: New(0, BenchConfig()), out: make([]Output, 0, 16), nowMs: 1}
	w.reserves = make([]*schemas.Event, benchPool)
	w.recons = make([]*schemas.Event, benchPool)
	for i := range benchPool {
		id := "req-" + strconv.Itoa(i)
		t := strconv.Itoa(i % 64)
		k := strconv.Itoa(i % 256)
		path := []schemas.PathLevel{
			{Level: LevelOrg, ID: "org"}, {Level: LevelTenant, ID: "t" + t}, {Level: LevelTeam, ID: "team" + t},
			{Level: LevelKey, ID: "k" + k}, {Level: LevelProfile, ID: "gpt-4o"}, {Level: LevelDeployment, ID: "dep1"},
		}
		w.reserves[i] = &schemas.Event{V: 1, Type: schemas.TypeReserveRequested, ID: "e" + id, RequestID: id, Attempt: 1,
			Scope: "bench", Tenant: "t" + t, KeyID: "k" + k, Route: "gpt-4o", Class: "interactive",
			ReserveRequested: &schemas.ReserveRequested{Path: path, InputTokens: 1200, OutputTokens: 400}}
		w.recons[i] = &schemas.Event{V: 1, Type: schemas.TypeReconciled, ID: "c" + id, RequestID: id, Attempt: 1, Scope: "bench",
			Reconciled: &schemas.Reconciled{InputTokens: 1100, OutputTokens: 350, HTTPStatus: 200}}
	}
	return w
}

// Step applies one reserve and its reconcile; it reports the decisions made.
func (w *BenchWorkload) Step() (decisions, granted int) {
	i := w.next
	w.next = (w.next + 1) % benchPool
	w.nowMs++
	w.out = w.l.Apply(w.nowMs, w.offset, w.reserves[i], w.out[:0])
	w.offset++
	for k := range w.out {
		if w.out[k].Decision.Status == schemas.StatusGranted {
			granted++
		}
	}
	decisions = len(w.out)
	w.out = w.l.Apply(w.nowMs, w.offset, w.recons[i], w.out[:0])
	w.offset++
	return decisions + len(w.out), granted
}

// Run applies n reserve+reconcile pairs.
func (w *BenchWorkload) Run(n int) BenchResult {
	var r BenchResult
	for range n {
		d, g := w.Step()
		r.Decisions += int64(d)
		r.Granted += int64(g)
		r.Events += 2
	}
	r.Buckets = len(w.l.st.Buckets)
	return r
}

// Bench prepares a workload, warms it up and runs n reserve+reconcile
// pairs. Callers that want the timing without the preparation use
// NewBenchWorkload and Run.
func Bench(n int) BenchResult {
	w := NewBenchWorkload()
	w.Run(2 * benchPool)
	return w.Run(n)
}

// StateSize is the measured heap cost of a ledger's state.
type StateSize struct {
	Tenants        int     `json:"tenants"`
	Profiles       int     `json:"profiles"`
	Nodes          int     `json:"nodes"`
	Buckets        int     `json:"buckets"`
	HeapBytes      uint64  `json:"heap_bytes"`
	BytesPerBucket float64 `json:"bytes_per_bucket"`
}

// NewStateSizeLedger builds the state of one scope with `tenants` tenants,
// each using `profiles` model profiles (a tenant node and one node per
// tenant×profile, each with requests, input, output and concurrency
// buckets), by granting and reconciling one request per tenant×profile and
// then letting the dedup TTL pass.
func NewStateSizeLedger(tenants, profiles int) *Ledger {
	var bs []BucketConfig
	for _, lv := range []string{LevelTenant, LevelProfile} {
		bs = append(bs,
			BucketConfig{Level: lv, ID: "*", Dimension: schemas.DimRequests, Capacity: 600, PeriodMs: minuteMs, WindowMs: 1000},
			BucketConfig{Level: lv, ID: "*", Dimension: schemas.DimInputTokens, Capacity: 1_000_000, PeriodMs: minuteMs, WindowMs: 1000},
			BucketConfig{Level: lv, ID: "*", Dimension: schemas.DimOutputTokens, Capacity: 1_000_000, PeriodMs: minuteMs, WindowMs: 1000},
			BucketConfig{Level: lv, ID: "*", Dimension: schemas.DimConcurrency, Capacity: 100},
		)
	}
	c := Config{Scopes: []ScopeConfig{{Name: "big", Buckets: bs}}, NodesMax: 10_000_000, ReservationsMax: 10_000_000}
	c.fillDefaults()
	l := New(0, c)
	ev := &schemas.Event{V: 1, Type: schemas.TypeReserveRequested, ID: "e", Attempt: 1, Scope: "big",
		ReserveRequested: &schemas.ReserveRequested{InputTokens: 100, OutputTokens: 100}}
	rec := &schemas.Event{V: 1, Type: schemas.TypeReconciled, ID: "r", Attempt: 1, Scope: "big",
		Reconciled: &schemas.Reconciled{InputTokens: 100, OutputTokens: 100}}
	var out []Output
	off := int64(0)
	for t := range tenants {
		tid := "tenant-" + strconv.Itoa(t)
		for p := range profiles {
			id := tid + "-" + strconv.Itoa(p)
			ev.RequestID, ev.Tenant = id, tid
			ev.ReserveRequested.Path = []schemas.PathLevel{{Level: LevelTenant, ID: tid}, {Level: LevelProfile, ID: id}}
			out = l.Apply(1, off, ev, out[:0])
			rec.RequestID = id
			out = l.Apply(1, off+1, rec, out[:0])
			off += 2
		}
	}
	l.Apply(1+c.DedupTTLMs, off, &schemas.Event{V: 1, Type: schemas.TypeTick, ID: "t", Tick: &schemas.Tick{}}, out[:0])
	return l
}

// MeasureStateSize builds NewStateSizeLedger and measures the heap it holds
// (runtime.MemStats after GC; the only non-pure helper of the package, used
// by benchmarks and `sluice bench ledger`, never by Apply).
func MeasureStateSize(tenants, profiles int) StateSize {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := NewStateSizeLedger(tenants, profiles)
	runtime.GC()
	runtime.ReadMemStats(&after)
	s := StateSize{Tenants: tenants, Profiles: profiles, Nodes: len(l.st.Nodes), Buckets: len(l.st.Buckets)}
	if after.HeapAlloc > before.HeapAlloc {
		s.HeapBytes = after.HeapAlloc - before.HeapAlloc
	}
	if s.Buckets > 0 {
		s.BytesPerBucket = float64(s.HeapBytes) / float64(s.Buckets)
	}
	runtime.KeepAlive(l)
	return s
}
