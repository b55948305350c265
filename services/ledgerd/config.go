package ledgerd

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/schemas"
)

// PublishConfig appends a ConfigChanged event with the ledger document to
// every partition of sluice.requests, so every ledger partition switches to
// it at a known log position.
func PublishConfig(ctx context.Context, brokers []string, names bus.Names, ledgerJSON []byte, source string) error {
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
		ev := schemas.New(schemas.TypeConfigChanged, time.Now().UnixMilli())
		ev.ConfigChanged = &schemas.ConfigChanged{ConfigVersion: ver, Source: source, Ledger: ledgerJSON}
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
