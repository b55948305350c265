package analytics

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

//go:embed queries/*.sql
var queryFS embed.FS

// Query is one metric: queries/NAME.sql. Its first line is
// "-- NAME: what it measures"; {db} stands for the quoted database,
// {attempts} and {requests} for the views of that name (or tables holding
// a range of them, see Tables), and {from}/{to} for the range's unix
// seconds (integers, so splicing them is as safe as client-side binding
// and identical on every engine).
type Query struct {
	Name string
	Doc  string
	SQL  string
}

// Queries returns the embedded metric queries, by name.
func Queries() ([]Query, error) {
	entries, err := fs.ReadDir(queryFS, "queries")
	if err != nil {
		return nil, fmt.Errorf("read queries: %w", err)
	}
	var qs []Query
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		b, err := fs.ReadFile(queryFS, "queries/"+e.Name())
		if err != nil {
			return nil, err
		}
		s := string(b)
		first, _, _ := strings.Cut(s, "\n")
		doc, ok := strings.CutPrefix(first, "-- "+name+": ")
		if !ok {
			return nil, fmt.Errorf("query %s: first line must be \"-- %s: what it measures\"", e.Name(), name)
		}
		qs = append(qs, Query{Name: name, Doc: doc, SQL: s})
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].Name < qs[j].Name })
	return qs, nil
}

// QueryByName returns one embedded query.
func QueryByName(name string) (Query, error) {
	qs, err := Queries()
	if err != nil {
		return Query{}, err
	}
	for _, q := range qs {
		if q.Name == name {
			return q, nil
		}
	}
	return Query{}, fmt.Errorf("no query %q", name)
}

// Range is a half-open time range [From, To), second precision.
type Range struct{ From, To time.Time }

// Tables names what {attempts} and {requests} read; empty fields mean the
// views database.attempts and database.requests.
type Tables struct{ Attempts, Requests string }

// Render returns the query's SQL for database and range, comments dropped.
func (q Query) Render(database string, r Range) string { return q.RenderIn(database, r, Tables{}) }

// RenderIn is Render with {attempts} and {requests} read from t.
func (q Query) RenderIn(database string, r Range, t Tables) string {
	return q.render(database, strconv.FormatInt(r.From.Unix(), 10), strconv.FormatInt(r.To.Unix(), 10), t)
}

// RenderExpr renders the query with {from} and {to} replaced by SQL
// expressions of unix seconds, e.g. Grafana's "toUInt32($__fromTime)".
func (q Query) RenderExpr(database, fromExpr, toExpr string) string {
	return q.render(database, "("+fromExpr+")", "("+toExpr+")", Tables{})
}

func (q Query) render(database, from, to string, t Tables) string {
	if t.Attempts == "" {
		t.Attempts = quoteIdent(database) + ".attempts"
	}
	if t.Requests == "" {
		t.Requests = quoteIdent(database) + ".requests"
	}
	var lines []string
	for _, l := range strings.Split(q.SQL, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--") || strings.TrimSpace(l) == "" {
			continue
		}
		lines = append(lines, l)
	}
	s := strings.Join(lines, "\n")
	s = strings.ReplaceAll(s, "{attempts}", t.Attempts)
	s = strings.ReplaceAll(s, "{requests}", t.Requests)
	s = strings.ReplaceAll(s, "{db}", quoteIdent(database))
	s = strings.ReplaceAll(s, "{from}", from)
	s = strings.ReplaceAll(s, "{to}", to)
	return s
}

// Result is a query's rows with values normalised to string, int64 or
// float64 (the same on every engine, so results compare).
type Result struct {
	Columns []string `json:"columns"`
	Rows    [][]any  `json:"rows"`
}

// Col returns the index of a column, or -1.
func (r *Result) Col(name string) int {
	for i, c := range r.Columns {
		if c == name {
			return i
		}
	}
	return -1
}

// Run runs q over database and range on conn.
func (q Query) Run(ctx context.Context, conn driver.Conn, database string, r Range) (*Result, error) {
	return q.RunIn(ctx, conn, database, r, Tables{})
}

