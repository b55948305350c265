package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// ConfigDiff is one field that differs between two ledger documents.
// Path names the field with list elements keyed by what identifies them,
// e.g. `scopes[sim-openai].buckets[key:*:requests].capacity`; Old or New
// is empty when the field was added or removed.
type ConfigDiff struct {
	Path string `json:"path"`
	Old  string `json:"old,omitempty"`
	New  string `json:"new,omitempty"`
}

// String renders the change as "~ path: old → new", "+ path: new" or
// "- path: old".
func (d ConfigDiff) String() string {
	switch {
	case d.Old == "":
		return "+ " + d.Path + ": " + d.New
	case d.New == "":
		return "- " + d.Path + ": " + d.Old
	}
	return "~ " + d.Path + ": " + d.Old + " → " + d.New
}

// DiffConfigs compares two ledger documents field by field, after filling
// defaults (so that writing a default out, or leaving it implicit, is no
// change). A document that does not parse is compared as written. Scopes
// and classes are matched by name, tenants by id and buckets by level, id,
// dimension and shadow flag, so that reordering a list is no change and an
// inserted bucket is one line.
func DiffConfigs(old, neu []byte) []ConfigDiff {
	var out []ConfigDiff
	diffValue("", normalized(old), normalized(neu), &out)
	return out
}

// diffValue appends the differences of a and b under path: a field or
// list element present on one side only is one line with its whole value.
func diffValue(path string, a, b any, out *[]ConfigDiff) {
	ka, aok := keyed(a)
	kb, bok := keyed(b)
	if !aok || !bok {
		if ja, jb := compact(a), compact(b); ja != jb {
			*out = append(*out, ConfigDiff{Path: path, Old: ja, New: jb})
		}
		return
	}
	keys := make([]string, 0, len(ka)+len(kb))
	for k := range ka {
		keys = append(keys, k)
	}
	for k := range kb {
		if _, ok := ka[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	_, list := a.([]any)
	for _, k := range keys {
		p := join(path, k)
		if list {
			p = path + "[" + k + "]"
		}
		va, ina := ka[k]
		vb, inb := kb[k]
		switch {
		case !ina && vb == nil, !inb && va == nil:
			// null and absent say the same thing (encoding/json reads both
			// as the zero value), so writing one for the other is no change.
		case !ina:
			*out = append(*out, ConfigDiff{Path: p, New: compact(vb)})
		case !inb:
			*out = append(*out, ConfigDiff{Path: p, Old: compact(va)})
		default:
			diffValue(p, va, vb, out)
		}
	}
}

// keyed returns the children of an object or a non-empty list (elements
// by elemKey) of both sides' kind; ok is false for leaves.
func keyed(v any) (map[string]any, bool) {
	switch x := v.(type) {
	case map[string]any:
		return x, true
	case []any:
		if len(x) == 0 {
			return nil, false
		}
		m := make(map[string]any, len(x))
		for i, e := range x {
			k := elemKey(e, i)
			if _, dup := m[k]; dup {
				k = fmt.Sprint(i)
			}
			m[k] = e
		}
		return m, true
	}
	return nil, false
}

func compact(v any) string {
	if v == nil {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// normalized decodes doc with defaults filled, or as written when it does
// not parse (a string when it is no JSON at all).
func normalized(doc []byte) any {
	if len(bytes.TrimSpace(doc)) == 0 {
		return map[string]any{} // the first document: every field is new
	}
	if c, err := ParseConfig(doc); err == nil {
		doc, _ = json.Marshal(&c)
	}
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return string(doc)
	}
	return v
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// elemKey names a list element by what identifies it, else by index.
func elemKey(e any, i int) string {
	m, ok := e.(map[string]any)
	if !ok {
		return fmt.Sprint(i)
	}
	if lv, ok := m["level"].(string); ok {
		k := fmt.Sprintf("%s:%v:%v", lv, m["id"], m["dimension"])
		if sh, _ := m["shadow"].(bool); sh {
			k += ":shadow"
		}
		return k
	}
	if t, ok := m["tenant"].(string); ok {
		// An entitlement (EntitlementConfig.diffKey).
		k := t
		for _, f := range []string{"team", "key"} {
			if id, ok := m[f].(string); ok && id != "" {
				k += "/" + f + ":" + id
			}
		}
		if h, ok := m["holder"].(string); ok && h != "" {
			k += "/" + h
		}
		return k
	}
	for _, f := range []string{"name", "id"} {
		if s, ok := m[f].(string); ok {
			return s
		}
	}
	return fmt.Sprint(i)
}
