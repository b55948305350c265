package ledger

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/ledger/budget"
	"github.com/sluice-dev/sluice/schemas"
)

// hotConfig is one scope whose deployment "dep" has a provider limit of
// rpm requests a minute (checked every second), tpm total tokens and 10
// in flight, split over n partitions, with a per-key limit that each
// sub-scope keeps whole.
func hotConfig(n int, rpm int64) string {
	return fmt.Sprintf(`{"scopes":[{"name":"openai:hot","partitions":%d,"buckets":[
 {"level":"deployment","id":"dep","dimension":"requests","capacity":%d,"period_ms":60000,"window_ms":1000},
 {"level":"deployment","id":"dep","dimension":"total_tokens","capacity":1000000,"period_ms":60000,"window_ms":1000},
 {"level":"deployment","id":"dep","dimension":"concurrency","capacity":10},
 {"level":"key","id":"*","dimension":"requests","capacity":100000,"period_ms":60000}]}]}`, n, rpm)
}

// TestSplitScopeConfig is the split of one hot scope's config: n
// sub-scopes, the deployment's rate limits as rolling budgets that every
// sub-scope spends, its concurrency in parts that sum to the limit, the
// key's limit copied; parsing the result again changes nothing.
func TestSplitScopeConfig(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4, 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			c, err := ParseConfig([]byte(hotConfig(n, 600)))
			if err != nil {
				t.Fatal(err)
			}
			want := max(n, 1)
			if got := c.ScopePartitions("openai:hot"); got != want {
				t.Fatalf("ScopePartitions = %d, want %d", got, want)
			}
			if n <= 1 {
				if len(c.Scopes) != 1 || c.Scopes[0].Name != "openai:hot" || c.Budget != nil {
					t.Fatalf("an unsplit scope changed: %+v", c.Scopes)
				}
				return
			}
			if len(c.Scopes) != n {
				t.Fatalf("%d scopes, want %d", len(c.Scopes), n)
			}
			var conc int64
			for i, s := range c.Scopes {
				if s.Name != SubScope("openai:hot", i) {
					t.Errorf("scope %d is %q", i, s.Name)
				}
				for _, b := range s.Buckets {
					switch {
					case b.Level == LevelDeployment && b.Dimension == schemas.DimConcurrency:
						conc += b.Capacity
					case b.Level == LevelDeployment && b.Capacity != map[schemas.Dimension]int64{schemas.DimRequests: 600, schemas.DimTotalTokens: 1000000}[b.Dimension]:
						t.Errorf("%s: deployment bucket %s %d, want its capacity copied whole", s.Name, b.Dimension, b.Capacity)
					case b.Level == LevelDeployment && b.WindowMs != map[schemas.Dimension]int64{schemas.DimRequests: max(1000/int64(n), 100), schemas.DimTotalTokens: 1000 / int64(n)}[b.Dimension]:
						t.Errorf("%s: deployment bucket %s window %d ms, want 1000/%d (the bursts sum to the deployment's; at least one request's worth)", s.Name, b.Dimension, b.WindowMs, n)
					case b.Level == LevelKey && b.Capacity != 100000:
						t.Errorf("%s: key limit %d, want it copied whole", s.Name, b.Capacity)
					}
				}
				if !strings.Contains(strings.Join(s.RequiredLevels, ","), LevelDeployment) {
					t.Errorf("%s does not require the deployment level (%v): a request could skip the budget", s.Name, s.RequiredLevels)
				}
			}
			if conc != 10 {
				t.Errorf("concurrency parts sum to %d, want 10", conc)
			}
			want2 := []budget.Budget{
				{ID: SplitBudgetID("openai:hot", "dep", schemas.DimRequests), Level: LevelDeployment, Subject: "dep", Unit: budget.UnitRequests, Limit: 600, Window: budget.WindowRolling, RollingMs: 67500, Slots: 9},
				{ID: SplitBudgetID("openai:hot", "dep", schemas.DimTotalTokens), Level: LevelDeployment, Subject: "dep", Unit: budget.UnitTokens, Limit: 1000000, Window: budget.WindowRolling, RollingMs: 67500, Slots: 9},
			}
			if c.Budget == nil || fmt.Sprint(c.Budget.Budgets) != fmt.Sprint(want2) {
				t.Fatalf("budgets %+v, want %+v", c.Budget, want2)
			}
			again, err := ParseConfig(mustJSON(t, c))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(again.Scopes) != fmt.Sprint(c.Scopes) || fmt.Sprint(again.Budget) != fmt.Sprint(c.Budget) {
				t.Fatal("parsing a split config again changed it")
			}
		})
	}
}

