package synth

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/sluice-dev/sluice/schemas"
)

// recordedLine is one line of a recorded log: a Kafka record's partition,
// log time and value (the encoded event, kept as it was produced).
type recordedLine struct {
	Partition int32           `json:"partition"`
	LogTimeMs int64           `json:"log_time_ms"`
	Value     json.RawMessage `json:"value"`
}

// WriteLog writes records as gzipped JSON lines: the recorded logs of
// analytics/testdata, taken from the real gateway, ledger and simulator.
func WriteLog(path string, recs []Record) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("recorded log: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("recorded log %s: %w", path, cerr)
		}
	}()
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	for _, r := range recs {
		if err := enc.Encode(recordedLine{Partition: r.Partition, LogTimeMs: r.LogTimeMs, Value: r.Value}); err != nil {
			return fmt.Errorf("recorded log %s: %w", path, err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("recorded log %s: %w", path, err)
	}
	return nil
}

// ReadLog reads a log WriteLog wrote, decoding every event; a line that
// does not decode is an error naming it.
func ReadLog(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("recorded log: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("recorded log %s: %w", path, err)
	}
	return readLines(path, zr)
}

func readLines(path string, r io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var out []Record
	for n := 1; sc.Scan(); n++ {
		var l recordedLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("recorded log %s line %d: %w", path, n, err)
		}
		var e schemas.Event
		if err := schemas.Decode(l.Value, &e); err != nil {
			return nil, fmt.Errorf("recorded log %s line %d: %w", path, n, err)
		}
		out = append(out, Record{Partition: l.Partition, LogTimeMs: l.LogTimeMs, Value: []byte(l.Value), Event: &e})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("recorded log %s: %w", path, err)
	}
	return out, nil
}
