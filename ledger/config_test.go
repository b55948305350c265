package ledger

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
)

func TestExampleConfigParses(t *testing.T) {
	b, err := os.ReadFile("testdata/example_config.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Scopes) != 2 || c.Classes[0].Name != "interactive" {
		t.Fatalf("%+v", c)
	}
}

func TestDefaultDevConfigValid(t *testing.T) {
	c := DefaultDevConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(c)
	if _, err := ParseConfig(b); err != nil {
		t.Fatalf("round trip: %v", err)
	}
}

func TestParseConfigListsEveryProblem(t *testing.T) {
	b, err := os.ReadFile("testdata/bad_config.json")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseConfig(b)
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{
		"scopes[0].buckets[0].level: unknown level",
		`scopes[0].required_levels[1]: unknown level "galaxy"`,
		"scopes[0].buckets[1].capacity",
		"scopes[0].buckets[2].window_ms",
		"scopes[0].buckets[3].refill: unknown refill kind",
		"classes[1].name: duplicate",
		"retry.max_ms",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, err := ParseConfig([]byte(`{"scopes":[],"bogus":1}`)); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown field not reported: %v", err)
	}
}

// TestParseConfigProblemsGolden: each bad document's whole error, as
// golden (testdata/NAME.golden; -update-config rewrites them): every
// problem at its line:column and path, decode problems in plain words (not
// encoding/json's first error in Go's terms), in file order, and none that
// is a consequence of another (bad_decode.json: the misspelt capacity is
// not also "capacity 0", the capacity in words not also "guaranteed above
// capacity"; bad_config.json: capacity -1 is not also guaranteed and
// borrow_reserve out of range).
func TestParseConfigProblemsGolden(t *testing.T) {
	for _, name := range []string{"bad_config", "bad_decode"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile("testdata/" + name + ".json")
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseConfig(b)
			if err == nil {
				t.Fatal("bad config accepted")
			}
			got := err.Error() + "\n"
			golden := "testdata/" + name + ".golden"
			if *updateConfig {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("error:\n%s\nwant (%s):\n%s", got, golden, want)
			}
		})
	}
}

var updateConfig = flag.Bool("update-config", false, "rewrite testdata/*.golden of TestParseConfigProblemsGolden")
