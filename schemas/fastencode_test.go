package schemas

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// fastEncoded lists the payloads appendFast writes itself.
var fastEncoded = []Type{TypeReserveRequested, TypeDecision, TypeDispatched, TypeReconciled, TypeProviderRejected,
	TypeProviderObserved, TypeRetryRequested, TypeReleased, TypeOutcome, TypeTick, TypeHeartbeat}

// fill sets every field of the struct v points to, recursively, to a
// non-zero value (one element per slice), so that an omitempty field is
// written and a field appendFast does not know shows up in json.Marshal's
// bytes alone.
func fill(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s-" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int32, reflect.Int64:
			f.SetInt(int64(i + 3))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			s := reflect.MakeSlice(f.Type(), 1, 1)
			if s.Index(0).Kind() == reflect.Struct {
				fill(s.Index(0))
			}
			f.Set(s)
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			fill(p.Elem())
			f.Set(p)
		}
	}
}

// payloadEvent returns an event of type t whose envelope and payload are
// full (fill) or, with full false, as empty as Validate allows.
func payloadEvent(t Type, full bool) *Event {
	e := &Event{V: 1, Type: t, ID: "id-1"}
	if full {
		fill(reflect.ValueOf(e).Elem())
		for i := range reflect.TypeFor[Event]().NumField() {
			if f := reflect.ValueOf(e).Elem().Field(i); f.Kind() == reflect.Pointer {
				f.Set(reflect.Zero(f.Type()))
			}
		}
		e.V, e.Type = 1, t
	}
	ev := reflect.ValueOf(e).Elem()
	for i := range ev.NumField() {
		f := ev.Field(i)
		// A payload field's Go name is its event type's.
		if f.Kind() == reflect.Pointer && ev.Type().Field(i).Name == string(t) {
			p := reflect.New(f.Type().Elem())
			if full {
				fill(p.Elem())
			}
			f.Set(p)
		}
	}
	return e
}

// TestFastEncodeCoversEveryField: for every payload the fast path takes,
// full and empty, its bytes are json.Marshal's. A field added to a payload
// (or to the envelope) without its line in fastencode.go fails here.
func TestFastEncodeCoversEveryField(t *testing.T) {
	for _, typ := range fastEncoded {
		for _, full := range []bool{true, false} {
			e := payloadEvent(typ, full)
			if err := e.Validate(); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			want, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := appendFast([]byte("prefix"), e)
			if !ok {
				t.Errorf("%s (full %v): the fast path gave up", typ, full)
				continue
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("%s (full %v):\n got %s\nwant prefix%s", typ, full, got, want)
			}
		}
	}
}

// TestFastEncodeGivesUp: strings json.Marshal escapes, and the payloads
// without a fast form, go to encoding/json, with dst untouched.
func TestFastEncodeGivesUp(t *testing.T) {
	for _, s := range []string{`a"b`, `a\b`, "a<b", "a>b", "a&b", "é", "a\nb", "a\x7fb"} {
		e := payloadEvent(TypeDispatched, true)
		e.Dispatched.Model = s
		if got, ok := appendFast([]byte("x"), e); ok || string(got) != "x" {
			t.Errorf("model %q: ok %v, dst %q", s, ok, got)
		}
		if b, err := Encode(e); err != nil || !json.Valid(b) {
			t.Errorf("model %q: Encode = %s, %v", s, b, err)
		}
	}
	for _, typ := range []Type{TypeConfigChanged, TypeSnapshot} {
		if _, ok := appendFast(nil, payloadEvent(typ, true)); ok {
			t.Errorf("%s: fast path took it", typ)
		}
	}
}

// FuzzFastEncodeMatchesJSON: any event encoding/json decodes and Validate
// accepts is written by Append exactly as json.Marshal writes it.
func FuzzFastEncodeMatchesJSON(f *testing.F) {
	for _, b := range fastSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var e Event
		if decodeJSON(b, &e) != nil {
			return
		}
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Encode(&e)
		if err != nil {
			t.Fatalf("%q: Encode: %v", b, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%q:\n got %s\nwant %s", b, got, want)
		}
	})
}
