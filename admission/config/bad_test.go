package config_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/bad")

// TestBadConfigsGolden loads every bad config of testdata/bad (one
// defect a file, named for it) and compares the whole error with the
// file's golden: every problem once, at file:line:col and its path, in
// plain words, and no problem that is only a consequence of another
// (issue 21, D9). Run with -update to rewrite the goldens after a
// deliberate change, and read the diff.
func TestBadConfigsGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad configs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := config.LoadFile(f)
			var ve *config.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err %v, want a ValidationError", err)
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("error of %s:\n%s\nwant (%s):\n%s", f, got, golden, want)
			}
		})
	}
}

// TestOverlayProblemsHaveNoFilePositions: problems of the admin state's
// tenants and ledger document (WithAdmission) carry their paths but no
// line: the file's lines are not where they came from.
func TestOverlayProblemsHaveNoFilePositions(t *testing.T) {
	b, err := os.ReadFile("../../deploy/examples/dev-three-tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(strings.NewReader(strings.ReplaceAll(string(b), "${SIM_URL}", "http://127.0.0.1:1")))
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"scopes":[{"name":"sim-openai","buckets":[{"level":"tenant","id":"web","dimension":"requests","capacity":-5,"guaranteed":2}]}]}`
	_, err = c.WithAdmission(c.Tenants, []byte(doc))
	want := "config with the admin state: 1 problem\nledger.scopes[0].buckets[0].capacity: -5 out of [1, 2^61]"
	if err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
}