// TestSplitScopeRefusals lists every limit that cannot be split, each at
// its place; the scope is then refused, not split with a limit that would
// hold per partition.
func TestSplitScopeRefusals(t *testing.T) {
	doc := `{"scopes":[{"name":"openai:hot","partitions":65,"buckets":[
 {"level":"deployment","id":"*","dimension":"requests","capacity":5,"period_ms":60000},
 {"level":"deployment","id":"dep","dimension":"requests_per_day","capacity":5},
 {"level":"deployment","id":"dep","dimension":"requests","refill":"fixed","capacity":600,"period_ms":60000},
 {"level":"deployment","id":"dep","dimension":"requests","capacity":5,"period_ms":60000,"shadow":true}]},
 {"name":"*","partitions":2,"buckets":[]}, {"name":"x","partitions":-1,"buckets":[]}]}`
	_, err := ParseConfig([]byte(doc))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"scopes[0].partitions", "scopes[0].buckets[0]", "scopes[0].buckets[1]", "dimension requests_per_day",
		"scopes[0].buckets[2]", "refill fixed", "scopes[0].buckets[3]", "scopes[1].partitions", "scopes[2].partitions",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no %q in:\n%v", want, err)
		}
	}
}

// TestPartitionScope: a key always goes to the same sub-scope, every
// sub-scope gets keys, and n ≤ 1 is the scope itself.
func TestPartitionScope(t *testing.T) {
	for _, n := range []int{0, 1, 2, 4, 16} {
		seen := map[string]bool{}
		for k := 0; k < 1000; k++ {
			key := fmt.Sprintf("key-%d", k)
			s := PartitionScope("openai:hot", n, key)
			if s != PartitionScope("openai:hot", n, key) {
				t.Fatalf("n=%d: %s not stable", n, key)
			}
			seen[s] = true
		}
		if want := max(n, 1); len(seen) != want {
			t.Errorf("n=%d: keys reach %d sub-scopes, want %d", n, len(seen), want)
		}
		if n <= 1 && !seen["openai:hot"] {
			t.Errorf("n=%d: not the scope itself: %v", n, seen)
		}
	}
}

// TestSplitScopeNeverAboveLimit is the split's conservation property,
// over seeds: n sub-scope partitions (and the budget partition, the
// first's) under 3× the deployment's limit, keys spread by
// PartitionScope, requests reconciled or released at random. In every
// minute (each 1 s slot's last 60) the sent grants of all partitions together
// never exceed the limit, Σ over holders of what they hold plus what was
// used never exceeds it at any step, and the limit is mostly used.
func TestSplitScopeNeverAboveLimit(t *testing.T) {
	const rpm, seconds = 120, 180
	for _, n := range []int{2, 3, 4} {
		for seed := uint64(1); seed <= 5; seed++ {
			t.Run(fmt.Sprintf("n%d/seed%d", n, seed), func(t *testing.T) {
				cfg, err := ParseConfig([]byte(hotConfig(n, rpm)))
				if err != nil {
					t.Fatal(err)
				}
				bid := SplitBudgetID("openai:hot", "dep", schemas.DimRequests)
				tid := SplitBudgetID("openai:hot", "dep", schemas.DimTotalTokens)
				s := newBudgetStack(t, cfg)
				s.home = map[string]string{bid: SubScope("openai:hot", 0), tid: SubScope("openai:hot", 1%n)}
				grantsAt := map[int64]int{} // what the provider counts, by second
				total := 0
				hotRun{n: n, seed: seed, seconds: seconds, out: 50,
					path: keyDepPath,
					sent: func(sec int64) { grantsAt[sec]++; total++ },
					check: func(ms int64) {
						if out, lim, ok := s.parts[SubScope("openai:hot", 0)].BudgetOutstanding(bid); ok && out > lim {
							t.Fatalf("at %d ms: outstanding %d > limit %d", ms, out, lim)
						}
					},
				}.run(s)
				first := budgetT0 / 1000
				for sec := first; sec < first+seconds; sec++ {
					if sum := minuteTo(grantsAt, sec); sum > rpm {
						t.Fatalf("%d grants in the minute to second %d, limit %d", sum, sec-first, rpm)
					}
				}
				if total < rpm*seconds/60*8/10 {
					t.Errorf("%d granted in %d s, want ≥ 80%% of %d", total, seconds, rpm*seconds/60)
				}
				t.Logf("%d granted of %d allowed", total, rpm*seconds/60)
			})
		}
	}
}

