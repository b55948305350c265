package analytics

import (
	"regexp"
	"strings"
	"testing"
)

var (
	mvStmt     = regexp.MustCompile(`(?s)^CREATE MATERIALIZED VIEW IF NOT EXISTS (\S+) TO (\S+) AS\s+(SELECT\b.*)$`)
	insertStmt = regexp.MustCompile(`(?s)^INSERT INTO (\S+)(?: \([^)]*\))?\s+(SELECT\b.*)$`)
	// settingsClause is a trailing SETTINGS clause of an INSERT … SELECT.
	settingsClause = regexp.MustCompile(`\s+SETTINGS\s+[a-z_]+\s*=\s*[0-9]+(\s*,\s*[a-z_]+\s*=\s*[0-9]+)*\s*$`)
)

// TestBackfillsRepeatTheirViews: a migration that replaces a materialized
// view re-aggregates the events already stored with an INSERT … SELECT
// into the view's table (005 does so for its three views). SQL cannot name
// a view's SELECT, so the backfill states it again; this keeps the two
// copies the same query, so that a database migrated with data reads as a
// new one. Applied migrations are never edited, so this only guards the
// next one.
func TestBackfillsRepeatTheirViews(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	backfills := 0
	for _, m := range ms {
		views := map[string][]string{} // target table → the SELECTs of the views into it
		stmts := m.Statements("db")
		for _, s := range stmts {
			if g := mvStmt.FindStringSubmatch(s); g != nil {
				views[g[2]] = append(views[g[2]], norm(g[3]))
			}
		}
		for _, s := range stmts {
			g := insertStmt.FindStringSubmatch(s)
			if g == nil || len(views[g[1]]) == 0 {
				continue
			}
			backfills++
			// A SETTINGS clause (008 lets the GROUP BY spill to disk)
			// tunes how the server runs the SELECT, not what it gives.
			sel := settingsClause.ReplaceAllString(g[2], "")
			found := false
			for _, v := range views[g[1]] {
				found = found || v == norm(sel)
			}
			if !found {
				t.Errorf("%03d_%s: the backfill into %s is no view's SELECT into it:\n%s", m.Version, m.Name, g[1], g[2])
			}
		}
	}
	if backfills < 3 {
		t.Fatalf("found %d backfills, want 005's 3 at least", backfills)
	}
}

// norm folds white space, so that a reflowed line is the same query.
func norm(s string) string { return strings.Join(strings.Fields(s), " ") }
