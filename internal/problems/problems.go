// Package problems is the one problems type of every Sluice config (the
// gateway's, the ledger's, the simulator's, a load-test scenario's): a
// list of every problem found, each at its path
// (ledger.scopes[0].buckets[3].capacity) and, when the document was YAML or
// JSON text, at its file:line:column, printed like a compiler's errors:
//
//	config deploy/sluice.yaml: 2 problems
//	deploy/sluice.yaml:41:52: ledger.scopes[0].buckets[3].capacity: want a whole number, got "lots"
//	deploy/sluice.yaml:44:27: ledger.scopes[0].buckets[4].id: no tenant "agentz" (did you mean agents?)
//
// Validation follows franz-go's cfg.validate and pebble's Options.Validate:
// fill defaults, then report every violation with its reason. A problem
// that is only a consequence of another is not reported: a value that
// failed to decode is marked failed (Fail), and later problems at or under
// a failed path are dropped, so `capacity: lots` is one problem, not one
// for the text and another for the zero it left behind.
package problems

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Pos is a 1-based line and column in a config file; the zero Pos is
// unknown (a document that arrived as an event has no file).
type Pos struct{ Line, Col int }

// Problem is one thing wrong with a config.
type Problem struct {
	// Path locates the value in the document, in the document's own field
	// names: ledger.scopes[0].buckets[3].capacity. Empty: the document.
	Path string
	Pos  Pos
	// Msg says what is wrong in plain words (and, where it helps, what
	// would be right).
	Msg string
}

// String is "path: message", the problem without its file position.
func (p Problem) String() string {
	if p.Path == "" {
		return p.Msg
	}
	return p.Path + ": " + p.Msg
}

// List collects the problems of one config document. The zero value is
// ready to use; Err returns it as an error when it holds a problem.
type List struct {
	// Subject names the document in the error's header line ("config
	// deploy/sluice.yaml", "ledger config", "scenario s.yaml").
	Subject string
	// File prefixes each problem's position (a path as given on the
	// command line); empty when the document has no file.
	File string
	// Problems in the order found (file order for decode problems, then
	// validation order).
	Problems []Problem

	failed map[string]bool
	pos    map[string]Pos
}

// Add records a problem at path unless it is a consequence of one already
// reported: path is, or lies under, a path marked failed.
func (l *List) Add(path, format string, a ...any) {
	if l.Failed(path) {
		return
	}
	l.Problems = append(l.Problems, Problem{Path: path, Msg: fmt.Sprintf(format, a...)})
}

// AddAt records a problem at a known position (a decode problem, whose
// node is at hand) and marks path failed: what follows from a value that
// could not be read is not reported again.
func (l *List) AddAt(path string, pos Pos, format string, a ...any) {
	if !l.Failed(path) {
		l.Problems = append(l.Problems, Problem{Path: path, Pos: pos, Msg: fmt.Sprintf(format, a...)})
	}
	l.Fail(path)
}

// Fail marks path as failed: later problems at or under it are dropped.
func (l *List) Fail(path string) {
	if l.failed == nil {
		l.failed = map[string]bool{}
	}
	l.failed[path] = true
}

// Failed reports whether path or a parent of it is marked failed, so a
// check that relates two fields can skip a relation with one that failed.
func (l *List) Failed(path string) bool {
	for p := path; ; p = Parent(p) {
		if l.failed[p] {
			return true
		}
		if p == "" {
			return false
		}
	}
}

// Has reports whether a problem was found at or under path (or path was
// marked failed): a check that reads what path holds is then skipped.
func (l *List) Has(path string) bool {
	if l.Failed(path) {
		return true
	}
	for _, p := range l.Problems {
		if p.Path == path || strings.HasPrefix(p.Path, path) && len(p.Path) > len(path) && (p.Path[len(path)] == '.' || p.Path[len(path)] == '[') {
			return true
		}
	}
	return false
}

// Merge adds the problems of another list with prefix joined before each
// path (the ledger document's problems become ledger.…), dropping those
// under paths this list has marked failed.
func (l *List) Merge(prefix string, o *List) {
	if o == nil {
		return
	}
	for _, p := range o.Problems {
		path := Join(prefix, p.Path)
		if l.Failed(path) {
			continue
		}
		l.Problems = append(l.Problems, Problem{Path: path, Pos: p.Pos, Msg: p.Msg})
	}
	for p := range o.failed {
		l.Fail(Join(prefix, p))
	}
}

