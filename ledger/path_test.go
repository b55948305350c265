package ledger

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestRequiredLevels: the ledger, not the caller, decides the path. A
// request whose path leaves out a level its scope requires is denied with
// path_missing_level, names the missing levels and reserves nothing; the
// same request with the level is granted.
func TestRequiredLevels(t *testing.T) {
	cfg := testConfig(
		rpm("key", "*", 60, 60_000),
		rpm("deployment", "dep1", 1, 60_000),
	)
	cfg.Scopes[0].RequiredLevels = []string{LevelTenant, LevelKey, LevelDeployment}
	full := path("tenant", "t1", "key", "k1", "deployment", "dep1")
	missing := func(levels string) func(*testing.T, *Ledger, []Output) {
		return func(t *testing.T, l *Ledger, out []Output) {
			t.Helper()
			d := out[0].Decision
			if d.LimitPath != levels || d.RetryClass != schemas.RetryRequestError {
				t.Errorf("limit_path %q retry_class %q, want %q %q", d.LimitPath, d.RetryClass, levels, schemas.RetryRequestError)
			}
			if n := l.liveRes(); n != 0 {
				t.Errorf("%d live reservations after a path denial, want 0", n)
			}
			if len(l.st.Nodes) != 0 {
				t.Errorf("%d nodes stamped for a denied path, want 0", len(l.st.Nodes))
			}
		}
	}
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("nodep", path("tenant", "t1", "key", "k1")),
			Want: []string{"nodep/1 denied path_missing_level rejected_locally"}, Check: missing("deployment")},
		{At: 0, Ev: reserve("empty-id", path("tenant", "t1", "key", "k1", "deployment", "")),
			Want: []string{"empty-id/1 denied path_missing_level rejected_locally"}, Check: missing("deployment")},
		{At: 0, Ev: reserve("typo", path("tenant", "t1", "keys", "k1", "deployment", "dep1")),
			Want: []string{"typo/1 denied path_missing_level rejected_locally"}, Check: missing("key")},
		{At: 0, Ev: reserve("bare", path()),
			Want: []string{"bare/1 denied path_missing_level rejected_locally"}, Check: missing("tenant/key/deployment")},
		// A redelivery is refused again, identically: nothing was recorded.
		{At: 0, Ev: reserve("nodep", path("tenant", "t1", "key", "k1")),
			Want: []string{"nodep/1 denied path_missing_level rejected_locally"}, Check: missing("deployment")},
		{At: 0, Ev: reserve("a", full), Want: []string{"a/1 granted admitted"}},
		// The deployment's one request per minute is taken: a path without
		// the deployment may not slip past it.
		{At: 0, Ev: reserve("b", path("tenant", "t1", "key", "k1"), maxWait(1)),
			Want: []string{"b/1 denied path_missing_level rejected_locally"}},
		{At: 0, Ev: reserve("c", full, maxWait(1)), Want: []string{"c/1 denied wait_exceeds_max rejected_locally"}},
		// Order does not matter; extra levels are fine.
		{At: 60_000, Ev: reserve("d", path("deployment", "dep1", "org", "o", "key", "k1", "tenant", "t1")), Want: []string{"d/1 granted admitted"}},
	})
}

// TestRequiredLevelsDefault: by default every level with a "*" bucket and
// the deployment level (any bucket) are required; a level with exact-id
// buckets only is not; [] requires nothing.
func TestRequiredLevelsDefault(t *testing.T) {
	cases := []struct {
		name    string
		buckets []BucketConfig
		set     []string // nil: default
		want    []string
	}{
		{"key template", []BucketConfig{rpm("key", "*", 60, 1000)}, nil, []string{"key"}},
		{"exact deployment", []BucketConfig{rpm("key", "*", 60, 1000), rpm("deployment", "dep1", 60, 1000)}, nil, []string{"key", "deployment"}},
		{"exact team only", []BucketConfig{rpm("team", "search", 60, 1000)}, nil, []string{}},
		{"scope level is implicit", []BucketConfig{rpm("scope", "*", 60, 1000)}, nil, []string{}},
		{"explicit none", []BucketConfig{rpm("deployment", "*", 60, 1000)}, []string{}, []string{}},
		{"explicit", []BucketConfig{rpm("key", "*", 60, 1000)}, []string{"org"}, []string{"org"}},
	}
	for _, c := range cases {
		cfg := Config{Scopes: []ScopeConfig{{Name: "s", Buckets: c.buckets, RequiredLevels: c.set}}}
		cfg.fillDefaults()
		if got := cfg.Scopes[0].RequiredLevels; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: required_levels %q, want %q", c.name, got, c.want)
		}
	}
}

