package schemas

import (
	"encoding/json"
	"reflect"
	"testing"
)

// fastSeeds are canonical encodings the fast path must take, and
// near-misses it must hand to encoding/json.
func fastSeeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, e := range goldenEvents() {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	for _, s := range []string{
		`{}`, `null`, ` {"v":1,"type":"Tick","id":"x","tick":{}} `,
		`{"v":1,"type":"Tick","id":"x","tick":{},"v":2}`,
		`{"V":1,"type":"Tick","id":"x","tick":{}}`,
		`{"v":1.0,"type":"Tick","id":"x","tick":{}}`,
		`{"v":01,"type":"Tick","id":"x","tick":{}}`,
		`{"v":1,"type":"Tick","id":"x\u0041","tick":{"reason":"é"}}`,
		`{"v":1,"type":"Tick","id":"x","attempt":2147483648,"tick":{}}`,
		`{"v":1,"type":"Tick","id":"x","tick":null}`,
		`{"v":1,"type":"ReserveRequested","id":"x","reserve_requested":{"path":[]}}`,
		`{"v":1,"type":"ReserveRequested","id":"x","reserve_requested":{"path":[{"level":"a","id":"b"},{"id":"c"}],"streaming":true}}`,
		`{"v":1,"type":"Decision","id":"x","decision":{"status":"granted","shadow":{"buckets":2,"limited":false}}}`,
		`{"v":1,"type":"Heartbeat","id":"x","heartbeat":{}}`,
		`{"v":1,"type":"Heartbeat","id":"x","heartbeat":{"later":1}}`,
		`{"v":-0,"type":"Tick","id":"x","produced_at_ms":-123456789012345678,"tick":{}}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// TestFastDecodeTakesCanonicalEvents guards the speed: the events of the
// request path, as Encode writes them, never fall back to encoding/json.
func TestFastDecodeTakesCanonicalEvents(t *testing.T) {
	for _, e := range goldenEvents() {
		switch e.Type {
		case TypeProviderObserved, TypeConfigChanged, TypeSnapshot, TypeCapacityLearned,
			TypeLeaseRequested, TypeLeaseGranted, TypeLeaseReturned: // one a lease term, not one a request
			continue // rare on the hot path: encoding/json decodes them
		}
		b, err := Encode(&e)
		if err != nil {
			t.Fatal(err)
		}
		var got Event
		if !decodeFast(b, &got) {
			t.Errorf("%s: the fast path gave up on %s", e.Type, b)
		} else if !reflect.DeepEqual(got, e) {
			t.Errorf("%s: fast path decoded %+v, want %+v", e.Type, got, e)
		}
	}
}

// FuzzFastDecodeMatchesJSON is the differential proof: whenever the fast
// path decodes something, encoding/json accepts it too and decodes exactly
// the same event; and Decode's verdict is encoding/json's.
func FuzzFastDecodeMatchesJSON(f *testing.F) {
	for _, b := range fastSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast, std Event
		ok := decodeFast(b, &fast)
		err := json.Unmarshal(b, &std)
		if ok {
			if err != nil {
				t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", b, err)
			}
			if !reflect.DeepEqual(fast, std) {
				t.Fatalf("%q: fast path decoded %+v, encoding/json %+v", b, fast, std)
			}
		}
		var viaDecode, viaJSON Event
		e1, e2 := Decode(b, &viaDecode), decodeJSON(b, &viaJSON)
		if (e1 == nil) != (e2 == nil) || (e1 == nil && !reflect.DeepEqual(viaDecode, viaJSON)) {
			t.Fatalf("%q: Decode = %+v, %v; encoding/json = %+v, %v", b, viaDecode, e1, viaJSON, e2)
		}
	})
}

// TestFastDecodeKnowsEveryKey checks the fast decoder's keys against the
// struct tags, by reflection, as TestFastEncodeCoversEveryField does the
// encoder's: every payload the fast path takes, with every field of it and
// of the envelope set (fill), is decoded by the fast path itself, not
// handed to encoding/json, into exactly the event json.Marshal was given.
// A field added to a payload without its key in fastdecode.go, or a key
// spelled there unlike its tag, fails here by name.
func TestFastDecodeKnowsEveryKey(t *testing.T) {
	for _, typ := range fastEncoded {
		if typ == TypeProviderObserved {
			continue // rare on the hot path: encoding/json decodes it (TestFastDecodeTakesCanonicalEvents)
		}
		e := payloadEvent(typ, true)
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var got Event
		if !decodeFast(b, &got) {
			t.Errorf("%s: the fast path gave up on %s: a key it does not know", typ, b)
			continue
		}
		if !reflect.DeepEqual(&got, e) {
			gb, _ := json.Marshal(&got)
			t.Errorf("%s: fast path decoded\n %s\nwant\n %s", typ, gb, b)
		}
	}
}
