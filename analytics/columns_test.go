package analytics

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/sluice-dev/sluice/analytics/synth"
)

// chTypeOf is the events column type each eventCols slice type fills
// (001_events.sql and later migrations).
var chTypeOf = map[reflect.Type]column.Type{
	reflect.TypeFor[[]string]():    "String",
	reflect.TypeFor[[]uint8]():     "UInt8",
	reflect.TypeFor[[]uint16]():    "UInt16",
	reflect.TypeFor[[]uint32]():    "UInt32",
	reflect.TypeFor[[]uint64]():    "UInt64",
	reflect.TypeFor[[]int32]():     "Int32",
	reflect.TypeFor[[]int64]():     "Int64",
	reflect.TypeFor[[]time.Time](): "DateTime",
}

// synthRows is n synthetic events rows (every event type, an invalid
// record every 97th), at offsets 0..n-1.
func synthRows(t testing.TB, n int) []Row {
	t.Helper()
	recs := synth.Generate(synth.Options{Seed: 3, Requests: n/5 + 1})
	if len(recs) < n {
		t.Fatalf("synth gave %d records, want %d", len(recs), n)
	}
	rows := make([]Row, n)
	for i := range rows {
		r := &recs[i]
		value := r.Value
		if i%97 == 0 {
			value = value[:len(value)/2] // an invalid record: its decode error and raw payload
		}
		rows[i], _ = RowFromRecord(value, RecordPos{Topic: "t", Partition: r.Partition, Offset: int64(i), LogTime: time.UnixMilli(r.LogTimeMs)})
	}
	return rows
}

// synthCols is synthRows as the sink's columns.
func synthCols(t testing.TB, n int) *eventCols {
	t.Helper()
	var c eventCols
	for _, r := range synthRows(t, n) {
		c.add(&r)
	}
	return &c
}

// TestReserveEventColumns: every driver column type the events insert
// fills can be reserved (a clickhouse-go upgrade that hides its buffers
// otherwise fails here rather than silently slowing the sink down), the
// reserved column takes the whole batch without growing again, and it
// holds the same rows as a column filled without reserving.
func TestReserveEventColumns(t *testing.T) {
	const n = 5000
	c := synthCols(t, n)
	sc := &column.ServerContext{Timezone: time.UTC}
	for i, s := range c.slices() {
		name := eventColumns[i]
		typ, ok := chTypeOf[reflect.TypeOf(s)]
		if !ok {
			t.Fatalf("column %s: no ClickHouse type for %T", name, s)
		}
		newCol := func() column.Interface {
			col, err := typ.Column(name, sc)
			if err != nil {
				t.Fatalf("column %s %s: %v", name, typ, err)
			}
			return col
		}
		plain, reserved := newCol(), newCol()
		rows, bytes := colSize(s)
		if rows != n {
			t.Fatalf("column %s: colSize %d rows, want %d", name, rows, n)
		}
		if !reserveColumn(reserved, rows, bytes) {
			t.Fatalf("column %s (%s, %T): cannot reserve the driver's column", name, typ, reserved)
		}
		before := colCaps(t, reserved)
		if _, err := plain.Append(s); err != nil {
			t.Fatalf("column %s: append: %v", name, err)
		}
		if _, err := reserved.Append(s); err != nil {
			t.Fatalf("column %s: append reserved: %v", name, err)
		}
		if after := colCaps(t, reserved); !reflect.DeepEqual(after, before) {
			t.Errorf("column %s: capacity %v after the append, %v reserved: it grew", name, after, before)
		}
		if plain.Rows() != n || reserved.Rows() != n {
			t.Fatalf("column %s: %d rows plain, %d reserved, want %d", name, plain.Rows(), reserved.Rows(), n)
		}
		for r := 0; r < n; r++ {
			if p, q := plain.Row(r, false), reserved.Row(r, false); !reflect.DeepEqual(p, q) {
				t.Fatalf("column %s row %d: %v reserved, %v plain", name, r, q, p)
			}
		}
	}
}

