package purity

import (
	"strings"
	"testing"
)

// TestDepProblemsAreTransitive: a package that imports nothing forbidden
// itself is still impure when a package it imports breaks the rules, and
// each problem names the chain that reaches it.
func TestDepProblemsAreTransitive(t *testing.T) {
	probs, err := DepProblems("testdata/impure/pure", "pure")
	if err != nil {
		t.Fatal(err)
	}
	const via = "internal/purity/testdata/impure/pure → github.com/sluice-dev/sluice/internal/purity/testdata/impure/helper"
	for _, want := range []string{
		via + ` imports "net/http"`,
		"time.Now in github.com/sluice-dev/sluice/" + via,
		"go statement in github.com/sluice-dev/sluice/" + via,
	} {
		found := false
		for _, p := range probs {
			found = found || strings.Contains(p, want)
		}
		if !found {
			t.Errorf("no problem names %q; got:\n%s", want, strings.Join(probs, "\n"))
		}
	}
	if len(probs) != 3 {
		t.Errorf("%d problems, want 3 (time.Duration is arithmetic, not a clock):\n%s", len(probs), strings.Join(probs, "\n"))
	}
}
