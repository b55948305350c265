package ledgerd

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// spaced re-serialises an encoded event with a space after every key, as
// another JSON writer might: the same event to any decoder, and to the
// ledger, but no longer the bytes `"type":"ConfigChanged"`.
func spaced(t *testing.T, ev *schemas.Event) []byte {
	t.Helper()
	b, err := schemas.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	out := bytes.ReplaceAll(b, []byte(`":`), []byte(`": `))
	var back schemas.Event
	if err := schemas.Decode(out, &back); err != nil || back.Type != ev.Type || back.RequestID != ev.RequestID {
		t.Fatalf("spaced event does not decode as the original: %v %+v", err, back)
	}
	return out
}

// TestHistoryAndExplainDecodeEvents (D6): a ConfigChanged and a reserve
// serialised with a space after each key are what the ledger applies, so
// `sluice config history` lists the change and `sluice explain` finds the
// request. Both used to filter on exact bytes and missed them.
func TestHistoryAndExplainDecodeEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rig := newKfakeRig(t, ctx, "historytest.", 1, benchLedgerConfig, kgo.RecordPartitioner(kgo.ManualPartitioner()))

	cc := eventid.New(schemas.TypeConfigChanged, time.Now().UnixMilli())
	cc.ConfigChanged = &schemas.ConfigChanged{ConfigVersion: "spaced-1", Source: "test", Actor: "other-writer", Ledger: []byte(benchLedgerConfig)}
	reserve := benchReserve("spaced-request-1")
	var recs []*kgo.Record
	for _, b := range [][]byte{spaced(t, cc), spaced(t, reserve)} {
		recs = append(recs, &kgo.Record{Topic: rig.names.Requests, Partition: 0, Value: b})
	}
	if err := rig.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	h, err := ConfigHistory(ctx, rig.brokers, rig.names, 0)
	if err != nil {
		t.Fatal(err)
	}
	var versions []string
	for _, e := range h {
		versions = append(versions, e.Change.ConfigVersion)
	}
	if len(h) != 2 || h[1].Change.ConfigVersion != "spaced-1" || h[1].Change.Actor != "other-writer" {
		t.Fatalf("history versions %v: want the published one, then spaced-1", versions)
	}

	x, err := Explain(ctx, ExplainOptions{Brokers: rig.brokers, Topics: rig.names, RequestID: reserve.RequestID, Partition: 0})
	if err != nil {
		t.Fatalf("explain of the spaced request: %v", err)
	}
	decided := 0
	for _, s := range x.Steps {
		decided += len(s.Decisions)
	}
	if decided == 0 {
		t.Fatalf("explain of the spaced request has no decision: %+v", x.Steps)
	}
}
