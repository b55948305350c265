package problems

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Tag names the struct tag that names a config type's fields: the gateway
// file is YAML (yaml tags), the ledger document is JSON (json tags) even
// when it sits inside the gateway's YAML.
type Tag string

// The struct tags Check reads.
const (
	TagYAML Tag = "yaml"
	TagJSON Tag = "json"
)

// Parse reads a YAML (or JSON: JSON is YAML) document into a node tree,
// reporting a syntax error at its line. It returns nil on a syntax error
// and an empty mapping for an empty document.
func (l *List) Parse(data []byte) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		pos, msg := yamlErrorPos(err, data)
		l.AddAt("", pos, "%s", msg)
		return nil
	}
	if len(doc.Content) == 0 {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1, Column: 1}
	}
	return doc.Content[0]
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// yamlErrorPos takes the line out of a yaml.v3 syntax error, so that it is
// printed as a position and not inside the message. An error without a
// line (an unexpected end of the document) is placed at the end.
func yamlErrorPos(err error, data []byte) (Pos, string) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return Pos{Line: n, Col: 1}, "cannot parse YAML: " + msg[len(m[0]):]
	}
	last := strings.TrimRight(string(data), "\n")
	line := strings.Count(last, "\n") + 1
	col := len(last) - strings.LastIndexByte(last, '\n')
	return Pos{Line: line, Col: col}, "cannot parse YAML: " + strings.TrimPrefix(msg, "yaml: ")
}

// Locate records the position of every value under node, at its path
// below prefix, so that validation problems (reported by path) print at
// their line and column.
func (l *List) Locate(node *yaml.Node, prefix string) {
	if l.pos == nil {
		l.pos = map[string]Pos{}
	}
	if node == nil {
		return
	}
	if _, ok := l.pos[prefix]; !ok {
		l.pos[prefix] = Pos{node.Line, node.Column}
	}
	switch node.Kind {
	case yaml.DocumentNode:
		for _, c := range node.Content {
			l.Locate(c, prefix)
		}
	case yaml.AliasNode:
		l.Locate(node.Alias, prefix)
	case yaml.SequenceNode:
		for i, c := range node.Content {
			l.Locate(c, Index(prefix, i))
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			l.Locate(node.Content[i+1], Join(prefix, node.Content[i].Value))
		}
	}
}

