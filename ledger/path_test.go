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
