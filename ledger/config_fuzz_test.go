package ledger

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// FuzzParseConfig: any document is refused with an error or accepted as a
// config that validates, compiles, and survives a JSON round trip (the
// form it takes in snapshots) unchanged.
func FuzzParseConfig(f *testing.F) {
	for _, name := range []string{"testdata/example_config.json", "testdata/bad_config.json", "testdata/bad_decode.json"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"scopes":[{"name":"*","required_levels":["tenant","deployment"],"buckets":[{"level":"deployment","id":"d","dimension":"requests","capacity":5}]}]}`))
	f.Add([]byte(`{"scopes":[{"name":"s","required_levels":[],"buckets":[]}]}`))
	f.Add([]byte(`{"scopes":[{"name":"s","required_levels":null}]}`))
	f.Add([]byte(`{"scopes":[{"name":"s"}],"entitlements":[{"tenant":"t","allowed_classes":["batch"],"max_priority":0},{"tenant":"t","key":"k","holder":"partner:p","allowed_profiles":["gpt"]},{"tenant":"t","team":"x","key":"k"}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := ParseConfig(doc)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config does not validate: %v", err)
		}
		compile(&c)
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseConfig(b)
		if err != nil {
			t.Fatalf("round trip refused: %v", err)
		}
		for i := range c.Scopes {
			if !reflect.DeepEqual(c.Scopes[i].RequiredLevels, c2.Scopes[i].RequiredLevels) {
				t.Fatalf("scope %d required_levels %q became %q", i, c.Scopes[i].RequiredLevels, c2.Scopes[i].RequiredLevels)
			}
		}
	})
}

// FuzzDiffConfigs: any two documents diff without panicking, a document
// never differs from itself, and every reported difference names a path
// and changes something.
func FuzzDiffConfigs(f *testing.F) {
	f.Add([]byte(`{"scopes":[{"name":"s","buckets":[{"level":"key","id":"*","dimension":"requests","capacity":600}]}]}`),
		[]byte(`{"scopes":[{"name":"s","buckets":[{"level":"key","id":"*","dimension":"requests","capacity":300,"shadow":true}]}]}`))
	f.Add([]byte(`[1,{"a":[]}]`), []byte(`"x"`))
	f.Add([]byte(``), []byte(`{"scopes":[]}`))
	f.Add([]byte(`{"scopes":[{"name":"s"}],"entitlements":[{"tenant":"t","max_priority":0}]}`),
		[]byte(`{"scopes":[{"name":"s"}],"entitlements":[{"tenant":"t","team":"w","max_priority":-5},{"tenant":"t","max_priority":1}]}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if d := DiffConfigs(a, a); len(d) != 0 {
			t.Fatalf("a document differs from itself: %v", d)
		}
		for _, d := range DiffConfigs(a, b) {
			if d.Old == d.New {
				t.Fatalf("a difference that changes nothing: %+v", d)
			}
		}
	})
}
