package loadtest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseScenario: any text is a scenario or a refusal that names at
// least one problem; never a panic.
func FuzzParseScenario(f *testing.F) {
	for _, dir := range []string{"testdata/bad", "../../deploy/scenarios"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, name := range files {
			if b, err := os.ReadFile(name); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := ParseScenario(b, "fuzz.yaml")
		if err == nil {
			if sc == nil {
				t.Fatal("no scenario and no error")
			}
			return
		}
		var pe *ProblemsError
		if !errors.As(err, &pe) || pe.Len() == 0 {
			t.Fatalf("refusal without its problems: %v", err)
		}
	})
}

// TestShippedScenariosLoad: every scenario in deploy/scenarios parses and
// validates (the parser moved to internal/problems; a shipped file must
// not start failing).
func TestShippedScenariosLoad(t *testing.T) {
	files, err := filepath.Glob("../../deploy/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		if _, err := LoadScenario(f, ""); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
