// Package analytics holds Sluice's ClickHouse side: the schema and its
// migrations, the raw event sink (Kafka → ClickHouse) and query helpers.
//
// Everything here must work against ClickHouse 18.16 (the Debian package the
// local scripts start) through clickhouse-go/v2's native protocol, and against
// current ClickHouse releases. DESIGN.md §6 lists what that allows; README.md
// in this directory repeats it for this package.
package analytics

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// DefaultDatabase is the ClickHouse database Sluice uses unless told otherwise.
const DefaultDatabase = "sluice"

// DialTimeout bounds connecting to ClickHouse, so an unreachable server is
// reported quickly instead of after the driver's 30 s default.
const DialTimeout = 3 * time.Second

// ErrUnreachable is wrapped by the errors Open and RunSink return when
// ClickHouse or Kafka cannot be reached at all.
var ErrUnreachable = errors.New("unreachable")

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidDatabase reports whether name is acceptable as a database name. Only
// plain identifiers are allowed, so names can be spliced into DDL safely.
func ValidDatabase(name string) error {
	if !identRE.MatchString(name) || len(name) > 128 {
		return fmt.Errorf("clickhouse database name %q is invalid: use letters, digits and _ only, not starting with a digit", name)
	}
	return nil
}

// quoteIdent quotes a name already checked by ValidDatabase.
func quoteIdent(name string) string { return "`" + name + "`" }

// Open connects to the ClickHouse server at addr (host:port of the native
// protocol, e.g. 127.0.0.1:19000) as user default without password, with
// database as the default database for unqualified table names ("" means
// ClickHouse's "default" database; a named database must already exist — see
// Migrate). It pings the server before returning, so an unreachable server
// fails here with an error wrapping ErrUnreachable.
//
// Only Ping, Exec of DDL, Query/QueryRow with client-side ? binding and
// PrepareBatch with an explicit column list are safe against ClickHouse 18.16
// (see README.md).
func Open(ctx context.Context, addr, database string) (driver.Conn, error) {
	if database == "" {
		database = "default"
	}
	if err := ValidDatabase(database); err != nil {
		return nil, err
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:            []string{addr},
		Protocol:        clickhouse.Native,
		Auth:            clickhouse.Auth{Database: database, Username: "default"},
		DialTimeout:     DialTimeout,
		MaxOpenConns:    4,
		MaxIdleConns:    2,
		ConnMaxLifetime: time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse at %s: %w", addr, err)
	}
	pctx, cancel := context.WithTimeout(ctx, DialTimeout+2*time.Second)
	defer cancel()
	if err := conn.Ping(pctx); err != nil {
		_ = conn.Close()
		var ex *clickhouse.Exception
		if errors.As(err, &ex) {
			// The server answered: it is reachable but refused us (unknown
			// database, authentication, …).
			return nil, fmt.Errorf("clickhouse at %s (database %s): %w", addr, database, err)
		}
		return nil, fmt.Errorf("clickhouse at %s %w: %v (start it with `make up` or set --clickhouse)", addr, ErrUnreachable, err)
	}
	return conn, nil
}