// DecodeYAML parses data and decodes it into out (a pointer to a struct
// with yaml tags), reporting every syntax error, unknown field and value
// of the wrong type with its position and path. What does fit is decoded;
// what does not is left at its zero value and marked failed. It returns
// the document's root node (nil on a syntax error).
func (l *List) DecodeYAML(data []byte, out any) *yaml.Node {
	root := l.Parse(data)
	if root == nil {
		return nil
	}
	l.Locate(root, "")
	clean := l.Check(root, "", reflect.TypeOf(out).Elem(), TagYAML)
	if err := clean.Decode(out); err != nil {
		// Check models what yaml.v3 accepts; a gap would show here.
		l.AddAt("", Pos{root.Line, root.Column}, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return root
}

// DecodeJSONNode decodes a node holding a JSON-tagged document (the
// ledger's) into out, as DecodeYAML does: problems at their paths under
// prefix, the rest decoded through encoding/json so that the result is what
// the document's JSON form decodes to.
func (l *List) DecodeJSONNode(node *yaml.Node, prefix string, out any) {
	clean := l.Check(node, prefix, reflect.TypeOf(out).Elem(), TagJSON)
	var doc any
	if err := clean.Decode(&doc); err != nil {
		l.AddAt(prefix, Pos{node.Line, node.Column}, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
		return
	}
	b, err := json.Marshal(jsonable(doc))
	if err == nil {
		err = json.Unmarshal(b, out)
	}
	if err != nil {
		l.AddAt(prefix, Pos{node.Line, node.Column}, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
}

// jsonable turns yaml.v3's map[any]any (non-string keys) into maps JSON
// can encode.
func jsonable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonable(e)
		}
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range v {
			v[i] = jsonable(e)
		}
	}
	return v
}

var (
	nodeType      = reflect.TypeOf(yaml.Node{})
	yamlUnmarshal = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
	jsonUnmarshal = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
)

// Check walks node against type t, reporting (AddAt) every unknown field
// and every value that does not fit its field, in plain words. It returns a
// copy of node without the unknown fields and with every misfit replaced by
// null, which decodes without error to what did fit. A field of type
// yaml.Node is kept as it is (its owner checks it).
func (l *List) Check(node *yaml.Node, path string, t reflect.Type, tag Tag) *yaml.Node {
	if node == nil {
		return nil
	}
	if node.Kind == yaml.DocumentNode {
		if len(node.Content) == 0 {
			return node
		}
		return l.Check(node.Content[0], path, t, tag)
	}
	if node.Kind == yaml.AliasNode {
		return l.Check(node.Alias, path, t, tag)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nodeType || isNull(node) {
		return node
	}
	if reflect.PointerTo(t).Implements(yamlUnmarshal) || (tag == TagJSON && reflect.PointerTo(t).Implements(jsonUnmarshal)) {
		return l.checkScalar(node, path, t, tag) // custom decoding: try it
	}
	switch t.Kind() {
	case reflect.Struct:
		if node.Kind != yaml.MappingNode {
			return l.misfit(node, path, "want a mapping of fields, got %s", describe(node))
		}
		return l.checkStruct(node, path, t, tag)
	case reflect.Slice, reflect.Array:
		if node.Kind != yaml.SequenceNode {
			return l.misfit(node, path, "want a list, got %s", describe(node))
		}
		out := *node
		out.Content = make([]*yaml.Node, len(node.Content))
		for i, c := range node.Content {
			out.Content[i] = l.Check(c, Index(path, i), t.Elem(), tag)
		}
		return &out
	case reflect.Map:
		if node.Kind != yaml.MappingNode {
			return l.misfit(node, path, "want a mapping, got %s", describe(node))
		}
		out := *node
		out.Content = make([]*yaml.Node, 0, len(node.Content))
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			if l.checkScalar(k, Join(path, k.Value), t.Key(), tag) != k {
				continue // a key that is not a key (reported)
			}
			out.Content = append(out.Content, k, l.Check(v, Join(path, k.Value), t.Elem(), tag))
		}
		return &out
	case reflect.Interface:
		return node
	}
	return l.checkScalar(node, path, t, tag)
}

// field is one field of a struct as a document names it.
type field struct {
	name string
	typ  reflect.Type
}

// fields lists the document names of t's fields, inlined structs
// flattened (yaml ",inline"; an untagged embedded struct in JSON).
func fields(t reflect.Type, tag Tag) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		tv := f.Tag.Get(string(tag))
		name, opts, _ := strings.Cut(tv, ",")
		if name == "-" && opts == "" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		inline := (tag == TagYAML && strings.Contains(","+opts+",", ",inline,")) ||
			(tag == TagJSON && f.Anonymous && name == "" && ft.Kind() == reflect.Struct)
		if inline {
			out = append(out, fields(ft, tag)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name // JSON's default; yaml.v3 lowercases it
			if tag == TagYAML {
				name = strings.ToLower(f.Name)
			}
		}
		out = append(out, field{name, f.Type})
	}
	return out
}

func (l *List) checkStruct(node *yaml.Node, path string, t reflect.Type, tag Tag) *yaml.Node {
	fs := fields(t, tag)
	lookup := func(key string) (field, bool) {
		for _, f := range fs {
			if f.name == key {
				return f, true
			}
		}
		if tag == TagJSON { // encoding/json matches names case-insensitively
			for _, f := range fs {
				if strings.EqualFold(f.name, key) {
					return f, true
				}
			}
		}
		return field{}, false
	}
	present := map[string]int{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		present[node.Content[i].Value] = node.Content[i].Line
	}
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	out := *node
	out.Content = make([]*yaml.Node, 0, len(node.Content))
	seen := map[string]int{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		kp := Join(path, k.Value)
		if k.Tag == "!!merge" {
			if m := l.checkMerge(v, path, t, tag); m != nil {
				out.Content = append(out.Content, k, m)
			}
			continue
		}
		f, ok := lookup(k.Value)
		if !ok {
			hint := DidYouMean(k.Value, names)
			if s := Suggest(k.Value, names); s != "" {
				if _, there := present[s]; !there {
					// The field meant is missing because of the typo: its
					// absence is a consequence, not another problem.
					l.Fail(Join(path, s))
				}
			}
			l.AddAt(kp, Pos{k.Line, k.Column}, "unknown field %q%s", k.Value, hint)
			continue
		}
		if line, dup := seen[f.name]; dup {
			l.AddAt(kp, Pos{k.Line, k.Column}, "%s is set twice (first at line %d)", k.Value, line)
			continue
		}
		seen[f.name] = k.Line
		out.Content = append(out.Content, k, l.Check(v, kp, f.typ, tag))
	}
	return &out
}

// checkMerge checks the value of a merge key (<<: *defaults): a mapping,
// or a list of mappings, of the struct's own fields. It returns nil, after
// reporting it, for anything else.
func (l *List) checkMerge(v *yaml.Node, path string, t reflect.Type, tag Tag) *yaml.Node {
	for v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	switch v.Kind {
	case yaml.MappingNode:
		return l.checkStruct(v, path, t, tag)
	case yaml.SequenceNode:
		out := *v
		out.Content = nil
		for _, c := range v.Content {
			for c.Kind == yaml.AliasNode && c.Alias != nil {
				c = c.Alias
			}
			if c.Kind != yaml.MappingNode {
				l.AddAt(path, Pos{c.Line, c.Column}, "<< merges mappings, got %s", describe(c))
				return nil
			}
			out.Content = append(out.Content, l.checkStruct(c, path, t, tag))
		}
		return &out
	}
	l.AddAt(path, Pos{v.Line, v.Column}, "<< merges mappings, got %s", describe(v))
	return nil
}

// checkScalar checks a value for a scalar field by decoding it, as the
// document's decoder would.
func (l *List) checkScalar(node *yaml.Node, path string, t reflect.Type, tag Tag) *yaml.Node {
	want := wantWords(t)
	custom := reflect.PointerTo(t).Implements(yamlUnmarshal) || reflect.PointerTo(t).Implements(jsonUnmarshal)
	if node.Kind != yaml.ScalarNode && !custom {
		return l.misfit(node, path, "want %s, got %s", want, describe(node))
	}
	if tag == TagJSON && !custom {
		// JSON does not turn numbers into strings or "yes" into true.
		st := node.ShortTag()
		switch t.Kind() {
		case reflect.String:
			if st != "!!str" {
				return l.misfit(node, path, "want a string, got %s (quote it: \"%s\")", node.Value, node.Value)
			}
		case reflect.Bool:
			if st != "!!bool" {
				return l.misfit(node, path, "want true or false, got %s", describe(node))
			}
		}
	}
	if tag == TagJSON && custom {
		return node // decoded by its own UnmarshalJSON; its error names itself
	}
	if isInt(t) && node.ShortTag() == "!!float" && !custom {
		// yaml.v3 would cut 1.5 to 1 without a word.
		f, err := strconv.ParseFloat(strings.ReplaceAll(node.Value, "_", ""), 64)
		if err != nil || f != math.Trunc(f) {
			return l.misfit(node, path, "want %s, got %s", want, describe(node))
		}
	}
	v := reflect.New(t)
	if err := node.Decode(v.Interface()); err != nil {
		if custom { // the type's own decoder says what it wants
			return l.misfit(node, path, "%s", plainDecodeError(err))
		}
		st := node.ShortTag()
		if isInt(t) && (st == "!!int" || st == "!!float") {
			if f, ferr := strconv.ParseFloat(strings.ReplaceAll(node.Value, "_", ""), 64); ferr == nil && f == math.Trunc(f) {
				return l.misfit(node, path, "%s does not fit: want %s", node.Value, intRange(t))
			}
		}
		return l.misfit(node, path, "want %s, got %s", want, describe(node))
	}
	return node
}

var lineN = regexp.MustCompile(`^line \d+: `)

// plainDecodeError is a custom decoder's error without yaml.v3's wrapping
// ("yaml: unmarshal errors:", "line N:"): the problem prints its position.
func plainDecodeError(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			msgs[i] = lineN.ReplaceAllString(m, "")
		}
		return strings.Join(msgs, "; ")
	}
	return lineN.ReplaceAllString(strings.TrimPrefix(err.Error(), "yaml: "), "")
}

// misfit reports a value that does not fit and returns the null that
// replaces it.
func (l *List) misfit(node *yaml.Node, path, format string, a ...any) *yaml.Node {
	l.AddAt(path, Pos{node.Line, node.Column}, format, a...)
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null", Line: node.Line, Column: node.Column}
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func isInt(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// wantWords says in plain words what a field of type t holds.
func wantWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int64, reflect.Int, reflect.Uint64, reflect.Uint:
		return "a whole number"
	case reflect.Int8, reflect.Int16, reflect.Int32:
		bits := t.Bits()
		return fmt.Sprintf("a whole number from %d to %d", int64(-1)<<(bits-1), uint64(1)<<(bits-1)-1)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<(t.Bits())-1)
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return "a " + t.Kind().String()
}

// intRange is "a whole number from MIN to MAX" for an integer type.
func intRange(t reflect.Type) string {
	bits := t.Bits()
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(math.MaxUint64)>>(64-bits))
	}
	return fmt.Sprintf("a whole number from %d to %d", int64(-1)<<(bits-1), uint64(1)<<(bits-1)-1)
}

// describe names what a node holds, for "got …".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" {
			return strconv.Quote(n.Value)
		}
		return n.Value
	}
	return "an alias"
}
