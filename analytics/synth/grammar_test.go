package synth

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// unrecorded are attempt shapes the gateway and the ledger write (the
// code says so) that no recorded log has yet, with why; synth emits them
// so the queries see them.
var unrecorded = map[string]string{
	"decision:denied outcome:failure reserve":                      "a first attempt denied locally (a request above its bucket, or a full queue): the recorded loads stay under max_depth",
	"decision:granted decision:hold_expired retry":                 "a gateway killed holding the grant of a retry: the ledger expires the hold (recorded-oracle-faults has it on first attempts)",
	"decision:granted outcome:timeout released:late_grant reserve": "a late grant whose deadline leaves no time to ask again: the request fails late_grant (recorded-oracle-faults has only grants asked again)",
}

// canon drops "decision:queued": whether the ledger queued an attempt
// before granting it depends only on the bucket's level at that moment
// (the recorded logs have both forms of the same shapes).
func canon(shape string) string {
	var out []string
	for _, t := range strings.Fields(shape) {
		if t != "decision:queued" {
			out = append(out, t)
		}
	}
	return strings.Join(out, " ")
}

// asFirst is a retry's shape as the first attempt's it repeats: a retry
// is the same reservation again (same path and estimates), announced by
// a RetryRequested instead of a ReserveRequested.
func asFirst(shape string) string {
	ts := strings.Fields(strings.ReplaceAll(shape, "retry", "reserve"))
	sort.Strings(ts)
	return strings.Join(ts, " ")
}

// TestShapesMatchRecorded: the generator writes what the gateway writes.
// Every attempt shape in the logs recorded from the real gateway, ledger
// and simulator (../testdata/recorded-*.jsonl.gz) is one synth writes,
// and every shape synth writes is recorded, or a recorded first attempt's
// shape on a retry, or one of the unrecorded shapes above. No attempt has
// both a ReserveRequested and a RetryRequested.
func TestShapesMatchRecorded(t *testing.T) {
	files, err := filepath.Glob("../testdata/recorded-*.jsonl.gz")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded logs in ../testdata: %v", err)
	}
	recorded := map[string]int{}
	for _, f := range files {
		recs, err := ReadLog(f)
		if err != nil {
			t.Fatal(err)
		}
		for s, n := range ShapesOf(recs) {
			recorded[canon(s)] += n
		}
	}
	generated := map[string]int{}
	for s, n := range ShapesOf(Generate(Options{Seed: 7, Requests: 3000})) {
		generated[canon(s)] += n
	}
	for s, n := range recorded {
		if generated[s] == 0 {
			t.Errorf("recorded %d attempts %q; synth writes none", n, s)
		}
	}
	for s, n := range generated {
		_, known := unrecorded[canon(s)]
		switch {
		case recorded[s] > 0, known:
		case strings.Contains(s, "retry") && recorded[asFirst(s)] > 0:
		default:
			t.Errorf("synth writes %d attempts %q, which no recorded log has", n, s)
		}
	}
	for s := range unrecorded {
		if recorded[s] > 0 {
			t.Errorf("%q is listed as unrecorded, but the recorded logs have %d such attempts: drop it from the list", s, recorded[s])
		}
	}
	for _, m := range []map[string]int{recorded, generated} {
		for s := range m {
			if strings.Contains(s, "reserve") && strings.Contains(s, "retry") {
				t.Errorf("an attempt with a ReserveRequested and a RetryRequested: %q", s)
			}
		}
	}
}
