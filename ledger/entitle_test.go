package ledger

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

func prio(p int32) *int32 { return &p }

// entitledConfig is the dev stack's shape: tenant batchco may use batch and
// agent at priority ≤ 0, its key batch-key only route gpt-mini, its team
// etl priority ≤ -10; partner p1's sub-tenant sub1 only batch.
func entitledConfig() Config {
	c := testConfig(rpm(LevelScope, "s", 600, 60_000))
	c.Entitlements = []EntitlementConfig{
		{Tenant: "batchco", AllowedClasses: []string{"batch", "agent"}, MaxPriority: prio(0)},
		{Tenant: "batchco", Team: "etl", MaxPriority: prio(-10)},
		{Tenant: "batchco", Key: "batch-key", AllowedProfiles: []string{"gpt-mini"}},
		{Tenant: "sub1", Holder: "partner:p1", AllowedClasses: []string{"batch"}},
	}
	return c
}

func batchKey(opts ...reqOpt) []reqOpt {
	return append([]reqOpt{func(ev *schemas.Event) {
		ev.Tenant, ev.KeyID, ev.Route = "batchco", "batch-key", "gpt-mini"
		ev.ReserveRequested.Path = []schemas.PathLevel{{Level: "tenant", ID: "batchco"}, {Level: "key", ID: "batch-key"}}
	}, class("batch")}, opts...)
}

func route(r string) reqOpt { return func(ev *schemas.Event) { ev.Route = r } }

// wantRefusal checks the step's one decision: never retryable, naming the
// holder, and nothing reserved.
func wantRefusal(holder string) func(t *testing.T, l *Ledger, out []Output) {
	return func(t *testing.T, l *Ledger, out []Output) {
		t.Helper()
		d := out[0].Decision
		if d.LimitPath != holder || d.RetryClass != schemas.RetryRequestError {
			t.Fatalf("limit_path %q retry_class %q, want %q request_error", d.LimitPath, d.RetryClass, holder)
		}
		if _, ok := l.resFind(out[0].RequestID, out[0].Attempt); ok {
			t.Fatalf("%s/%d was recorded; a refusal reserves nothing", out[0].RequestID, out[0].Attempt)
		}
	}
}

func TestEntitlementsReserve(t *testing.T) {
	runSteps(t, entitledConfig(), []step{
		// The D6 forgery: the batch key asks for interactive at priority
		// 100 in an event no gateway checked.
		{At: 0, Ev: reserve("forged", batchKey(class("interactive"), priority(100))...),
			Want: []string{"forged/1 denied class_not_entitled rejected_policy"}, Check: wantRefusal("tenant:batchco")},
		// Redelivered: refused again, the same way (nothing was recorded).
		{At: 1, Ev: reserve("forged", batchKey(class("interactive"), priority(100))...),
			Want: []string{"forged/1 denied class_not_entitled rejected_policy"}},
		{At: 2, Ev: reserve("p100", batchKey(priority(100))...),
			Want: []string{"p100/1 denied priority_not_entitled rejected_policy"}, Check: wantRefusal("tenant:batchco")},
		{At: 3, Ev: reserve("model", batchKey(route("gpt"))...),
			Want: []string{"model/1 denied model_not_allowed rejected_policy"}, Check: wantRefusal("key:batch-key")},
		// Within every entitlement: granted.
		{At: 4, Ev: reserve("ok", batchKey()...), Want: []string{"ok/1 granted admitted"}},
		{At: 5, Ev: reserve("agent", batchKey(class("agent"), priority(-50))...), Want: []string{"agent/1 granted admitted"}},
		// The envelope names an unbounded tenant, the path batchco: both
		// are held to account.
		{At: 6, Ev: reserve("split", batchKey(class("interactive"), func(ev *schemas.Event) { ev.Tenant = "other" })...),
			Want: []string{"split/1 denied class_not_entitled rejected_policy"}, Check: wantRefusal("tenant:batchco")},
		// The path's team etl caps priority lower than its tenant does.
		{At: 7, Ev: reserve("team", batchKey(priority(-5), path("tenant", "batchco", "team", "etl", "key", "batch-key"))...),
			Want: []string{"team/1 denied priority_not_entitled rejected_policy"}, Check: wantRefusal("team:etl")},
		// A team etl of another tenant is not batchco's.
		{At: 8, Ev: reserve("otherteam", tenant("acme"), priority(100), path("tenant", "acme", "team", "etl")),
			Want: []string{"otherteam/1 granted admitted"}},
		// A partner's entitlement bounds its sub-tenant, named as the partner's.
		{At: 9, Ev: reserve("sub", tenant("sub1")),
			Want: []string{"sub/1 denied class_not_entitled rejected_policy"}, Check: wantRefusal("partner:p1")},
		{At: 10, Ev: reserve("subok", tenant("sub1"), class("batch")), Want: []string{"subok/1 granted admitted"}},
		// A tenant without entitlements asks for anything.
		{At: 11, Ev: reserve("free", tenant("acme"), priority(100)), Want: []string{"free/1 granted admitted"}},
	})
}

