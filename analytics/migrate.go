package analytics

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one versioned schema change, read from
// migrations/NNN_name.sql. Its SQL may hold several statements separated by
// ";" at the end of a line; "{db}" stands for the quoted database name.
// Every statement must be idempotent on its own (CREATE … IF NOT EXISTS,
// ADD COLUMN IF NOT EXISTS, …) because a migration interrupted half-way is
// re-run from its first statement.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var migrationName = regexp.MustCompile(`^([0-9]{3,})_([a-z0-9_]+)\.sql$`)

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) { return loadMigrations(migrationFS, "migrations") }

func loadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []Migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q: name must be NNN_name.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		if v <= 0 {
			return nil, fmt.Errorf("migration file %q: version must be ≥ 1", e.Name())
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migration version %d used twice: %s and %s", v, prev, e.Name())
		}
		seen[v] = e.Name()
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, Migration{Version: v, Name: m[2], SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Statements splits the migration into single statements (the native
// protocol runs one statement per query) with {db} replaced by the quoted
// database name. Full-line "--" comments are dropped.
func (m Migration) Statements(database string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for _, line := range strings.Split(m.SQL, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		if strings.HasSuffix(t, ";") {
			cur.WriteString(strings.TrimSuffix(strings.TrimRight(line, " \t\r"), ";"))
			flush()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	flush()
	for i, s := range out {
		out[i] = strings.ReplaceAll(s, "{db}", quoteIdent(database))
	}
	return out
}

// Migrate brings database up to the latest embedded migration: it creates
// the database if needed, then the schema_migrations table, then applies
// every migration whose version is not recorded there, in order, recording
// each after it succeeded. Running it again is a no-op. conn may have any
// default database; all names are qualified. It returns the versions it
// applied.
//
// Two processes migrating at once are safe because every statement is
// idempotent; schema_migrations may then record a version twice, which
// readers ignore.
func Migrate(ctx context.Context, conn driver.Conn, database string) ([]int, error) {
	if database == "" {
		database = DefaultDatabase
	}
	if err := ValidDatabase(database); err != nil {
		return nil, err
	}
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	db := quoteIdent(database)
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+db); err != nil {
		return nil, fmt.Errorf("create database %s: %w", database, err)
	}
	if err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+db+`.schema_migrations
(
    version    UInt32,
    name       String,
    applied_at DateTime
)
ENGINE = MergeTree()
ORDER BY version`); err != nil {
		return nil, fmt.Errorf("create %s.schema_migrations: %w", database, err)
	}
	done, err := AppliedMigrations(ctx, conn, database)
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		for i, stmt := range m.Statements(database) {
			stmt, skip, err := addColumnIfMissing(ctx, conn, stmt)
			if err != nil {
				return applied, fmt.Errorf("migration %03d_%s statement %d: %w", m.Version, m.Name, i+1, err)
			}
			if skip {
				continue
			}
			if err := conn.Exec(ctx, stmt); err != nil {
				return applied, fmt.Errorf("migration %03d_%s statement %d: %w", m.Version, m.Name, i+1, err)
			}
		}
		if err := recordMigration(ctx, conn, database, m); err != nil {
			return applied, err
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// AppliedMigrations returns the versions recorded in database.schema_migrations.
func AppliedMigrations(ctx context.Context, conn driver.Conn, database string) (map[int]bool, error) {
	if err := ValidDatabase(database); err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, "SELECT version FROM "+quoteIdent(database)+".schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("read %s.schema_migrations: %w", database, err)
	}
	defer rows.Close()
	done := map[int]bool{}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read %s.schema_migrations: %w", database, err)
		}
		done[int(v)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s.schema_migrations: %w", database, err)
	}
	return done, nil
}

// recordMigration inserts the migration's row. A batch with an explicit
// column list is the only insert path that works on ClickHouse 18.16.
func recordMigration(ctx context.Context, conn driver.Conn, database string, m Migration) error {
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+quoteIdent(database)+".schema_migrations (version, name, applied_at)")
	if err != nil {
		return fmt.Errorf("record migration %03d: %w", m.Version, err)
	}
	if err := b.Append(uint32(m.Version), m.Name, time.Now().Truncate(time.Second)); err != nil {
		_ = b.Abort()
		return fmt.Errorf("record migration %03d: %w", m.Version, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("record migration %03d: %w", m.Version, err)
	}
	return nil
}

// addColumnRE matches "ALTER TABLE db.t ADD COLUMN IF NOT EXISTS name …",
// one column per statement.
var addColumnRE = regexp.MustCompile("(?is)^ALTER\\s+TABLE\\s+`?([A-Za-z0-9_]+)`?\\.`?([A-Za-z0-9_]+)`?\\s+ADD\\s+COLUMN\\s+(IF\\s+NOT\\s+EXISTS\\s+)([A-Za-z0-9_]+)\\s")

// addColumnIfMissing emulates ADD COLUMN IF NOT EXISTS, which ClickHouse
// 18.16 lacks: if stmt is such an ALTER, it looks the column up in
// system.columns and returns skip when it exists, or the statement without
// IF NOT EXISTS otherwise (which runs on every version). Other statements
// are returned unchanged.
func addColumnIfMissing(ctx context.Context, conn driver.Conn, stmt string) (string, bool, error) {
	m := addColumnRE.FindStringSubmatchIndex(stmt)
	if m == nil {
		return stmt, false, nil
	}
	db, table, col := stmt[m[2]:m[3]], stmt[m[4]:m[5]], stmt[m[8]:m[9]]
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?", db, table, col).Scan(&n); err != nil {
		return "", false, fmt.Errorf("look up column %s.%s.%s: %w", db, table, col, err)
	}
	if n > 0 {
		return "", true, nil
	}
	return stmt[:m[6]] + stmt[m[7]:], false, nil
}
