package ledger

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// gzipped is b as one gzip stream at level.
func gzipped(t testing.TB, b []byte, level int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRestoreReadsGzippedAndPlain: a snapshot restores to the same state
// whether its bytes are plain (what every ledger wrote before, and writes
// with --snapshot-plain) or gzipped (what the ledger service writes now),
// so an upgraded ledger takes over from an old one's snapshots and the
// other way round; gzip that is damaged, holds no snapshot, or inflates
// past maxSnapshotState is refused, not restored.
func TestRestoreReadsGzippedAndPlain(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"scopes":[{"name":"s","buckets":[
 {"level":"key","id":"*","dimension":"requests","capacity":1000,"period_ms":60000,"window_ms":60000}]}],"hold_ttl_ms":600000}`))
	if err != nil {
		t.Fatal(err)
	}
	l := New(0, cfg)
	for i := range 300 {
		if out := l.Apply(1_000_000+int64(i), int64(i), reserve(fmt.Sprintf("r%d", i)), nil); len(out) != 1 || out[0].Decision.Status != schemas.StatusGranted {
			t.Fatalf("reserve %d: %+v", i, out)
		}
	}
	plain, err := l.MarshalSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	gz := gzipped(t, plain, gzip.BestSpeed)
	if len(gz)*5 > len(plain) {
		t.Fatalf("gzip gave %d of %d bytes: want at least 5 times smaller", len(gz), len(plain))
	}
	for _, tt := range []struct {
		name    string
		b       []byte
		max     int64  // maxSnapshotState for the case; 0: the default
		wantErr string // "": restores to the state of plain
	}{
		{name: "plain (old format)", b: plain},
		{name: "gzipped", b: gz},
		{name: "gzipped at another level", b: gzipped(t, plain, gzip.BestCompression)},
		{name: "gzipped, just within the bound", b: gz, max: int64(len(plain))},
		{name: "gzipped, past the bound", b: gz, max: int64(len(plain)) - 1, wantErr: "inflates past"},
		{name: "gzip header alone", b: gz[:10], wantErr: "gzip"},
		{name: "gzip cut short", b: gz[:len(gz)/2], wantErr: "gzip"},
		{name: "gzip, checksum wrong", b: append(bytes.Clone(gz[:len(gz)-8]), 0, 0, 0, 0, 0, 0, 0, 0), wantErr: "gzip"},
		{name: "gzip magic, then junk", b: []byte("\x1f\x8bnot a gzip stream"), wantErr: "gzip"},
		{name: "gzip of no snapshot", b: gzipped(t, []byte(`{"next":3}`), gzip.BestSpeed), wantErr: "bad magic"},
		{name: "gzip of a gzipped snapshot", b: gzipped(t, gz, gzip.BestSpeed), wantErr: "bad magic"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.max != 0 {
				defer func(m int64) { maxSnapshotState = m }(maxSnapshotState)
				maxSnapshotState = tt.max
			}
			r, err := Restore(tt.b)
			switch {
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
			case tt.wantErr != "":
				return
			case err != nil:
				t.Fatal(err)
			}
			got, err := r.MarshalSnapshot()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, plain) {
				t.Fatalf("restored state differs from the snapshotted one (%d bytes, want %d)", len(got), len(plain))
			}
		})
	}
}
