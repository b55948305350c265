package schemas

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"
)

// TestEveryCodeHasWords reads the vocabulary's source files and checks that
// every typed code constant has its plain words in words.go, so that a new
// code cannot reach the live view as a bare code.
func TestEveryCodeHasWords(t *testing.T) {
	has := map[string]func(string) bool{
		"Reason":          func(v string) bool { _, ok := reasonWords[Reason(v)]; return ok },
		"RetryClass":      func(v string) bool { _, ok := retryClassWords[RetryClass(v)]; return ok },
		"GatewayDecision": func(v string) bool { _, ok := gatewayDecisionWords[GatewayDecision(v)]; return ok },
		"Status":          func(v string) bool { _, ok := statusWords[Status(v)]; return ok },
		"Dimension":       func(v string) bool { _, ok := dimensionWords[Dimension(v)]; return ok },
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok || has[id.Name] == nil {
					continue
				}
				for i, name := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Errorf("%s: %s is not a string literal", fset.Position(name.Pos()), name.Name)
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					seen[id.Name]++
					if !has[id.Name](v) {
						t.Errorf("%s: %s (%q) has no words in words.go", fset.Position(name.Pos()), name.Name, v)
					}
				}
			}
		}
	}
	for typ := range has {
		if seen[typ] == 0 {
			t.Errorf("found no %s constants: did the vocabulary move?", typ)
		}
	}
	if got := Reason("from_a_newer_writer").Words(); got != "from_a_newer_writer" {
		t.Errorf("unknown code: %q, want the code itself", got)
	}
}
