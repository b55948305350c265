package apierr

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestTableHoldsEveryCode: every Code constant of the package has exactly
// one row, so a new code cannot be added without its contract.
func TestTableHoldsEveryCode(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, sp := range g.Specs {
				for _, n := range sp.(*ast.ValueSpec).Names {
					if strings.HasPrefix(n.Name, "Code") {
						consts++
					}
				}
			}
		}
	}
	seen := map[string]bool{}
	for _, s := range Table {
		if seen[s.Code] {
			t.Errorf("%s has two rows", s.Code)
		}
		seen[s.Code] = true
	}
	if consts != len(Table) {
		t.Errorf("%d Code constants, %d rows in Table", consts, len(Table))
	}
}

// TestTableTypesAreNews: a row's type is the one New gives its status (the
// wire's "type" field), and its statuses give the same retry answer the
// table implies.
func TestTableTypesAreNews(t *testing.T) {
	for _, s := range Table {
		if s.Status == 0 {
			continue // the provider's status
		}
		if got := New(s.Status, s.Code, "m").Type; got != s.Type {
			t.Errorf("%s at %d: New gives type %q, the table %q", s.Code, s.Status, got, s.Type)
		}
		if s.Final && s.Retryable(s.Status) {
			t.Errorf("%s is Final and retryable", s.Code)
		}
	}
}

// TestFinalCodesUnchanged: the codes final whatever their status are the
// nine they were before the table.
func TestFinalCodesUnchanged(t *testing.T) {
	want := map[string]bool{
		CodeIdempotencyReused: true, CodeInsufficientQuota: true, CodeRequestTooLarge: true,
		CodeUpstreamAuth: true, CodePathMissingLevel: true, CodePathUnknownID: true,
		CodeClassNotEntitled: true, CodePriorityNotEntitled: true, CodeModelNotAllowed: true,
	}
	if len(finalCodes) != len(want) {
		t.Errorf("finalCodes %v, want %v", finalCodes, want)
	}
	for c := range want {
		if !finalCodes[c] {
			t.Errorf("%s is no longer final", c)
		}
	}
	if _, ok := Lookup(CodeRateLimited); !ok {
		t.Error("Lookup does not find rate_limit_exceeded")
	}
	if s, _ := Lookup(CodeRateLimited); !s.Retryable(429) {
		t.Error("rate_limit_exceeded at 429 is not retryable")
	}
}