// TestSplitOf: a sub-scope's name gives back its split scope and index;
// any other name is a scope of its own.
func TestSplitOf(t *testing.T) {
	for _, c := range []struct {
		name, scope string
		i           int
		ok          bool
	}{
		{SubScope("openai:hot", 0), "openai:hot", 0, true},
		{SubScope("openai:hot", 63), "openai:hot", 63, true},
		{"openai:hot", "openai:hot", 0, false},
		{"openai:hot#64", "openai:hot#64", 0, false},
		{"openai:hot#01", "openai:hot#01", 0, false},
		{"openai:hot#", "openai:hot#", 0, false},
		{"#1", "#1", 0, false},
		{"a#1#2", "a#1#2", 0, false},
		{"odd#name", "odd#name", 0, false},
	} {
		if scope, i, ok := SplitOf(c.name); scope != c.scope || i != c.i || ok != c.ok {
			t.Errorf("SplitOf(%q) = %q, %d, %v; want %q, %d, %v", c.name, scope, i, ok, c.scope, c.i, c.ok)
		}
		if scope, i, ok := schemas.SplitScopeOf([]byte(c.name)); string(scope) != c.scope || i != c.i || ok != c.ok {
			t.Errorf("SplitScopeOf(%q) = %q, %d, %v; want %q, %d, %v", c.name, scope, i, ok, c.scope, c.i, c.ok)
		}
	}
}

// FuzzSplitOf: any name either is a scope of its own or splits into a
// non-empty scope without '#' and an index below partitionsMax that,
// joined again (SubScope), is the name itself: one spelling per
// sub-scope, so one partition of sluice.requests.
func FuzzSplitOf(f *testing.F) {
	for _, s := range []string{"openai:org/proj#0", "a#12", "a#63", "a#64", "a#012", "#1", "a#", "a#1#2", "a#1000", "a#99999999999999999999", "plain"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		scope, i, ok := SplitOf(name)
		if bs, bi, bok := schemas.SplitScopeOf([]byte(name)); string(bs) != scope || bi != i || bok != ok {
			t.Fatalf("SplitScopeOf(%q) = %q, %d, %v; SplitOf %q, %d, %v", name, bs, bi, bok, scope, i, ok)
		}
		if !ok {
			if scope != name {
				t.Fatalf("SplitOf(%q) = %q, not a sub-scope but not the name either", name, scope)
			}
			return
		}
		if scope == "" || strings.Contains(scope, SplitSep) || i < 0 || i >= partitionsMax {
			t.Fatalf("SplitOf(%q) = %q, %d: not a sub-scope", name, scope, i)
		}
		if back := SubScope(scope, i); back != name {
			t.Fatalf("SplitOf(%q) = %q, %d, which spells %q", name, scope, i, back)
		}
	})
}

// tokenHotConfig is hotConfig's scope with the deployment's provider
// limits in input and output tokens a minute instead.
func tokenHotConfig(n int, inTPM, outTPM int64) string {
	return fmt.Sprintf(`{"scopes":[{"name":"openai:hot","partitions":%d,"buckets":[
 {"level":"deployment","id":"dep","dimension":"input_tokens","capacity":%d,"period_ms":60000,"window_ms":1000},
 {"level":"deployment","id":"dep","dimension":"output_tokens","capacity":%d,"period_ms":60000,"window_ms":1000},
 {"level":"key","id":"*","dimension":"requests","capacity":100000,"period_ms":60000}]}]}`, n, inTPM, outTPM)
}

