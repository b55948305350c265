package sim

import (
	"math"
	"sort"
	"strings"
)

// A small JSON generator over a JSON Schema, for the simulator's tool-call
// arguments and structured output: it returns a value valid against the
// schema for the subset tools and response formats use — object
// (properties, required, additionalProperties), array (items, minItems,
// maxItems), string (enum, const, minLength, maxLength, format date/
// date-time/email/uri/uuid), number and integer (minimum, maximum,
// exclusiveMinimum), boolean, null, enum and const of any type, anyOf /
// oneOf / allOf (the first branch), type lists (the first non-null type)
// and local $ref (#/$defs/…, #/definitions/…). Every property is
// generated, required or not (strict mode requires them all), except
// optional ones deep in a recursive schema. The value is
// deterministic: the same schema gives the same JSON.

// Bounds of one generated value: recursion depth (a $ref cycle) and the
// values generated in all (a schema whose every level multiplies: many
// required recursive properties, minItems at every level), so a hostile
// schema costs at most a few milliseconds. Past the node bound optional
// properties are dropped and arrays shrink to minItems 0.
const (
	schemaDepthMax = 24
	schemaNodesMax = 4096
)

// genJSON returns a value valid against schema (a decoded JSON Schema).
func genJSON(schema any) any {
	root, _ := schema.(map[string]any)
	g := &generator{root: root}
	return g.value(root, "value", 0)
}

// generator holds one generation's root (for $ref) and its node count.
type generator struct {
	root  map[string]any
	nodes int
}

// spent reports whether the node bound is reached.
func (g *generator) spent() bool { return g.nodes >= schemaNodesMax }

// value is an instance of schema s for a member called name (which names
// its strings), depth levels down; nil past the depth and node bounds.
func (g *generator) value(s map[string]any, name string, depth int) any {
	g.nodes++
	if s == nil || depth > schemaDepthMax || g.nodes > 4*schemaNodesMax {
		return nil
	}
	if v, ok := g.composed(s, name, depth); ok {
		return v
	}
	switch schemaType(s) {
	case "object":
		return g.object(s, depth)
	case "array":
		return g.array(s, name, depth)
	case "string":
		return genString(s, name)
	case "integer":
		return genNumber(s, true)
	case "number":
		return genNumber(s, false)
	case "boolean":
		return true
	case "null":
		return nil
	}
	return "sim"
}

// composed answers the keywords that decide a value before its type: a
// $ref is followed, a const or the first enum value is the value, anyOf
// and oneOf take their first branch that is not null, and allOf merges
// its branches. ok is false when s has none of them.
func (g *generator) composed(s map[string]any, name string, depth int) (v any, ok bool) {
	root := g.root
	if ref, ok := s["$ref"].(string); ok {
		return g.value(resolveRef(root, ref), name, depth+1), true
	}
	if v, ok := s["const"]; ok {
		return v, true
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0], true
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			for _, a := range alts { // prefer a branch that is not null
				if am, _ := a.(map[string]any); am != nil && am["type"] != "null" {
					return g.value(am, name, depth+1), true
				}
			}
			am, _ := alts[0].(map[string]any)
			return g.value(am, name, depth+1), true
		}
	}
	if all, ok := s["allOf"].([]any); ok && len(all) > 0 {
		merged := map[string]any{}
		for _, a := range all {
			am, _ := a.(map[string]any)
			if r, ok := am["$ref"].(string); ok {
				am = resolveRef(root, r)
			}
			for k, v := range am {
				merged[k] = v
			}
		}
		return g.value(merged, name, depth+1), true
	}
	return nil, false
}

// array is an array of one item (minItems if more, up to 16; none once
// the node bound is spent unless minItems asks), within maxItems. Items
// of a plural name get the singular.
func (g *generator) array(s map[string]any, name string, depth int) []any {
	items, _ := s["items"].(map[string]any)
	n := 1
	if lo, ok := s["minItems"].(float64); ok && lo > 1 {
		n = int(min(lo, 16))
	}
	if g.spent() {
		n = 0
		if lo, ok := s["minItems"].(float64); ok && lo > 0 {
			n = int(min(lo, 16))
		}
	}
	if hi, ok := s["maxItems"].(float64); ok && float64(n) > hi {
		n = int(hi)
	}
	out := make([]any, 0, n)
	for range n {
		out = append(out, g.value(items, strings.TrimSuffix(name, "s"), depth+1))
	}
	return out
}

// schemaType is the schema's type: the first non-null of a type list,
// else inferred from the keywords present.
func schemaType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		return t
	case []any:
		for _, x := range t {
			if str, _ := x.(string); str != "" && str != "null" {
				return str
			}
		}
		return "null"
	}
	switch {
	case s["properties"] != nil:
		return "object"
	case s["items"] != nil:
		return "array"
	}
	return ""
}

// object generates every property; past half the depth bound or the node
// bound only the required ones, so an optional recursive property ends the
// recursion.
func (g *generator) object(s map[string]any, depth int) map[string]any {
	props, _ := s["properties"].(map[string]any)
	required := map[string]bool{}
	if req, ok := s["required"].([]any); ok {
		for _, r := range req {
			if k, ok := r.(string); ok {
				required[k] = true
			}
		}
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		if (depth < schemaDepthMax/2 && !g.spent()) || required[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		ps, _ := props[k].(map[string]any)
		out[k] = g.value(ps, k, depth+1)
	}
	return out
}

func genString(s map[string]any, name string) string {
	v := "sim " + name
	switch s["format"] {
	case "date-time":
		v = "2026-01-01T00:00:00Z"
	case "date":
		v = "2026-01-01"
	case "time":
		v = "00:00:00Z"
	case "email":
		v = "sim@example.com"
	case "uri", "url":
		v = "https://example.com/sim"
	case "uuid":
		v = "00000000-0000-4000-8000-000000000000"
	}
	if lo, ok := s["minLength"].(float64); ok && float64(len(v)) < lo {
		v += strings.Repeat("x", int(min(lo, 4096))-len(v))
	}
	if hi, ok := s["maxLength"].(float64); ok && float64(len(v)) > hi {
		v = v[:int(max(hi, 0))]
	}
	return v
}

func genNumber(s map[string]any, integer bool) any {
	v := 1.0
	if !integer {
		v = 1.5
	}
	if lo, ok := s["minimum"].(float64); ok && v < lo {
		v = lo
	}
	if lo, ok := s["exclusiveMinimum"].(float64); ok && v <= lo {
		v = lo + 1
	}
	if hi, ok := s["maximum"].(float64); ok && v > hi {
		v = hi
	}
	if hi, ok := s["exclusiveMaximum"].(float64); ok && v >= hi {
		v = hi - 1
	}
	if integer {
		return int64(math.Ceil(v))
	}
	return v
}

// resolveRef follows a local reference (#/$defs/Name, #/definitions/Name,
// or any #/a/b path); nil when it does not resolve.
func resolveRef(root map[string]any, ref string) map[string]any {
	p, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil
	}
	cur := root
	for _, seg := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if seg == "" {
			continue
		}
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		next, _ := cur[seg].(map[string]any)
		if next == nil {
			return nil
		}
		cur = next
	}
	return cur
}
