package sim

import (
	"encoding/json"
	"testing"
)

// FuzzGenJSON: any schema a request carries (tool parameters, a
// json_schema response format) gives a value that marshals, within the
// generator's node bound, and a valid one for the seeds' shapes.
func FuzzGenJSON(f *testing.F) {
	for _, s := range []string{
		weatherTool,
		`{"type":"object","properties":{"a":{"$ref":"#"},"b":{"$ref":"#"},"c":{"$ref":"#"}},"required":["a","b","c"]}`,
		`{"type":"array","minItems":16,"items":{"type":"array","minItems":16,"items":{"$ref":"#"}}}`,
		`{"anyOf":[{"type":"null"},{"allOf":[{"$ref":"#/$defs/x"}]}],"$defs":{"x":{"type":["integer","null"],"minimum":1e300}}}`,
		`{"type":"string","minLength":1e9,"maxLength":-3}`,
		`[]`, `{"$ref":"#/a~1b/~0"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var schema any
		if json.Unmarshal(raw, &schema) != nil {
			return
		}
		if _, err := json.Marshal(genJSON(schema)); err != nil {
			t.Fatalf("generated value does not marshal: %v", err)
		}
	})
}

// TestGenJSONBounded: a schema whose every level multiplies stops at the
// node bound instead of growing without limit.
func TestGenJSONBounded(t *testing.T) {
	var schema any
	_ = json.Unmarshal([]byte(`{"type":"object","properties":{"a":{"$ref":"#"},"b":{"$ref":"#"},"c":{"$ref":"#"},"d":{"type":"array","minItems":16,"items":{"$ref":"#"}}},"required":["a","b","c","d"]}`), &schema)
	g := &generator{root: schema.(map[string]any)}
	g.value(g.root, "value", 0)
	if g.nodes > 5*schemaNodesMax {
		t.Fatalf("%d nodes generated, bound %d", g.nodes, schemaNodesMax)
	}
}