// TestSplitScopeTokenLimitsNeverAboveLimit: a deployment's input_tokens
// and output_tokens limits split as its requests limit is, each a
// rolling budget of its own unit (input tokens; reserved, then used,
// output tokens), and the conservation holds the same way: requests of
// 100 input and 50 reserved output tokens that use 30, at 20 a second
// (2× the input limit, 4× the output limit's reserved rate), some
// released unsent. In every minute the tokens the provider counts from
// all partitions together stay within each limit, and the binding one
// (output) is mostly used.
func TestSplitScopeTokenLimitsNeverAboveLimit(t *testing.T) {
	const inTPM, outTPM, seconds = 60_000, 15_000, 180
	for _, n := range []int{2, 4} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("n%d/seed%d", n, seed), func(t *testing.T) {
				cfg, err := ParseConfig([]byte(tokenHotConfig(n, inTPM, outTPM)))
				if err != nil {
					t.Fatal(err)
				}
				iid := SplitBudgetID("openai:hot", "dep", schemas.DimInputTokens)
				oid := SplitBudgetID("openai:hot", "dep", schemas.DimOutputTokens)
				units := map[string]budget.Unit{}
				for _, b := range cfg.Budget.Budgets {
					units[b.ID] = b.Unit
				}
				if units[iid] != budget.UnitInputTokens || units[oid] != budget.UnitOutputTokens {
					t.Fatalf("budgets %+v, want %s in input_tokens and %s in output_tokens", cfg.Budget.Budgets, iid, oid)
				}
				s := newBudgetStack(t, cfg)
				s.home = map[string]string{iid: SubScope("openai:hot", 0), oid: SubScope("openai:hot", 1%n)}
				inAt, outAt := map[int64]int64{}, map[int64]int64{} // what the provider counts, by second
				var outTotal int64
				hotRun{n: n, seed: seed, seconds: seconds, out: 30,
					path: keyDepPath,
					sent: func(sec int64) { inAt[sec] += 100; outAt[sec] += 30; outTotal += 30 },
					check: func(ms int64) {
						for _, id := range []string{iid, oid} {
							if out, lim, ok := s.parts[s.home[id]].BudgetOutstanding(id); ok && out > lim {
								t.Fatalf("at %d ms: %s outstanding %d > limit %d", ms, id, out, lim)
							}
						}
					},
				}.run(s)
				first := budgetT0 / 1000
				for sec := first; sec < first+seconds; sec++ {
					if in, out := minuteTo(inAt, sec), minuteTo(outAt, sec); in > inTPM || out > outTPM {
						t.Fatalf("the minute to second %d: %d input tokens (limit %d), %d output (limit %d)", sec-first, in, inTPM, out, outTPM)
					}
				}
				if allowed := int64(outTPM * seconds / 60); outTotal < allowed*6/10 {
					t.Errorf("%d output tokens used in %d s, want ≥ 60%% of %d", outTotal, seconds, allowed)
				}
				t.Logf("%d output tokens used of %d allowed", outTotal, outTPM*seconds/60)
			})
		}
	}
}

// tenantHotConfig is hotConfig's scope with a deployment limit that does
// not bind and, above the keys, a per-tenant limit of tpm requests a
// minute (checked every second: a share of 30 a minute gets a window of
// 2 s, to hold one request), a team's of 10 in flight and a scope-wide
// daily one.
func tenantHotConfig(n int, tpm int64) string {
	return fmt.Sprintf(`{"scopes":[{"name":"openai:hot","partitions":%d,"buckets":[
 {"level":"deployment","id":"dep","dimension":"requests","capacity":1000000,"period_ms":60000,"window_ms":1000},
 {"level":"tenant","id":"*","dimension":"requests","capacity":%d,"period_ms":60000,"window_ms":1000},
 {"level":"team","id":"search","dimension":"concurrency","capacity":10},
 {"level":"scope","id":"openai:hot","dimension":"requests_per_day","capacity":1000001},
 {"level":"key","id":"*","dimension":"requests","capacity":100000,"period_ms":60000}]}]}`, n, tpm)
}