// RunIn is Run reading {attempts} and {requests} from t.
func (q Query) RunIn(ctx context.Context, conn driver.Conn, database string, r Range, t Tables) (*Result, error) {
	rows, err := conn.Query(ctx, q.RenderIn(database, r, t))
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", q.Name, err)
	}
	defer rows.Close()
	res := &Result{Columns: rows.Columns()}
	cts := rows.ColumnTypes()
	for rows.Next() {
		ptrs := make([]any, len(cts))
		for i, ct := range cts {
			ptrs[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("query %s: %w", q.Name, err)
		}
		row := make([]any, len(ptrs))
		for i, p := range ptrs {
			row[i] = normalize(reflect.ValueOf(p).Elem().Interface())
		}
		res.Rows = append(res.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query %s: %w", q.Name, err)
	}
	return res, nil
}

// normalize maps a scanned value to string, int64 or float64.
func normalize(v any) any {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return x
	case float32:
		return float64(x)
	case time.Time:
		return x.Unix()
	case bool:
		if x {
			return int64(1)
		}
		return int64(0)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer:
		// A Nullable column (current servers type some scalar
		// subqueries so) scans into pointers: the value, or nil for NULL.
		if rv.IsNil() {
			return nil
		}
		return normalize(rv.Elem().Interface())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u := rv.Uint()
		if u > math.MaxInt64 {
			return float64(u)
		}
		return int64(u)
	}
	return fmt.Sprint(v)
}