// A retry reuses its first attempt's class, priority and route; an
// entitlement installed in between refuses it, and the first attempt's
// grant is given back.
func TestEntitlementsRetry(t *testing.T) {
	open := testConfig(rpm(LevelScope, "s", 600, 60_000))
	closed := entitledConfig()
	runSteps(t, open, []step{
		{At: 0, Ev: reserve("r", batchKey(class("interactive"), priority(100))...), Want: []string{"r/1 granted admitted"}},
		{At: 1, Ev: reserve("team", batchKey(class("agent"), priority(-5), path("tenant", "batchco", "team", "etl", "key", "batch-key"))...),
			Want: []string{"team/1 granted admitted"}},
		{At: 10, Ev: configEv(t, closed)},
		{At: 20, Ev: retryEv("r", 1, schemas.RetryCapacity, 0),
			Want: []string{"r/2 denied class_not_entitled rejected_policy"}, Check: wantRefusal("tenant:batchco")},
		// The team is not a bucket level here, yet the retry knows it.
		{At: 21, Ev: retryEv("team", 1, schemas.RetryCapacity, 0),
			Want: []string{"team/2 denied priority_not_entitled rejected_policy"},
			Check: func(t *testing.T, l *Ledger, out []Output) {
				wantRefusal("team:etl")(t, l, out)
				for _, id := range []string{"r", "team"} {
					if ri, ok := l.resFind(id, 1); !ok || l.st.Res[ri].State != stReleased {
						t.Fatalf("%s/1 not released (found %v); a refused retry gives its first attempt back", id, ok)
					}
				}
			}},
	})
}

// The check survives a snapshot: the entitlements are part of the config
// in the state.
func TestEntitlementsSnapshot(t *testing.T) {
	l := New(0, entitledConfig())
	snap, err := l.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	l2, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	out := l2.Apply(5, 0, reserve("forged", batchKey(class("interactive"), priority(100))...), nil)
	if len(out) != 1 || render(&out[0]) != "forged/1 denied class_not_entitled rejected_policy" {
		t.Fatalf("after restore: %v", out)
	}
}

func TestEntitlementsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    EntitlementConfig
		want string
	}{
		{"unknown class", EntitlementConfig{Tenant: "a", AllowedClasses: []string{"premium"}}, `entitlements[0].allowed_classes[0]: "premium" is not a class`},
		{"no tenant", EntitlementConfig{Key: "k", MaxPriority: prio(0)}, "entitlements[0].tenant: required"},
		{"team and key", EntitlementConfig{Tenant: "a", Team: "t", Key: "k", MaxPriority: prio(0)}, "names both team"},
		{"bounds nothing", EntitlementConfig{Tenant: "a"}, "bounds nothing"},
		{"priority", EntitlementConfig{Tenant: "a", MaxPriority: prio(101)}, "entitlements[0].max_priority: 101 out of [-100, 100]"},
		{"empty profile", EntitlementConfig{Tenant: "a", AllowedProfiles: []string{""}}, "entitlements[0].allowed_profiles[0]: empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(rpm(LevelScope, "s", 600, 60_000))
			c.Entitlements = []EntitlementConfig{tc.e}
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	c := entitledConfig()
	c.Entitlements = append(c.Entitlements, c.Entitlements[1])
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "entitlements[4]: duplicate entitlement of team:etl") {
		t.Fatalf("duplicate: %v", err)
	}
	if err := entitledConfig().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}

// A ConfigChanged that installs an entitlement is one line per holder in
// the config diff, keyed by the holder, not by index.
func TestEntitlementsConfigDiff(t *testing.T) {
	a := entitledConfig()
	b := entitledConfig()
	b.Entitlements = append([]EntitlementConfig{{Tenant: "acme", Key: "k9", MaxPriority: prio(10)}}, b.Entitlements...)
	b.Entitlements[2].MaxPriority = prio(-20)
	var got []string
	for _, d := range DiffConfigs(configEv(t, a).ConfigChanged.Ledger, configEv(t, b).ConfigChanged.Ledger) {
		got = append(got, d.String())
	}
	want := []string{
		`+ entitlements[acme/key:k9]: {"key":"k9","max_priority":10,"tenant":"acme"}`,
		"~ entitlements[batchco/team:etl].max_priority: -10 → -20",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A document without entitlements pays nothing for the check, and one
// with them allocates nothing on the hot path.
func TestEntitlementsAllocs(t *testing.T) {
	l := New(0, entitledConfig())
	ev := reserve("x", batchKey(class("interactive"))...)
	out := make([]Output, 0, 4)
	n := testing.AllocsPerRun(100, func() { out = l.Apply(0, 0, ev, out[:0]) })
	if n != 0 {
		t.Fatalf("%v allocations per refused reserve", n)
	}
}

// BenchmarkReserveReconcile6x4Entitled is BenchmarkReserveReconcile6x4
// with every tenant, team and key of the workload entitled (all classes,
// priority ≤ 100, route gpt-4o): what the check costs on the hot path.
func BenchmarkReserveReconcile6x4Entitled(b *testing.B) {
	w := NewBenchWorkload()
	cfg := BenchConfig()
	all := []string{"interactive", "agent", "batch"}
	for t := range 64 {
		ts := strconv.Itoa(t)
		cfg.Entitlements = append(cfg.Entitlements,
			EntitlementConfig{Tenant: "t" + ts, AllowedClasses: all, MaxPriority: prio(100)},
			EntitlementConfig{Tenant: "t" + ts, Team: "team" + ts, MaxPriority: prio(100)})
	}
	for k := range 256 {
		cfg.Entitlements = append(cfg.Entitlements, EntitlementConfig{Tenant: "t" + strconv.Itoa(k%64), Key: "k" + strconv.Itoa(k), AllowedProfiles: []string{"gpt-4o"}})
	}
	w.out = w.l.Apply(w.nowMs, w.offset, configEv(b, cfg), w.out[:0])
	w.offset++
	if e := w.l.ConfigError(); e != "" {
		b.Fatal(e)
	}
	w.Run(2 * benchPool)
	b.ReportAllocs()
	b.ResetTimer()
	var decisions, granted int64
	for b.Loop() {
		d, g := w.Step()
		decisions += int64(d)
		granted += int64(g)
	}
	if granted == 0 {
		b.Fatal("nothing granted: the entitlements refuse the workload")
	}
	b.ReportMetric(float64(decisions)/b.Elapsed().Seconds(), "decisions/s")
}
