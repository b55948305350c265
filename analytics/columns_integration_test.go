//go:build integration

package analytics

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestIntegrationReservedColumnsRoundTrip: rows inserted through the
// sink's insert (driver columns reserved, reserveColumn, in the memory
// of the batch before, colMem) read back from 18.16 equal, column for
// column, the rows given: reserving and reusing change the driver's
// capacity and memory, not what it sends.
func TestIntegrationReservedColumnsRoundTrip(t *testing.T) {
	conn := openCH(t)
	db := testDatabase(t, conn)
	ctx := context.Background()
	if _, err := Migrate(ctx, conn, db); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	rows := synthRows(t, n)
	// Three batches through one inserter, each smaller than the one
	// before: the second and third fill the driver memory of the batch
	// before (colMem), so a row left over from it would show here.
	ins := &chInserter{conn: conn, sql: insertEventsSQL(db), capsSQL: insertCapacitySQL(db)}
	for _, span := range [][2]int{{0, 1500}, {1500, 2500}, {2500, n}} {
		ps := make([]pending, 0, span[1]-span[0])
		for i := span[0]; i < span[1]; i++ {
			ps = append(ps, pending{row: rows[i]})
		}
		if err := ins.insert(ctx, ps); err != nil {
			t.Fatalf("insert rows %d-%d: %v", span[0], span[1], err)
		}
	}
	if len(ins.mem.sets) == 0 {
		t.Fatal("no driver memory kept after the inserts: the reuse is not tested")
	}
	res, err := conn.Query(ctx, "SELECT "+strings.Join(eventColumns, ", ")+" FROM "+quoteIdent(db)+".events ORDER BY `offset`")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	got := 0
	for ; res.Next(); got++ {
		want := rows[min(got, n-1)].values() // offset = index
		dst := make([]any, len(want))
		for j, v := range want {
			dst[j] = reflect.New(reflect.TypeOf(v)).Interface()
		}
		if err := res.Scan(dst...); err != nil {
			t.Fatalf("scan row %d: %v", got, err)
		}
		for j, v := range want {
			g := reflect.ValueOf(dst[j]).Elem().Interface()
			if tv, ok := v.(time.Time); ok {
				if gt := g.(time.Time); !gt.Equal(tv) {
					t.Fatalf("row %d column %s: %v, want %v", got, eventColumns[j], gt, tv)
				}
				continue
			}
			if !reflect.DeepEqual(g, v) {
				t.Fatalf("row %d column %s: %v, want %v", got, eventColumns[j], g, v)
			}
		}
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Fatalf("%d rows read back, want %d", got, n)
	}
}
