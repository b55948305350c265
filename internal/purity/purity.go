// Package purity holds the import and statement rules of Sluice's pure
// state machines (ledger/, admission/lifecycle/) as one test helper, so
// that both are held to the same rules.
package purity

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Forbidden reports whether importing path breaks purity: a clock,
// randomness, the OS or the network, Kafka or ClickHouse.
func Forbidden(path string) bool {
	switch path {
	case "time", "math/rand", "math/rand/v2", "crypto/rand", "os", "os/exec", "net", "syscall", "unsafe":
		return true
	}
	for _, p := range []string{"net/", "os/", "github.com/twmb/", "github.com/ClickHouse/"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// Check fails t for every forbidden import, go statement and time.Now in
// the non-test Go files under dir, naming what (the package's name for its
// readers) must stay pure; it fails too when fewer than minFiles were
// checked (a moved directory must not pass by checking nothing).
func Check(t *testing.T, dir, what string, minFiles int) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if Forbidden(path) {
				t.Errorf("%s: imports %q (%s must stay pure)", fset.Position(imp.Pos()), path, what)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement (%s is single-threaded)", fset.Position(n.Pos()), what)
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" && n.Sel.Name == "Now" {
					t.Errorf("%s: time.Now", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < minFiles {
		t.Fatalf("only %d files checked", files)
	}
}
