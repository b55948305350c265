package ledger

import (
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

func TestSmoke(t *testing.T) {
	cfg := DefaultDevConfig()
	l := New(3, cfg)
	ev := reserve("r1")
	ev.Scope = "sim-openai"
	out := l.Apply(1000, 0, ev, nil)
	if len(out) != 1 || out[0].Decision.Status != schemas.StatusGranted {
		t.Fatalf("%+v", out)
	}
	e := out[0].Event()
	if e.ID != "d-3-0-0" || e.ProducedAtMs != 1000 {
		t.Fatalf("%+v", e)
	}
	if _, err := schemas.Encode(e); err != nil {
		t.Fatal(err)
	}
}
