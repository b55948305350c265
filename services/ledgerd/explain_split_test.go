package ledgerd

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// splitDoc is a ledger document with scope "hot" split over n partitions
// (n ≤ 1: not split).
func splitDoc(n int) []byte {
	return []byte(`{"scopes":[{"name":"hot","partitions":` + string(rune('0'+n)) +
		`,"buckets":[{"level":"tenant","id":"t","dimension":"requests_per_day","capacity":100}]}]}`)
}

// TestExplainScopesOfASplitScope: a provider scope is searched in
// itself and in the sub-scopes of every applied document of the history
// that splits it (the request may predate the split in force); a refused
// change splits nothing.
func TestExplainScopesOfASplitScope(t *testing.T) {
	hist := []ConfigEntry{
		{Change: schemas.ConfigChanged{Ledger: splitDoc(0)}},
		{Change: schemas.ConfigChanged{Ledger: splitDoc(2)}},
		{Change: schemas.ConfigChanged{Ledger: splitDoc(4)}, Refused: "no valid admin signature"},
		{Change: schemas.ConfigChanged{Ledger: splitDoc(3)}},
	}
	if got, want := ExplainScopes("hot", hist), []string{"hot", "hot#0", "hot#1", "hot#2"}; !slices.Equal(got, want) {
		t.Errorf("ExplainScopes(hot) = %v, want %v", got, want)
	}
	if got := ExplainScopes("cold", hist); !slices.Equal(got, []string{"cold"}) {
		t.Errorf("ExplainScopes(cold) = %v, want the scope alone", got)
	}
	if got := ExplainScopes("hot", nil); !slices.Equal(got, []string{"hot"}) {
		t.Errorf("without a history: %v", got)
	}
}

// TestExplainFindsARequestOfASplitScope: `sluice explain --scope hot`
// finds a request that the gateway sent to sub-scope hot#1, a record of
// another partition than hot's.
func TestExplainFindsARequestOfASplitScope(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k := testenv.Kfake(t, ctx, "explainsplit.", 4)
	if PartitionOf("hot#1", 4) == PartitionOf("hot", 4) {
		t.Fatal("hot#1 shares hot's partition: the test would prove nothing")
	}
	if err := PublishConfigChange(ctx, k.Brokers, k.Names, schemas.ConfigChanged{Source: "test", Ledger: splitDoc(2)}); err != nil {
		t.Fatal(err)
	}
	ev := eventid.New(schemas.TypeReserveRequested, time.Now().UnixMilli())
	ev.RequestID, ev.Attempt, ev.Node, ev.Scope, ev.Tenant, ev.KeyID, ev.Class = "r", 1, "gw", "hot#1", "t", "k", "interactive"
	ev.ReserveRequested = &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "tenant", ID: "t"}}, InputTokens: 1}
	v, err := schemas.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	// The gateways' partitioner puts hot#1 next to hot#0 (bus.ScopePartitioner);
	// the test's client hashes keys as Kafka does, so it is told the partition.
	pc, err := bus.NewClient(ctx, k.Brokers, 10*time.Second, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if err := pc.ProduceSync(ctx, &kgo.Record{Topic: k.Names.Requests, Partition: PartitionOf("hot#1", 4), Key: []byte("hot#1"), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	x, err := Explain(ctx, ExplainOptions{Brokers: k.Brokers, Topics: k.Names, RequestID: "r", Partition: -1, Scopes: []string{"hot"}})
	if err != nil {
		t.Fatal(err)
	}
	if x.Scope != "hot#1" || x.Partition != PartitionOf("hot#1", 4) || x.Outcome != string(schemas.StatusGranted) {
		t.Errorf("explanation in scope %q partition %d, outcome %q; want hot#1's partition %d, granted", x.Scope, x.Partition, x.Outcome, PartitionOf("hot#1", 4))
	}
}
