package ledgerd

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// TestDecodeInput: a good record decodes as itself; garbage becomes the
// no-op Tick that every apply path (live, catch-up, replay) uses alike.
func TestDecodeInput(t *testing.T) {
	good, err := schemas.Encode(&schemas.Event{V: 1, Type: schemas.TypeTick, ID: "t1", Node: "n", Tick: &schemas.Tick{Reason: "wake"}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		in      []byte
		wantErr bool
		wantID  string
	}{
		{"good", good, false, "t1"},
		{"garbage", []byte("{not json"), true, "invalid"},
		{"wrong payload", []byte(`{"v":1,"type":"Tick","id":"x","outcome":{}}`), true, "invalid"},
	}
	for _, c := range cases {
		var ev schemas.Event
		err := decodeInput(c.in, &ev)
		if (err != nil) != c.wantErr || ev.ID != c.wantID || ev.Type != schemas.TypeTick || ev.Tick == nil {
			t.Errorf("%s: err=%v event=%+v", c.name, err, ev)
		}
	}
}