// Len is the number of problems.
func (l *List) Len() int {
	if l == nil {
		return 0
	}
	return len(l.Problems)
}

// Err returns l as an error when it holds a problem, else nil. Problems
// without a position take the position of their path, or of the nearest
// parent the document has (a missing field is reported at its object).
func (l *List) Err() error {
	if l.Len() == 0 {
		return nil
	}
	for i := range l.Problems {
		if l.Problems[i].Pos == (Pos{}) {
			l.Problems[i].Pos = l.locate(l.Problems[i].Path)
		}
	}
	// Decode problems carry positions from the start; validation problems
	// are found in check order. Print in file order, as a compiler does
	// (stable: problems at one place keep their order).
	sort.SliceStable(l.Problems, func(i, j int) bool {
		a, b := l.Problems[i].Pos, l.Problems[j].Pos
		return a.Line < b.Line || a.Line == b.Line && a.Col < b.Col
	})
	return l
}

// Error is a header line, "SUBJECT: N problems", then one line per
// problem, "FILE:LINE:COL: PATH: MESSAGE" (the position only when known).
func (l *List) Error() string {
	var b strings.Builder
	if l.Subject != "" {
		b.WriteString(l.Subject)
		b.WriteString(": ")
	}
	b.WriteString(Count(len(l.Problems), "problem"))
	for _, p := range l.Problems {
		b.WriteByte('\n')
		b.WriteString(l.Line(p))
	}
	return b.String()
}

// Line formats one problem as Error prints it.
func (l *List) Line(p Problem) string {
	var at []string
	if l.File != "" {
		at = append(at, l.File)
	}
	if p.Pos.Line > 0 {
		at = append(at, strconv.Itoa(p.Pos.Line), strconv.Itoa(p.Pos.Col))
	}
	if len(at) == 0 {
		return p.String()
	}
	return strings.Join(at, ":") + ": " + p.String()
}

// Lines are the problem lines of Error, without the header.
func (l *List) Lines() []string {
	out := make([]string, len(l.Problems))
	for i, p := range l.Problems {
		out[i] = l.Line(p)
	}
	return out
}

// Count is "1 problem", "2 problems".
func Count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func (l *List) locate(path string) Pos {
	for p := path; ; p = Parent(p) {
		if pos, ok := l.pos[p]; ok {
			return pos
		}
		if p == "" {
			return Pos{}
		}
	}
}

// Join appends a field path to a prefix: Join("ledger", "scopes[0]") is
// ledger.scopes[0]; an index or an empty prefix joins without a dot.
func Join(prefix, path string) string {
	switch {
	case prefix == "":
		return path
	case path == "":
		return prefix
	case path[0] == '[':
		return prefix + path
	}
	return prefix + "." + path
}

// Index is a path with an index: Index("buckets", 3) is buckets[3].
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// Parent strips the last field or index of a path: a.b[2].c → a.b[2] →
// a.b → a → "".
func Parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// Suggest returns the known name closest to name, for "did you mean …?",
// or "" when none is close: a known name with a suffix added (rate_rps for
// rate), else the nearest within an edit distance of a third of the name
// (at least 1).
func Suggest(name string, known []string) string {
	best, bestD := "", max(1, len(name)/3)+1
	for _, k := range known {
		// A known name with a suffix added (rate_rps for rate) is meant.
		if len(k) >= 3 && strings.HasPrefix(strings.ToLower(name), strings.ToLower(k)+"_") {
			return k
		}
	}
	for _, k := range known {
		if d := distance(strings.ToLower(name), strings.ToLower(k)); d < bestD && d < len(name) && k != name {
			best, bestD = k, d
		}
	}
	return best
}

// Hint is " (did you mean X?)" for the closest known name, else "": for
// a message that lists the known names itself.
func Hint(name string, known []string) string {
	if s := Suggest(name, known); s != "" {
		return " (did you mean " + s + "?)"
	}
	return ""
}

// DidYouMean is " (did you mean X?)" for the closest known name, else
// " (known: a, b, c)" for a short list, else "".
func DidYouMean(name string, known []string) string {
	known = slices.DeleteFunc(slices.Clone(known), func(k string) bool { return k == "" })
	if s := Suggest(name, known); s != "" {
		return " (did you mean " + s + "?)"
	}
	if len(known) > 0 && len(known) <= 8 {
		return " (known: " + strings.Join(known, ", ") + ")"
	}
	return ""
}

// distance is the Levenshtein edit distance of two short strings.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
