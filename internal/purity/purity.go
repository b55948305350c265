// Package purity holds the import and statement rules of Sluice's pure
// state machines (ledger/, admission/lifecycle/) as one test helper, so
// that both are held to the same rules.
//
// The rules hold over everything the package reaches, not only what it
// imports itself: a pure package that imports a helper that imports
// net/http is no purer than one that imports net/http (issue 24 found the
// lifecycle reaching net/http, the clock and randomness through apierr and
// schemas). The standard library is a leaf: fmt imports os, but fmt does no
// I/O unless handed a file, which only an import of os itself can give.
package purity

import (
	"fmt"
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

// clockCalls are the functions of package time that read or wait on the
// clock. Everything else in it (Duration, Parse, Unix) is arithmetic on
// values it is given.
var clockCalls = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true,
}

// Check fails t for every forbidden import, go statement and time.Now in
// the non-test Go files under dir, naming what (the package's name for its
// readers) must stay pure; it fails too when fewer than minFiles were
// checked (a moved directory must not pass by checking nothing). Then it
// checks every package the one in dir reaches (CheckDeps).
func Check(t *testing.T, dir, what string, minFiles int) {
	t.Helper()
	checkFiles(t, dir, what, minFiles)
	CheckDeps(t, dir, what)
}

// CheckDeps fails t for every package outside the standard library that
// the package in dir reaches, directly or not, and that breaks purity
// (DepProblems).
func CheckDeps(t *testing.T, dir, what string) {
	t.Helper()
	probs, err := DepProblems(dir, what)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Error(p)
	}
}

// DepProblems lists, for every package outside the standard library that
// the package in dir reaches, what breaks purity in it: an import of a
// forbidden package other than time, a go statement, or a call of a clock
// function of time (a parser that imports time for time.Parse is pure; one
// that calls time.Now is not). Each names the import chain from the
// package in dir.
func DepProblems(dir, what string) ([]string, error) {
	pkgs, err := List(dir, "-deps", ".")
	if err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("go list -deps in %s listed no package", dir)
	}
	root := pkgs[len(pkgs)-1].ImportPath // -deps lists the named package last
	byPath := make(map[string]Package, len(pkgs))
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var probs []string
	for _, p := range pkgs {
		if p.Standard || p.ImportPath == root {
			continue
		}
		via := chain(root, byPath, p.ImportPath)
		for _, imp := range p.Imports {
			if imp != "time" && Forbidden(imp) {
				probs = append(probs, fmt.Sprintf("%s imports %q (%s must stay pure)", via, imp, what))
			}
		}
		for _, name := range p.GoFiles {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			timeName := ""
			for _, imp := range f.Imports {
				if path, _ := strconv.Unquote(imp.Path.Value); path == "time" {
					timeName = "time"
					if imp.Name != nil {
						timeName = imp.Name.Name
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					probs = append(probs, fmt.Sprintf("%s: go statement in %s (%s is single-threaded)", fset.Position(n.Pos()), via, what))
				case *ast.SelectorExpr:
					if id, ok := n.X.(*ast.Ident); ok && timeName != "" && id.Name == timeName && clockCalls[n.Sel.Name] {
						probs = append(probs, fmt.Sprintf("%s: time.%s in %s (%s must stay pure)", fset.Position(n.Pos()), n.Sel.Name, via, what))
					}
				}
				return true
			})
		}
	}
	return probs, nil
}

// checkFiles is Check's rule for the package's own files: not even an
// import of time (durations and dates come in as numbers).
func checkFiles(t *testing.T, dir, what string, minFiles int) {
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