// colCaps are the capacities of the slices in a driver column's ch-go
// column (as reserveColumn finds them).
func colCaps(t *testing.T, col column.Interface) []int {
	t.Helper()
	f := reflect.ValueOf(col).Elem().FieldByName("col")
	switch f.Kind() {
	case reflect.Slice:
		return []int{f.Cap()}
	case reflect.Struct:
		var caps []int
		for j := 0; j < f.NumField(); j++ {
			if f.Field(j).Kind() == reflect.Slice {
				caps = append(caps, f.Field(j).Cap())
			}
		}
		return caps
	}
	t.Fatalf("%T: no slices", col)
	return nil
}

// TestReserveColumnRefusesUnknown: a column whose buffers are not where
// reserveColumn looks is left alone, and the insert fills it as before.
func TestReserveColumnRefusesUnknown(t *testing.T) {
	for _, typ := range []column.Type{"Array(String)", "Nullable(String)", "Map(String, String)"} {
		col, err := typ.Column("x", &column.ServerContext{Timezone: time.UTC})
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if reserveColumn(col, 10, 100) {
			t.Errorf("%s (%T): reserved, want left alone", typ, col)
		}
	}
}

// TestReserveColumnReusesSpare: a column reserved in the memory of a
// column of the batch before (reserveColumnIn with keepColumns' copy)
// takes that memory over, and holds exactly the new batch's rows, as a
// column filled without reserving does: nothing of the batch before
// shows, whether the new batch is larger or smaller.
func TestReserveColumnReusesSpare(t *testing.T) {
	rows := synthRows(t, 3000)
	cols := func(rs []Row) *eventCols {
		var c eventCols
		for i := range rs {
			c.add(&rs[i])
		}
		return &c
	}
	reversed := slices.Clone(rows)
	slices.Reverse(reversed)
	sc := &column.ServerContext{Timezone: time.UTC}
	for _, tc := range []struct {
		name        string
		before, now *eventCols
	}{
		{"same size", cols(rows), cols(reversed)},
		{"smaller", cols(rows), cols(reversed[:1000])},
		{"larger", cols(rows[:1000]), cols(reversed)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev, now := tc.before.slices(), tc.now.slices()
			for i, s := range now {
				name := eventColumns[i]
				typ := chTypeOf[reflect.TypeOf(s)]
				newCol := func() column.Interface {
					col, err := typ.Column(name, sc)
					if err != nil {
						t.Fatalf("column %s %s: %v", name, typ, err)
					}
					return col
				}
				old, plain, reused := newCol(), newCol(), newCol()
				if _, err := old.Append(prev[i]); err != nil {
					t.Fatalf("column %s: append the batch before: %v", name, err)
				}
				spare := reflect.ValueOf(chColumn(old).Interface())
				n, bytes := colSize(s)
				if !reserveColumnIn(reused, n, bytes, spare) {
					t.Fatalf("column %s (%T): cannot reserve", name, reused)
				}
				if tc.name != "larger" && !sameMemory(chColumn(reused), spare) {
					t.Errorf("column %s: reserved in new memory, want the batch before's", name)
				}
				for _, c := range []column.Interface{plain, reused} {
					if _, err := c.Append(s); err != nil {
						t.Fatalf("column %s: append: %v", name, err)
					}
				}
				if plain.Rows() != n || reused.Rows() != n {
					t.Fatalf("column %s: %d rows plain, %d reused, want %d", name, plain.Rows(), reused.Rows(), n)
				}
				for r := 0; r < n; r++ {
					if p, q := plain.Row(r, false), reused.Row(r, false); !reflect.DeepEqual(p, q) {
						t.Fatalf("column %s row %d: %v reused, %v plain", name, r, q, p)
					}
				}
			}
		})
	}
}

// sameMemory says whether every slice of ch-go column b that holds
// memory (cap > 0) is where the same slice of a starts.
func sameMemory(a, b reflect.Value) bool {
	if a.Kind() == reflect.Slice {
		return b.Cap() == 0 || a.Pointer() == b.Pointer()
	}
	for j := 0; j < b.NumField(); j++ {
		if f := b.Field(j); f.Kind() == reflect.Slice && f.Cap() > 0 && a.Field(j).Pointer() != f.Pointer() {
			return false
		}
	}
	return true
}
