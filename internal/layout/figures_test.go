package layout

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/purity"
)

// TestHouseFigures logs the figures issue 24 asks for before and after
// (go test ./internal/layout -run HouseFigures -v): the arrows that break
// the plan, product against harness lines (a bench*.go file in a product
// package counts as harness), and the non-test functions over 70 and over
// 100 lines. It asserts only that it found code to count.
func TestHouseFigures(t *testing.T) {
	ups, peers, harnessImports := 0, 0, 0
	for _, why := range arrows(t) {
		switch {
		case strings.HasPrefix(why, "runs up"):
			ups++
		case strings.HasPrefix(why, "between peers"):
			peers++
		default:
			harnessImports++
		}
	}
	t.Logf("arrows: %d run up the floors, %d between peers, %d product → harness", ups, peers, harnessImports)

	pkgs, err := purity.List("../..", "./...")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[kind]int{}
	testLines := 0
	type fn struct {
		name  string
		lines int
	}
	var long []fn
	for _, p := range pkgs {
		r, _ := roomOf(p.ImportPath)
		rel := strings.TrimPrefix(p.ImportPath, module)
		for _, name := range p.GoFiles {
			src, err := os.ReadFile(filepath.Join(p.Dir, name))
			if err != nil {
				t.Fatal(err)
			}
			k := r.kind
			if strings.HasPrefix(name, "bench") {
				k = harness
			}
			if k == binary {
				k = product
			}
			lines[k] += bytes.Count(src, []byte("\n"))
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				if n > 70 {
					long = append(long, fn{rel + "/" + name + " " + funcName(fd), n})
				}
			}
		}
		for _, name := range testFiles(p.Dir) {
			src, err := os.ReadFile(filepath.Join(p.Dir, name))
			if err != nil {
				t.Fatal(err)
			}
			testLines += bytes.Count(src, []byte("\n"))
		}
	}
	if lines[product] == 0 || lines[harness] == 0 {
		t.Fatalf("counted nothing: %v", lines)
	}
	total := lines[product] + lines[harness]
	t.Logf("lines: %d product, %d harness (%.0f %% of %d non-test), %d test", lines[product], lines[harness],
		100*float64(lines[harness])/float64(total), total, testLines)
	sort.Slice(long, func(i, j int) bool { return long[i].lines > long[j].lines })
	over100 := 0
	for _, f := range long {
		if f.lines > 100 {
			over100++
		}
	}
	t.Logf("functions: %d over 70 lines, %d over 100", len(long), over100)
	for _, f := range long {
		t.Logf("  %4d %s", f.lines, f.name)
	}
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if g, ok := typ.(*ast.IndexExpr); ok {
		typ = g.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// testFiles lists dir's _test.go files of every build tag (go list names
// only those of the default build).
func testFiles(dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}