// Snapshot copies the attempts and requests of range r into two Memory
// tables of database, so that many queries over one range merge the facts
// once instead of once each (the views cannot take the range inside their
// GROUP BY). It reads the views' bodies as FinalTables or RangedTables
// rewrite them, which give the views' rows. CREATE TABLE … AS SELECT is DDL, which works on 18.16 over the
// native protocol. drop removes the tables; call it when done.
func Snapshot(ctx context.Context, conn driver.Conn, database string, r Range) (t Tables, drop func(), err error) {
	t, creates, drops, err := SnapshotSQL(ctx, conn, database, r)
	if err != nil {
		return Tables{}, func() {}, err
	}
	drop = func() {
		for _, q := range drops {
			_ = conn.Exec(context.Background(), q)
		}
	}
	// The tables are built at once, on as many connections: merging the
	// facts is most of a report's work, and each statement merges its own
	// share of the facts.
	errs := make([]error, len(creates))
	var wg sync.WaitGroup
	for i, q := range creates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := conn.Exec(ctx, q); err != nil {
				errs[i] = fmt.Errorf("snapshot %d of %d: %w", i+1, len(creates), err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		drop()
		return Tables{}, func() {}, err
	}
	return t, drop, nil
}

// SnapshotSQL is the SQL of Snapshot: the tables, the two CREATE TABLE …
// AS SELECT statements that take them (attempts, requests; Snapshot runs
// them at once) and the DROP statements. `sluice bench report` runs the
// same statements through clickhouse-client as its reference.
//
// When the database holds events older than r.From − (r.To − r.From) (a
// retention longer than the range and the range before it), the snapshot
// reads RangedTables instead of FinalTables: only the facts of the requests
// with an event in r are merged, not every request ever stored. Otherwise
// FinalTables (the IN set would filter out little and cost its own scan).
// Either way the facts are read FINAL and only the queried columns kept.
func SnapshotSQL(ctx context.Context, conn driver.Conn, database string, r Range) (t Tables, creates, drops []string, err error) {
	ranged, err := hasEventsBefore(ctx, conn, database, r.From.Add(-r.To.Sub(r.From)))
	if err != nil {
		return Tables{}, nil, nil, err
	}
	return snapshotSQL(ctx, conn, database, r, ranged)
}

func snapshotSQL(ctx context.Context, conn driver.Conn, database string, r Range, ranged bool) (t Tables, creates, drops []string, err error) {
	suffix := strconv.FormatInt(r.From.Unix(), 10) + "_" + strconv.FormatInt(r.To.Unix(), 10) + "_" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	db := quoteIdent(database)
	in := ""
	if ranged {
		in = rangedFilter(database, r)
	}
	split, err := attemptsSplit(ctx, conn, database)
	if err != nil {
		return Tables{}, nil, nil, err
	}
	// The attempts are read in two halves of request_id at once when a
	// boundary exists: a FINAL read is one stream on 18.16, so one
	// statement keeps one core busy however many the server has.
	type part struct{ table, view, filter string }
	var parts []part
	if split == "" {
		parts = append(parts, part{db + ".tmp_report_attempts_" + suffix, "attempts", in})
		t.Attempts = parts[0].table
	} else {
		for i, cond := range []string{"request_id < " + split, "request_id >= " + split} {
			f := cond
			if in != "" {
				f = in + " AND " + cond
			}
			parts = append(parts, part{db + ".tmp_report_attempts_" + strconv.Itoa(i) + "_" + suffix, "attempts", f})
		}
		t.Attempts = "(SELECT * FROM " + parts[0].table + " UNION ALL SELECT * FROM " + parts[1].table + ")"
	}
	parts = append(parts, part{db + ".tmp_report_requests_" + suffix, "requests", in})
	t.Requests = parts[len(parts)-1].table
	where := " WHERE produced_at >= toDateTime(" + strconv.FormatInt(r.From.Unix(), 10) + ") AND produced_at < toDateTime(" + strconv.FormatInt(r.To.Unix(), 10) + ")"
	for _, p := range parts {
		src, err := snapshotSources(database, p.filter)
		if err != nil {
			return Tables{}, nil, nil, err
		}
		from := src.Attempts
		if p.view == "requests" {
			from = src.Requests
		}
		cols, err := queriedColumns(ctx, conn, database, p.view)
		if err != nil {
			return Tables{}, nil, nil, err
		}
		creates = append(creates, "CREATE TABLE "+p.table+" ENGINE = Memory AS SELECT "+cols+" FROM "+from+where+snapshotSettings)
		drops = append(drops, "DROP TABLE IF EXISTS "+p.table)
	}
	return t, creates, drops, nil
}

// attemptsSplit returns the median request_id of the per-attempt facts'
// rows as a SQL string literal, or "" when there are none. The rows are
// counted from system.parts (unmerged duplicates included: the split need
// not be exact); the sort reads the request_id column alone.
func attemptsSplit(ctx context.Context, conn driver.Conn, database string) (string, error) {
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT sum(rows) FROM system.parts WHERE database = ? AND table = 'attempt_facts' AND active", database).Scan(&n); err != nil {
		return "", fmt.Errorf("snapshot: split attempts: %w", err)
	}
	if n < 2 {
		return "", nil
	}
	rows, err := conn.Query(ctx, "SELECT request_id FROM "+quoteIdent(database)+".attempt_facts ORDER BY request_id LIMIT 1 OFFSET "+strconv.FormatUint(n/2, 10))
	if err != nil {
		return "", fmt.Errorf("snapshot: split attempts: %w", err)
	}
	defer rows.Close()
	var id string
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return "", fmt.Errorf("snapshot: split attempts: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("snapshot: split attempts: %w", err)
	}
	if id == "" {
		return "", nil
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(id) + "'", nil
}

// snapshotSettings lets a snapshot's GROUP BY spill to disk past 2 GB,
// half the default 4 GB query limit: merging the attempts of 2M attempts
// (two weeks of a 20M-event database) took more than 3.7 GB on 18.16 and
// failed with "Memory limit (for query) exceeded".
const snapshotSettings = " SETTINGS max_bytes_before_external_group_by = 2000000000"

// hasEventsBefore says whether database holds an event produced before
// t. The events are partitioned by day of produced_at, so the server
// skips every newer partition and reads at most one granule.
func hasEventsBefore(ctx context.Context, conn driver.Conn, database string, t time.Time) (bool, error) {
	var n uint64
	q := "SELECT count() FROM (SELECT 1 FROM " + quoteIdent(database) + ".events WHERE produced_at < toDateTime(" + strconv.FormatInt(t.Unix(), 10) + ") LIMIT 1)"
	if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
		return false, fmt.Errorf("snapshot: oldest event: %w", err)
	}
	return n > 0, nil
}

// factsFrom matches a view body's read of a facts table up to the clause
// after it, where the ranged snapshot puts its request_id filter.
var factsFrom = regexp.MustCompile(`FROM (\S+\.(?:attempt_facts|request_facts|request_estimates)) AS (\w+)\s+(WHERE|GROUP BY)`)

