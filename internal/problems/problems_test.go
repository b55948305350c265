package problems

import (
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// sample is a config type with the shapes Check must handle: nested
// structs, lists, maps, pointers, an inlined struct and a yaml.Node left
// to its owner.
type sample struct {
	Name    string           `yaml:"name"`
	Count   int64            `yaml:"count"`
	Small   int8             `yaml:"small"`
	Ratio   float64          `yaml:"ratio"`
	On      *bool            `yaml:"on"`
	Items   []item           `yaml:"items"`
	ByName  map[string]int64 `yaml:"by_name"`
	Raw     yaml.Node        `yaml:"raw"`
	inlined `yaml:",inline"`
}

type inlined struct {
	Extra string `yaml:"extra"`
}

type item struct {
	ID       string `yaml:"id"`
	Capacity int64  `yaml:"capacity"`
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // problem lines, in order
	}{
		{"fits", "name: a\ncount: 3\nratio: 0.5\non: true\nitems: [{id: x, capacity: 1}]\nby_name: {a: 1}\nraw: [anything]\nextra: e\n", nil},
		{"empty", "", nil},
		{"unknown field with a suggestion", "items:\n  - {id: x, capacty: 1}\n", []string{
			`2:13: items[0].capacty: unknown field "capacty" (did you mean capacity?)`}},
		{"unknown field, short list of fields", "itemz: 1\n", []string{
			`1:1: itemz: unknown field "itemz" (did you mean items?)`}},
		{"wrong scalar types", "count: lots\nratio: x\non: maybe\nsmall: 300\n", []string{
			`1:8: count: want a whole number, got "lots"`,
			`2:8: ratio: want a number, got "x"`,
			`3:5: on: want true or false, got "maybe"`,
			`4:8: small: 300 does not fit: want a whole number from -128 to 127`}},
		{"whole numbers written as floats, floats as integers", "small: 2.0\nratio: 3\n", nil},
		{"a fraction for a whole number", "count: 1.5\n", []string{`1:8: count: want a whole number, got 1.5`}},
		{"a whole number too large", "count: 5000000000000000000000\n", []string{
			`1:8: count: 5000000000000000000000 does not fit: want a whole number from -9223372036854775808 to 9223372036854775807`}},
		{"wrong shapes", "items: {id: x}\nby_name: [1]\nname: [a]\n", []string{
			`1:8: items: want a list, got a mapping`,
			`2:10: by_name: want a mapping, got a list`,
			`3:7: name: want a string, got a list`}},
		{"a field set twice", "name: a\nname: b\n", []string{
			`2:1: name: name is set twice (first at line 1)`}},
		{"syntax", "name: [\n", []string{
			`1:1: cannot parse YAML: did not find expected node content`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var l List
			var s sample
			l.DecodeYAML([]byte(tc.doc), &s)
			var got []string
			if l.Err() != nil {
				got = l.Lines()
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// TestConsequencesDropped: a value that failed to decode, and a field
// missing because of a typo, take no further problem; others still count.
func TestConsequencesDropped(t *testing.T) {
	var l List
	var s sample
	l.DecodeYAML([]byte("items:\n  - {id: x, capacty: 1}\n  - {id: y, capacity: lots}\n"), &s)
	l.Add("items[0].capacity", "0 out of [1, 10]") // the typo's consequence
	l.Add("items[1].capacity", "0 out of [1, 10]") // the misfit's consequence
	l.Add("items[1]", "duplicate item")            // not a consequence
	l.Merge("items[1]", &List{Problems: []Problem{{Path: "capacity", Msg: "again"}}})
	if l.Len() != 3 {
		t.Fatalf("%d problems, want 3:\n%v", l.Len(), l.Err())
	}
	if !l.Has("items[1]") || l.Has("name") || !l.Failed("items[1].capacity.x") {
		t.Error("Has/Failed disagree with the problems")
	}
}

func TestErrorFormat(t *testing.T) {
	l := &List{Subject: "config f.yaml", File: "f.yaml"}
	root := l.Parse([]byte("a:\n  b: 1\n"))
	l.Locate(root, "")
	l.Add("a.b", "bad")
	l.Add("a.c", "missing") // a missing field is reported at its object
	want := "config f.yaml: 2 problems\nf.yaml:2:3: a.c: missing\nf.yaml:2:6: a.b: bad"
	if got := l.Err().Error(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if got := (&List{Subject: "ledger config", Problems: []Problem{{Path: "x", Msg: "y"}}}).Error(); got != "ledger config: 1 problem\nx: y" {
		t.Errorf("one problem without a file: %q", got)
	}
	if (&List{}).Err() != nil {
		t.Error("an empty list is an error")
	}
}

func TestPaths(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Join("", "a"), "a"},
		{Join("ledger", "scopes[0]"), "ledger.scopes[0]"},
		{Join("ledger.scopes", "[0]"), "ledger.scopes[0]"},
		{Join("a", ""), "a"},
		{Index("buckets", 3), "buckets[3]"},
		{Parent("a.b[2].c"), "a.b[2]"},
		{Parent("a.b[2]"), "a.b"},
		{Parent("a"), ""},
		{Suggest("agentz", []string{"agents", "web"}), "agents"},
		{Suggest("rate_rps", []string{"rate", "weight"}), "rate"},
		{Suggest("zzz", []string{"agents", "web"}), ""},
		{DidYouMean("qqqq", []string{"a", "", "b"}), " (known: a, b)"},
		{Count(1, "problem"), "1 problem"},
		{Count(0, "problem"), "0 problems"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// FuzzCheck: for any document, Check never panics, and what it returns
// decodes into the type without error (every misfit was reported and
// replaced), so validation always runs on what did fit.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		"name: a\ncount: 3\nitems: [{id: x, capacity: 1}]\n",
		"items:\n  - {id: x, capacty: lots}\nby_name: {a: [1]}\n",
		"count: 1e400\nsmall: -129\non: yes\nraw: {x: 1}\n",
		"a: &x {b: 1}\nitems: [*x]\n<<: {name: q}\n",
		"[1, 2]",
		"name: [\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var l List
		root := l.Parse(doc)
		if root == nil {
			if l.Len() != 1 {
				t.Fatalf("syntax error without its problem: %v", l.Err())
			}
			return
		}
		clean := l.Check(root, "", reflect.TypeOf(sample{}), TagYAML)
		var s sample
		if err := clean.Decode(&s); err != nil {
			t.Fatalf("checked node does not decode: %v\n%s", err, doc)
		}
		var j item
		l.DecodeJSONNode(root, "", &j)
	})
}
