package ledgerd

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/configsig"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// PublishConfig appends a ConfigChanged event with the ledger document to
// every partition of sluice.requests, so every ledger partition switches to
// it at a known log position.
func PublishConfig(ctx context.Context, brokers []string, names bus.Names, ledgerJSON []byte, source string) error {
	return PublishConfigChange(ctx, brokers, names, schemas.ConfigChanged{Ledger: ledgerJSON, Source: source})
}

// PublishConfigChange is PublishConfig with the whole audit record: cc's
// Source, Actor and Reason go with the ledger document into the history
// (`sluice config history`); ConfigVersion is set here, and the signature
// when this process holds the admin signing key (configsig.SignForWrite:
// a process that verifies signatures but holds no key gets
// configsig.ErrNotAdminWriter and writes nothing).
func PublishConfigChange(ctx context.Context, brokers []string, names bus.Names, cc schemas.ConfigChanged) error {
	names = names.OrDefault()
	pc, err := bus.NewClient(ctx, brokers, 10*time.Second, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer pc.Close()
	adm := kadm.NewClient(pc)
	td, err := adm.ListTopics(ctx, names.Requests)
	if err != nil {
		return fmt.Errorf("publish config: %w", err)
	}
	t, ok := td[names.Requests]
	if !ok || t.Err != nil {
		return fmt.Errorf("publish config: topic %s missing (run `sluice topics ensure`)", names.Requests)
	}
	ver := fmt.Sprintf("%x", time.Now().UnixNano())
	var recs []*kgo.Record
	for _, p := range t.Partitions.Numbers() {
		ev := eventid.New(schemas.TypeConfigChanged, time.Now().UnixMilli())
		c := cc
		c.ConfigVersion = ver
		if err := configsig.SignForWrite(&c); err != nil {
			return fmt.Errorf("publish config: %w", err)
		}
		ev.ConfigChanged = &c
		b, err := schemas.Encode(ev)
		if err != nil {
			return err
		}
		recs = append(recs, &kgo.Record{Topic: names.Requests, Partition: p, Value: b})
	}
	if err := pc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("publish config: %w", err)
	}
	return nil
}

// ConfigEntry is one ConfigChanged of the history, with the log position
// and time it took effect at.
type ConfigEntry struct {
	Offset    int64                 `json:"offset"`
	LogTimeMs int64                 `json:"log_time_ms"`
	Change    schemas.ConfigChanged `json:"change"`
	// Refused says why the ledger did not apply this change (no valid
	// admin signature, configauth.go; a signed change older than the one
	// in force, ledger.ErrConfigRollback), "" if it did.
	Refused string `json:"refused,omitempty"`
}

// ConfigHistory reads every ConfigChanged of partition p of
// sluice.requests (each change is published to every partition, so one
// holds the whole history its retention keeps), oldest first.
func ConfigHistory(ctx context.Context, brokers []string, names bus.Names, p int32) ([]ConfigEntry, error) {
	names = names.OrDefault()
	var out []ConfigEntry
	var ev schemas.Event
	var inForce uint64 // the signed sequence in force, as the ledger keeps it
	err := ReadPartition(ctx, brokers, names.Requests, p, kgo.NewOffset().AtStart(), -1, func(r *kgo.Record) error {
		// Every record is decoded as the ledger decodes it (decodeInput):
		// a byte filter such as `"type":"ConfigChanged"` missed a change
		// that the ledger applied because its JSON had a space in it.
		// A change the ledger refused (its signature) is listed too, with
		// why: an attempt to reconfigure the ledger belongs in its audit.
		if schemas.Decode(r.Value, &ev) != nil || ev.Type != schemas.TypeConfigChanged || ev.ConfigChanged == nil {
			return nil
		}
		e := ConfigEntry{Offset: r.Offset, LogTimeMs: r.Timestamp.UnixMilli(), Change: *ev.ConfigChanged}
		switch err := authInput(&ev); {
		case err != nil:
			e.Refused = err.Error()
		case e.Change.Seq != 0 && e.Change.Seq < inForce:
			e.Refused = fmt.Sprintf("%v: sequence %d, in force %d", ledger.ErrConfigRollback, e.Change.Seq, inForce)
		default:
			inForce = max(inForce, e.Change.Seq)
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("config history of %s partition %d: %w", names.Requests, p, err)
	}
	return out, nil
}