// finalRead matches the views' merge of the per-attempt or per-request
// facts (alias f; an optional filter the ranged snapshot added) up to its
// GROUP BY by the sorting key, and mergeOfF one merge of such a state.
var (
	finalRead = regexp.MustCompile(`FROM (\S+\.(?:attempt_facts|request_facts)) AS f((?:\s+WHERE \S.*?)?)\s+GROUP BY request_id(?:, attempt)?\b`)
	mergeOfF  = regexp.MustCompile(`\b\w+Merge\(f\.(s_\w+)\)`)
)

// RangedTables returns the attempts and requests views as subqueries that
// merge only the facts of the requests with an event in r: each read of a
// facts table in the views' bodies (the newest migration's CREATE VIEW)
// gets WHERE request_id IN (the request ids of r's events). Every fact row
// of such a request is kept, so each merged row is the view's row, and
// every attempt or request whose produced_at (its first event) falls in r
// has an event in r: filtered by produced_at over r, the subqueries give
// the views' rows exactly. The per-attempt and per-request facts are read
// as FinalTables reads them. The bodies are plain SQL, so they run on
// every engine (the chDB comparison runs the queries over them too).
func RangedTables(database string, r Range) (Tables, error) {
	return snapshotSources(database, rangedFilter(database, r))
}

// rangedFilter is RangedTables' filter: the request ids of r's events.
func rangedFilter(database string, r Range) string {
	return "request_id IN (SELECT request_id FROM " + quoteIdent(database) + ".events WHERE produced_at >= toDateTime(" + strconv.FormatInt(r.From.Unix(), 10) +
		") AND produced_at < toDateTime(" + strconv.FormatInt(r.To.Unix(), 10) + ") AND request_id != '')"
}

// FinalTables returns the attempts and requests views as subqueries that
// read the per-attempt and per-request facts with FINAL and
// finalizeAggregation instead of -Merge functions under GROUP BY request_id
// (, attempt). Both give one row per sorting key with every state merged
// (the facts are unpartitioned AggregatingMergeTree tables, so FINAL
// merges all of a key's rows), but FINAL merges the parts as sorted
// streams: no hash table of every attempt and its ~37 states, which over
// two weeks of 10M events took ~3.5 GB on 18.16 and spilled to disk.
// The small join of the first attempt's estimates keeps its GROUP BY.
func FinalTables(database string) (Tables, error) { return snapshotSources(database, "") }

// snapshotSources rewrites the views' bodies: in, if not empty, filters
// every read of a facts table (RangedTables); the merges of the facts
// aliased f become FINAL reads (FinalTables).
func snapshotSources(database, in string) (Tables, error) {
	ms, err := Migrations()
	if err != nil {
		return Tables{}, err
	}
	qs, err := Queries()
	if err != nil {
		return Tables{}, err
	}
	var all strings.Builder
	for _, q := range qs {
		all.WriteString(q.SQL)
		all.WriteByte('\n')
	}
	words := map[string]bool{}
	for _, w := range identWord.FindAllString(all.String(), -1) {
		words[w] = true
	}
	queried := func(col string) bool { return words[col] }
	db := quoteIdent(database)
	body := func(view string, reads int) (string, error) {
		prefix := "CREATE VIEW IF NOT EXISTS " + db + "." + view + " AS"
		var last string
		for _, m := range ms {
			for _, st := range m.Statements(database) {
				if strings.HasPrefix(st, prefix) {
					last = strings.TrimSpace(strings.TrimPrefix(st, prefix))
				}
			}
		}
		if last == "" {
			return "", fmt.Errorf("snapshot %s: no migration creates the view", view)
		}
		out := last
		if in != "" {
			n := 0
			out = factsFrom.ReplaceAllStringFunc(out, func(m string) string {
				n++
				g := factsFrom.FindStringSubmatch(m)
				if g[3] == "WHERE" {
					return "FROM " + g[1] + " AS " + g[2] + " WHERE " + in + " AND"
				}
				return "FROM " + g[1] + " AS " + g[2] + " WHERE " + in + " GROUP BY"
			})
			if n != reads {
				// A view rewritten since: say so rather than filter part of it.
				return "", fmt.Errorf("ranged %s: the view body reads a facts table %d times, want %d", view, n, reads)
			}
		}
		if n := len(finalRead.FindAllStringIndex(out, -1)); n != 1 {
			return "", fmt.Errorf("snapshot %s: the view body merges the facts aliased f %d times, want 1", view, n)
		}
		out = finalRead.ReplaceAllString(out, "FROM $1 AS f FINAL$2")
		out = mergeOfF.ReplaceAllString(out, "finalizeAggregation(f.$1)")
		return "(" + pruneUnqueried(out, queried) + ")", nil
	}
	var t Tables
	if t.Attempts, err = body("attempts", 2); err != nil {
		return Tables{}, err
	}
	if t.Requests, err = body("requests", 1); err != nil {
		return Tables{}, err
	}
	return t, nil
}

