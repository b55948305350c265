package ledgerd

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-dev/sluice/schemas"
)

// explainScenario: on a recorded run, the explanation of every denied
// request (and of some granted ones) names the limiting bucket its
// recorded decision names, found by scope, by partition or by search.
func explainScenario(t *testing.T, brokers []string, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run := recordRun(t, ctx, brokers, prefix)
	checked := map[schemas.Status]int{}
	for id, ev := range run.last {
		d := ev.Decision
		if checked[d.Status] >= 2 {
			continue
		}
		o := ExplainOptions{Brokers: brokers, Topics: run.names, RequestID: id, Partition: -1}
		switch checked[d.Status] {
		case 0:
			o.Scopes = []string{ev.Scope}
		case 1:
			o.Partition = d.InputPartition
		}
		x, err := Explain(ctx, o)
		if err != nil {
			t.Fatalf("explain %s: %v", id, err)
		}
		var lastD *schemas.Decision
		for i := range x.Steps {
			for j := range x.Steps[i].Decisions {
				lastD = &x.Steps[i].Decisions[j]
			}
		}
		if lastD == nil || *lastD != *d || x.Partition != d.InputPartition || x.Tenant != ev.Tenant {
			t.Fatalf("explain %s (partition %d): last decision %+v, recorded %+v", id, x.Partition, lastD, d)
		}
		if d.LimitPath != "" && (x.LimitPath != d.LimitPath || x.LimitDimension != d.LimitDimension) {
			t.Fatalf("explain %s: limited by %q %s, recorded %q %s", id, x.LimitPath, x.LimitDimension, d.LimitPath, d.LimitDimension)
		}
		if d.LimitPath != "" {
			found := false
			for _, s := range x.Steps {
				for _, b := range s.Buckets {
					found = found || (b.Limiting && b.Dimension == d.LimitDimension)
				}
			}
			if !found {
				t.Fatalf("explain %s: no bucket marked limiting: %+v", id, x.Steps)
			}
		}
		checked[d.Status]++
	}
	if checked[schemas.StatusDenied]+checked[schemas.StatusExpired] == 0 || checked[schemas.StatusGranted] == 0 {
		t.Fatalf("explained %v: need grants and refusals", checked)
	}
	if _, err := Explain(ctx, ExplainOptions{Brokers: brokers, Topics: run.names, RequestID: "no-such-request", Partition: -1}); err == nil {
		t.Fatal("explain of an unknown request succeeded")
	}
}

func TestExplainKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	explainScenario(t, c.ListenAddrs(), "explaintest.")
}
