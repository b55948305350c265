package ledger

import (
	"encoding/json"
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

// TestParseConfigDecodeProblems: a document that does not decode reports
// every problem of decoding at its line:column and path, in plain words
// (not encoding/json's first error in Go's terms), with validation's
// problems of what did decode, and none that is a consequence of another:
// the misspelt capacity is not also "capacity 0", the capacity in words
// not also "guaranteed above capacity".
func TestParseConfigDecodeProblems(t *testing.T) {
	b, err := os.ReadFile("testdata/bad_decode.json")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseConfig(b)
	want := `ledger config: 5 problems
6:65: scopes[0].buckets[0].capacty: unknown field "capacty" (did you mean capacity?)
7:74: scopes[0].buckets[1].capacity: want a whole number, got "lots"
8:32: scopes[0].buckets[2].id: want a string, got 7 (quote it: "7")
8:76: scopes[0].buckets[2].capacity: -5 out of [1, 2^61]
12:96: classes[0].colour: unknown field "colour" (known: name, age_offset_ms, max_wait_ms, max_depth, overload, deadline_ms, max_deadline_ms)`
	if err == nil || err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
}
