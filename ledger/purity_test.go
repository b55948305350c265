package ledger

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

// TestPurity keeps the ledger a pure state machine: no clock, no
// randomness, no OS or network, no Kafka or ClickHouse, no goroutines in any
// non-test file under ledger/.
func TestPurity(t *testing.T) {
	forbidden := func(path string) bool {
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
	files := 0
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
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
			if forbidden(path) {
				t.Errorf("%s: imports %q (the ledger must stay pure)", fset.Position(imp.Pos()), path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement (the ledger is single-threaded)", fset.Position(n.Pos()))
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
	if files < 5 {
		t.Fatalf("only %d files checked", files)
	}
}