// TestSplitScopeTenantLimitsNeverAboveLimit: a limit above the key level
// (tenant, team, scope) of a split scope is divided among the
// sub-scopes, so that a tenant whose keys the gateway spreads over 2 or 4
// of them still gets at most its limit (a copy in each allowed N × the
// limit). Tenant acme's 50 keys send 20 requests a second (10× its
// limit's rate), a quarter released unsent: in every minute the grants of
// all sub-scopes together stay within the limit, and most of it is sent.
func TestSplitScopeTenantLimitsNeverAboveLimit(t *testing.T) {
	const tpm, seconds = 120, 180
	for _, n := range []int{2, 4} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("n%d/seed%d", n, seed), func(t *testing.T) {
				cfg, err := ParseConfig([]byte(tenantHotConfig(n, tpm)))
				if err != nil {
					t.Fatal(err)
				}
				sums := map[string]int64{}
				for _, sc := range cfg.Scopes {
					for _, b := range sc.Buckets {
						if b.Level != LevelDeployment && b.Level != LevelKey {
							sums[b.Level] += b.Capacity
						}
						if b.Level == LevelTenant && b.Capacity*b.WindowMs < b.PeriodMs {
							t.Errorf("%s: tenant share %d a minute, window %d ms: below one request's burst", sc.Name, b.Capacity, b.WindowMs)
						}
					}
				}
				if want := map[string]int64{LevelTenant: tpm, LevelTeam: 10, LevelScope: 1000001}; fmt.Sprint(sums) != fmt.Sprint(want) {
					t.Fatalf("the sub-scopes' shares sum to %v, want %v", sums, want)
				}
				bid := SplitBudgetID("openai:hot", "dep", schemas.DimRequests)
				s := newBudgetStack(t, cfg)
				s.home = map[string]string{bid: SubScope("openai:hot", 0)}
				grantsAt := map[int64]int{} // what the provider counts, by second
				total := 0
				hotRun{n: n, seed: seed, seconds: seconds, out: 50,
					path: func(key string) []schemas.PathLevel {
						return []schemas.PathLevel{{Level: LevelTenant, ID: "acme"}, {Level: LevelKey, ID: key}, {Level: LevelDeployment, ID: "dep"}}
					},
					sent: func(sec int64) { grantsAt[sec]++; total++ },
				}.run(s)
				first := budgetT0 / 1000
				for sec := first; sec < first+seconds; sec++ {
					if sum := minuteTo(grantsAt, sec); sum > tpm {
						t.Fatalf("%d of acme's requests granted in the minute to second %d, its limit %d", sum, sec-first, tpm)
					}
				}
				if total < tpm*seconds/60*65/100 {
					t.Errorf("%d sent in %d s, want ≥ 65%% of %d", total, seconds, tpm*seconds/60)
				}
				t.Logf("%d sent of %d allowed", total, tpm*seconds/60)
			})
		}
	}
}

// TestSplitScopeShareRefusals: a limit above the key level that cannot
// be divided among the sub-scopes is refused at its place, with why.
func TestSplitScopeShareRefusals(t *testing.T) {
	cases := []struct{ name, bucket, want string }{
		{"below one unit each", `{"level":"tenant","id":"*","dimension":"concurrency","capacity":3}`, "capacity 3 is below one unit for each of 4 sub-scopes"},
		{"ramp", `{"level":"tenant","id":"acme","dimension":"requests","refill":"ramp","capacity":100,"period_ms":60000,"window_ms":60000}`, "refill ramp"},
		// A deployment's concurrency is divided too: a share below one
		// was left whole in every sub-scope, 4 × 3 in flight.
		{"deployment concurrency below one unit each", `{"level":"deployment","id":"dep","dimension":"concurrency","capacity":3}`, "capacity 3 is below one unit for each of 4 sub-scopes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := `{"scopes":[{"name":"openai:hot","partitions":4,"buckets":[` + c.bucket + `]}]}`
			_, err := ParseConfig([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), "scopes[0].buckets[0]") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q at scopes[0].buckets[0]", err, c.want)
			}
		})
	}
	if _, err := ParseConfig([]byte(`{"scopes":[{"name":"openai:hot","partitions":4,"buckets":[
 {"level":"tenant","id":"*","dimension":"concurrency","capacity":3,"shadow":true}]}]}`)); err != nil {
		t.Errorf("a shadow limit is copied, not divided: %v", err)
	}
}

