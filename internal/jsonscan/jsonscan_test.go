package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// wantObject is Object's verdict from encoding/json: one valid JSON text
// whose value is an object.
func wantObject(b []byte) bool {
	return json.Valid(b) && firstNonSpace(b) == '{'
}

func firstNonSpace(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func TestObject(t *testing.T) {
	type member struct {
		key, value string
		escaped    bool
	}
	for _, tc := range []struct {
		in      string
		ok      bool
		members []member
	}{
		{in: `{}`, ok: true},
		{in: " \n{ }\t", ok: true},
		{in: `{"a":1,"b":[true,false,null],"c":{"d":"e"}}`, ok: true,
			members: []member{{"a", "1", false}, {"b", "[true,false,null]", false}, {"c", `{"d":"e"}`, false}}},
		{in: `{"a\"b" : -0.5e+3 }`, ok: true, members: []member{{`a\"b`, "-0.5e+3", true}}},
		{in: `{"u":"\u00e9\n"}`, ok: true, members: []member{{"u", `"\u00e9\n"`, false}}},
		{in: "{\"a\":\"\xff\"}", ok: true, members: []member{{"a", "\"\xff\"", false}}}, // invalid UTF-8 is accepted
		{in: `{"a":1,}`},
		{in: `{"a":01}`},
		{in: `{"a":1.}`},
		{in: `{"a":.5}`},
		{in: `{"a":1e}`},
		{in: `{"a":-}`},
		{in: `{"a":tru}`},
		{in: `{"a":"\x"}`},
		{in: `{"a":"\u12g4"}`},
		{in: "{\"a\":\"\x01\"}"},
		{in: `{"a":[1,]}`},
		{in: `{"a":1}x`},
		{in: `{"a":1} {}`},
		{in: `[]`},
		{in: `{a:1}`},
		{in: `{"a" 1}`},
		{in: `{"a":1`},
		{in: "{\"a\":1}\v"},
		{in: ``},
	} {
		var got []member
		ok := Object([]byte(tc.in), func(k []byte, esc bool, v []byte) {
			got = append(got, member{string(k), string(v), esc})
		})
		if ok != tc.ok || ok != wantObject([]byte(tc.in)) {
			t.Errorf("Object(%q) = %v, want %v (json.Valid says %v)", tc.in, ok, tc.ok, wantObject([]byte(tc.in)))
			continue
		}
		if ok && len(got) != len(tc.members) {
			t.Errorf("Object(%q) members %+v, want %+v", tc.in, got, tc.members)
			continue
		}
		for i := range tc.members {
			if ok && got[i] != tc.members[i] {
				t.Errorf("Object(%q) member %d = %+v, want %+v", tc.in, i, got[i], tc.members[i])
			}
		}
	}
}

// TestObjectDepth: encoding/json refuses nesting deeper than 10000, and so
// does Object (the caller's encoding/json path then says why).
func TestObjectDepth(t *testing.T) {
	for _, depth := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		in := []byte(`{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
		if got, want := Object(in, func([]byte, bool, []byte) {}), wantObject(in); got != want {
			t.Errorf("depth %d: Object = %v, json.Valid = %v", depth, got, want)
		}
	}
}

func TestKeyIs(t *testing.T) {
	for _, tc := range []struct {
		key         string
		escaped     bool
		match, sure bool
	}{
		{"usage", false, true, true},
		{"USAGE", false, true, true},
		{"Usage", false, true, true},
		{"usages", false, false, true},
		{"usagf", false, false, true},
		{`\u0075sage`, true, false, false},
		{"u\u017fage", false, false, false}, // the long s folds to s in encoding/json
	} {
		match, sure := KeyIs([]byte(tc.key), tc.escaped, "usage")
		if match != tc.match || sure != tc.sure {
			t.Errorf("KeyIs(%q) = %v, %v; want %v, %v", tc.key, match, sure, tc.match, tc.sure)
		}
	}
}

// FuzzObject: Object accepts exactly the objects json.Valid accepts (Array
// the arrays), and
// its members are the object's, in order, as encoding/json reads them.
func FuzzObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":[true,null,{"c":"d\u00e9"}],"e":-1.5E-3}`, `{"a":"\"}`, `{"a":1,}`, "{\"a\":\"\x00\"}", ` {"usage":{"prompt_tokens":3}} `, `[1,{"a":[]},"b"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var keys, vals [][]byte
		ok := Object(b, func(k []byte, _ bool, v []byte) { keys, vals = append(keys, k), append(vals, v) })
		if want := wantObject(b); ok != want {
			t.Fatalf("Object(%q) = %v, encoding/json says %v", b, ok, want)
		}
		if got, want := Array(b, func([]byte) {}), json.Valid(b) && firstNonSpace(b) == '['; got != want {
			t.Fatalf("Array(%q) = %v, encoding/json says %v", b, got, want)
		}
		if !ok {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		if _, err := dec.Token(); err != nil { // '{'
			t.Fatal(err)
		}
		for i := 0; dec.More(); i++ {
			tok, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			var k string
			if err := json.Unmarshal(append(append([]byte{'"'}, keys[i]...), '"'), &k); err != nil || k != tok.(string) {
				t.Fatalf("member %d: key %q, encoding/json reads %q (%v)", i, keys[i], tok, err)
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil || !bytes.Equal(raw, vals[i]) {
				t.Fatalf("member %d: value %q, encoding/json reads %q (%v)", i, vals[i], raw, err)
			}
		}
	})
}

func TestArray(t *testing.T) {
	for _, tc := range []struct {
		in    string
		ok    bool
		elems []string
	}{
		{in: `[]`, ok: true},
		{in: ` [ 1 , "a" ,{"b":[]}, null ] `, ok: true, elems: []string{"1", `"a"`, `{"b":[]}`, "null"}},
		{in: `[1,]`},
		{in: `[1`},
		{in: `{}`},
		{in: `[1] 2`},
	} {
		var got []string
		ok := Array([]byte(tc.in), func(v []byte) { got = append(got, string(v)) })
		want := json.Valid([]byte(tc.in)) && firstNonSpace([]byte(tc.in)) == '['
		if ok != tc.ok || ok != want {
			t.Errorf("Array(%q) = %v, want %v (json.Valid says %v)", tc.in, ok, tc.ok, want)
			continue
		}
		if ok && strings.Join(got, "|") != strings.Join(tc.elems, "|") {
			t.Errorf("Array(%q) elements %q, want %q", tc.in, got, tc.elems)
		}
	}
}
