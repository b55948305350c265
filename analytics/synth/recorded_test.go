package synth

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestLogRoundTrip: WriteLog then ReadLog gives the records back, byte
// for byte.
func TestLogRoundTrip(t *testing.T) {
	recs := Generate(Options{Seed: 5, Requests: 50})
	path := filepath.Join(t.TempDir(), "log.jsonl.gz")
	if err := WriteLog(path, recs); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("%d records, want %d", len(got), len(recs))
	}
	for i := range recs {
		if !bytes.Equal(got[i].Value, recs[i].Value) || got[i].LogTimeMs != recs[i].LogTimeMs || got[i].Partition != recs[i].Partition {
			t.Fatalf("record %d differs", i)
		}
	}
}

// FuzzReadLines: any bytes give records or an error, never a panic, and
// every record returned has a decoded event.
func FuzzReadLines(f *testing.F) {
	f.Add([]byte(`{"partition":0,"log_time_ms":1,"value":{"v":1,"id":"x","type":"Tick","produced_at_ms":1,"tick":{}}}` + "\n"))
	f.Add([]byte("{}\n\n"))
	f.Add([]byte(`{"value":"nope"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := readLines("fuzz", bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, r := range recs {
			if r.Event == nil {
				t.Fatal("a record without its event")
			}
		}
	})
}