// TestRequiredLevelsSurviveSnapshot: an explicit empty list stays empty
// through a snapshot (it is not taken for "absent" and defaulted), so a
// restored ledger decides as the live one did.
func TestRequiredLevelsSurviveSnapshot(t *testing.T) {
	cfg := testConfig(rpm("deployment", "*", 60, 1000))
	cfg.Scopes[0].RequiredLevels = []string{}
	l := New(0, cfg)
	b, err := l.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Restore(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.st.Config.Scopes[0].RequiredLevels; got == nil || len(got) != 0 {
		t.Fatalf("required_levels after restore = %#v, want []", got)
	}
	out := r.Apply(0, 0, reserve("x"), nil)
	if len(out) != 1 || out[0].Decision.Status != schemas.StatusGranted {
		t.Fatalf("restored ledger: %+v", out)
	}
}

// TestRequiredLevelsValidation: unknown, implicit and repeated levels are
// each reported, with every other problem of the document.
func TestRequiredLevelsValidation(t *testing.T) {
	doc := `{"scopes":[{"name":"s","required_levels":["tenant","galaxy","scope","tenant"],
	  "buckets":[{"level":"key","id":"*","dimension":"requests","capacity":-1}]}]}`
	_, err := ParseConfig([]byte(doc))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`scopes[0].required_levels[1]: unknown level "galaxy"`,
		"scopes[0].required_levels[2]: the scope level is on every path already",
		`scopes[0].required_levels[3]: duplicate level "tenant"`,
		"scopes[0].buckets[0].capacity",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestRequiredLevelUnknownID: a required level whose limits are all per id
// (the deployment: the provider's quota) refuses a path naming an id the
// config does not list, with path_unknown_id (never retryable, limit_path
// = the level:id) and nothing reserved: such a path would charge none of
// the level's limits (issue 19, D5: "deployment:evil-deployment" was
// granted a burst of 60 that the real id queues). A level with a "*"
// template knows every id; a level that is not required, or has no
// enforced bucket, is not checked; a shadow bucket is not a limit.
func TestRequiredLevelUnknownID(t *testing.T) {
	buckets := []BucketConfig{
		rpm("key", "*", 600, 60_000),
		rpm("deployment", "dep1", 600, 60_000),
		{Level: "deployment", ID: "dep2", Dimension: schemas.DimRequests, Capacity: 600, PeriodMs: 60_000, WindowMs: 60_000, Shadow: true},
		rpm("team", "search", 600, 60_000),
	}
	cfg := testConfig(buckets...)
	cfg.Scopes[0].RequiredLevels = []string{LevelTenant, LevelKey, LevelDeployment}
	// The same document once the operator adds the deployment.
	cfg2 := testConfig(append(buckets, rpm("deployment", "evil-deployment", 600, 60_000))...)
	cfg2.Scopes[0].RequiredLevels = cfg.Scopes[0].RequiredLevels
	unknown := func(want string) func(*testing.T, *Ledger, []Output) {
		return func(t *testing.T, l *Ledger, out []Output) {
			t.Helper()
			d := out[0].Decision
			if d.LimitPath != want || d.RetryClass != schemas.RetryRequestError {
				t.Errorf("limit_path %q retry_class %q, want %q %q", d.LimitPath, d.RetryClass, want, schemas.RetryRequestError)
			}
			if n := l.liveRes(); n != 0 {
				t.Errorf("%d live reservations after a path denial, want 0", n)
			}
		}
	}
	dep := func(ids ...string) reqOpt {
		p := []string{"tenant", "t1", "key", "k1"}
		for _, id := range ids {
			p = append(p, "deployment", id)
		}
		return path(p...)
	}
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("evil", dep("evil-deployment")),
			Want: []string{"evil/1 denied path_unknown_id rejected_locally"}, Check: unknown("deployment:evil-deployment")},
		// A redelivery is refused again, identically.
		{At: 0, Ev: reserve("evil", dep("evil-deployment")),
			Want: []string{"evil/1 denied path_unknown_id rejected_locally"}, Check: unknown("deployment:evil-deployment")},
		{At: 0, Ev: reserve("shadow", dep("dep2")),
			Want: []string{"shadow/1 denied path_unknown_id rejected_locally"}, Check: unknown("deployment:dep2")},
		// The level's first entry is the one the path charges.
		{At: 0, Ev: reserve("first", dep("evil-deployment", "dep1")),
			Want: []string{"first/1 denied path_unknown_id rejected_locally"}, Check: unknown("deployment:evil-deployment")},
		{At: 0, Ev: reserve("a", dep("dep1", "evil-deployment")), Want: []string{"a/1 granted admitted"}},
		// The tenant level has no bucket and the team level is not
		// required: any id passes.
		{At: 0, Ev: reserve("b", path("tenant", "anyone", "key", "k1", "team", "other", "deployment", "dep1")), Want: []string{"b/1 granted admitted"}},
		{At: 1, Ev: configEv(t, cfg2)},
		{At: 1, Ev: reserve("c", dep("evil-deployment")), Want: []string{"c/1 granted admitted"}},
	})

	// A "*" template at the level knows every id: it limits each.
	tmpl := testConfig(rpm("deployment", "*", 600, 60_000), rpm("deployment", "dep1", 60, 60_000))
	runSteps(t, tmpl, []step{
		{At: 0, Ev: reserve("x", path("deployment", "evil-deployment")), Want: []string{"x/1 granted admitted"}},
	})
}