// TestSplitLimit is sub-scope i's share of a limit above the key level:
// Capacity/n, the remainder to the lowest indexes; a token bucket's window
// kept, or lengthened to hold one unit; a key's and a shadow limit whole.
func TestSplitLimit(t *testing.T) {
	tok := BucketConfig{Level: LevelTenant, ID: "*", Dimension: schemas.DimRequests, Capacity: 100, PeriodMs: 60000, WindowMs: 1000}
	big := tok
	big.Capacity = 6000
	key, shadow := tok, tok
	key.Level, shadow.Shadow = LevelKey, true
	conc := BucketConfig{Level: LevelTeam, ID: "search", Dimension: schemas.DimConcurrency, Capacity: 10}
	cases := []struct {
		name       string
		b          BucketConfig
		n, i       int
		cap, winMs int64
	}{
		{"first of 3 gets the remainder", tok, 3, 0, 34, 1765},
		{"last of 3", tok, 3, 2, 33, 1819},
		{"window kept when the share holds a unit", big, 4, 1, 1500, 1000},
		{"key whole", key, 4, 3, 100, 1000},
		{"shadow whole", shadow, 4, 3, 100, 1000},
		{"concurrency", conc, 4, 1, 3, 0},
		{"concurrency, past the remainder", conc, 4, 2, 2, 0},
		{"unsplit", tok, 1, 0, 100, 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := SplitLimit(c.b, c.n, c.i)
			if why != "" || got.Capacity != c.cap || got.WindowMs != c.winMs {
				t.Fatalf("SplitLimit = capacity %d window %d ms (%q), want %d, %d ms", got.Capacity, got.WindowMs, why, c.cap, c.winMs)
			}
		})
	}
}

// hotRun drives split scope openai:hot over n sub-scopes for seconds of
// log time: every 50 ms a request of one of 50 keys (seeded), on path(key),
// whose grant is a quarter of the time released unsent and otherwise
// reconciled with 100 input and out output tokens, sent(second) counting
// it where the provider would. check, if set, runs after every 50 ms.
type hotRun struct {
	n       int
	seed    uint64
	seconds int64
	out     int64
	path    func(key string) []schemas.PathLevel
	sent    func(sec int64)
	check   func(ms int64)
}

// keyDepPath is a request's path of key on deployment dep.
func keyDepPath(key string) []schemas.PathLevel {
	return []schemas.PathLevel{{Level: LevelKey, ID: key}, {Level: LevelDeployment, ID: "dep"}}
}

func (h hotRun) run(s *budgetStack) {
	rng := rand.New(rand.NewPCG(h.seed, 23))
	granted := map[string]bool{}
	for ms := int64(0); ms < h.seconds*1000; ms += 50 {
		s.tick(50)
		key := fmt.Sprintf("k%d", rng.IntN(50))
		sc := PartitionScope("openai:hot", h.n, key)
		s.apply(sc, reserve(fmt.Sprintf("r%d", ms), func(ev *schemas.Event) {
			ev.Scope, ev.KeyID = sc, key
			ev.ReserveRequested.Path = h.path(key)
			ev.ReserveRequested.MaxWaitMs = 2000
		}))
		for _, sc := range s.outScopes() {
			outs := s.out[sc]
			s.out[sc] = nil // what the drain below decides waits for the next step
			for _, o := range outs {
				if o.Decision.Status != schemas.StatusGranted || granted[o.RequestID] {
					continue
				}
				granted[o.RequestID] = true
				if rng.IntN(4) == 0 { // never sent: given back
					s.apply(sc, releaseEv(o.RequestID))
					continue
				}
				h.sent(s.nowMs / 1000)
				s.apply(sc, reconcile(o.RequestID, 100, h.out))
			}
		}
		if h.check != nil {
			h.check(ms)
		}
	}
}