var (
	identWord = regexp.MustCompile(`\w+`)
	// identList is a select-list line of bare column names ending in a
	// comma; finalLine a finalized state under its alias.
	identList    = regexp.MustCompile(`^(\s*)(\w+(?:, \w+)*),\s*$`)
	finalLine    = regexp.MustCompile(`^\s*finalizeAggregation\(f\.s_\w+\) AS (\w+),?\s*$`)
	commaTilFrom = regexp.MustCompile(`,(\s*\n\s*FROM\b)`)
)

// pruneUnqueried drops from a rewritten view body the columns no embedded
// query names: 18.16 computes every column of a subquery, used or not
// (the per-request uniqExact sets of attempts cost most of the requests
// snapshot). First the bare names of the outermost select list (columns
// passed through from below: the expressions above still see the column
// beneath), then each finalized state whose alias no query names and
// nothing else in the body reads.
func pruneUnqueried(body string, queried func(string) bool) string {
	lines := strings.Split(body, "\n")
	var out []string
	outer := true
	for _, l := range lines {
		if strings.HasPrefix(l, "FROM") {
			outer = false
		}
		if m := identList.FindStringSubmatch(l); outer && m != nil {
			var keep []string
			for _, c := range strings.Split(m[2], ", ") {
				if queried(c) {
					keep = append(keep, c)
				}
			}
			if len(keep) > 0 {
				out = append(out, m[1]+strings.Join(keep, ", ")+",")
			}
			continue
		}
		out = append(out, l)
	}
	joined := strings.Join(out, "\n")
	uses := map[string]int{}
	for _, w := range identWord.FindAllString(joined, -1) {
		uses[w]++
	}
	lines, out = out, nil
	for _, l := range lines {
		if m := finalLine.FindStringSubmatch(l); m != nil && !queried(m[1]) && uses[m[1]] == 1 {
			continue
		}
		out = append(out, l)
	}
	return commaTilFrom.ReplaceAllString(strings.Join(out, "\n"), "$1")
}

// queriedColumns lists the columns of view that some embedded query names,
// comma-separated: a snapshot copies only those. Every column of a view is
// an aggregate state merged per request, so one the queries never read
// (uniqExact sets of attempts, error codes, …) is work for nothing; a new
// query naming a column gets it in the snapshot with no change here.
func queriedColumns(ctx context.Context, conn driver.Conn, database, view string) (string, error) {
	qs, err := Queries()
	if err != nil {
		return "", err
	}
	var all strings.Builder
	for _, q := range qs {
		all.WriteString(q.SQL)
		all.WriteByte('\n')
	}
	rows, err := conn.Query(ctx, "SELECT name FROM system.columns WHERE database = ? AND table = ?", database, view)
	if err != nil {
		return "", fmt.Errorf("snapshot %s: columns: %w", view, err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return "", fmt.Errorf("snapshot %s: columns: %w", view, err)
		}
		if regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).MatchString(all.String()) {
			cols = append(cols, name)
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("snapshot %s: columns: %w", view, err)
	}
	if len(cols) == 0 {
		return "", fmt.Errorf("snapshot %s: the view has no column the queries use (is the database migrated?)", view)
	}
	sort.Strings(cols)
	return strings.Join(cols, ", "), nil
}