// minuteTo sums a per-second tally over the minute that ends with second
// sec: what a per-minute limit bounds.
func minuteTo[N int | int64](at map[int64]N, sec int64) N {
	var sum N
	for j := sec - 59; j <= sec; j++ {
		sum += at[j]
	}
	return sum
}

// TestSplitScopeDividesGuarantees: a guaranteed tenant on a split scope
// (the loadtest's shape: the tenant's requests bucket as large as the
// deployment's, a baseline of 2/3 of it, a borrow reserve on the
// deployment) loads, and each sub-scope holds its share of the baseline
// and of the reserve: the baselines sum to the limit's, the reserve
// shrinks with the deployment's burst. Whole, a baseline of 400 was above
// a share's capacity of 300 and the document was refused.
func TestSplitScopeDividesGuarantees(t *testing.T) {
	doc := `{"scopes":[{"name":"openai:hot","partitions":2,"buckets":[
 {"level":"deployment","id":"d1","dimension":"requests","capacity":600,"period_ms":60000,"window_ms":1000,"borrow_reserve":5},
 {"level":"tenant","id":"acme","dimension":"requests","capacity":600,"period_ms":60000,"window_ms":1000,"guaranteed":401,"borrow_reserve":3}]}]}`
	cfg, err := ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var gSum, rSum int64
	for i := range 2 {
		sc := cfg.Scopes[cfg.scopeIndex(SubScope("openai:hot", i))]
		for _, b := range sc.Buckets {
			switch b.Level {
			case LevelDeployment:
				if b.WindowMs != 500 || b.BorrowReserve != 3 {
					t.Errorf("sub-scope %d deployment: window %d ms, reserve %d; want 500 ms, 3 (5 × 500/1000, rounded up)", i, b.WindowMs, b.BorrowReserve)
				}
			case LevelTenant:
				if b.Capacity != 300 || b.Guaranteed > b.Capacity {
					t.Errorf("sub-scope %d tenant: capacity %d, guaranteed %d", i, b.Capacity, b.Guaranteed)
				}
				gSum, rSum = gSum+b.Guaranteed, rSum+b.BorrowReserve
			}
		}
	}
	if gSum != 401 || rSum != 3 {
		t.Errorf("baselines sum to %d, reserves to %d; want 401, 3", gSum, rSum)
	}
}

// TestHotRunReproducible: hotRun with one seed draws the same numbers in
// the same order every run, so a seed that fails reproduces: the same
// requests are granted and sent, in the same order. It ranged over the
// map of decisions by scope while drawing, and the draws followed Go's
// map order.
func TestHotRunReproducible(t *testing.T) {
	run := func() []string {
		cfg, err := ParseConfig([]byte(hotConfig(4, 600)))
		if err != nil {
			t.Fatal(err)
		}
		s := newBudgetStack(t, cfg)
		s.home = map[string]string{
			SplitBudgetID("openai:hot", "dep", schemas.DimRequests):    SubScope("openai:hot", 0),
			SplitBudgetID("openai:hot", "dep", schemas.DimTotalTokens): SubScope("openai:hot", 1),
		}
		hotRun{n: 4, seed: 7, seconds: 30, out: 50, path: keyDepPath, sent: func(int64) {}}.run(s)
		var log []string // every sub-scope's inputs, in order
		for i := range 4 {
			for _, r := range s.logs[SubScope("openai:hot", i)] {
				log = append(log, fmt.Sprintf("%d %d %s %s", i, r.atMs, r.ev.Type, r.ev.ID))
			}
		}
		return log
	}
	first := run()
	for i := range 5 {
		if again := run(); !reflect.DeepEqual(again, first) {
			t.Fatalf("run %d: %d inputs, first run %d: the same seed did not reproduce", i+2, len(again), len(first))
		}
	}
}
