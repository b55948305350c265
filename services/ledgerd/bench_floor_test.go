package ledgerd

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestBenchFloorEcho: the floor's echo answers every reserve, sequential
// and open-loop, with a grant the gateway side accepts (an unanswered one
// would be an error after the answer timeout).
func TestBenchFloorEcho(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := KafkaBenchOptions{Brokers: c.ListenAddrs(), Rates: []int{200}, Duration: 300 * time.Millisecond, Progress: io.Discard}
	f, err := benchFloor(ctx, o, 50)
	if err != nil {
		t.Fatal(err)
	}
	if f.Sequential.Requests != 50 || f.Sequential.Errors != 0 {
		t.Fatalf("sequential: %+v, want 50 requests and no errors", f.Sequential)
	}
	if len(f.RoundTrips) != 1 || f.RoundTrips[0].Requests == 0 || f.RoundTrips[0].Errors != 0 {
		t.Fatalf("open loop: %+v, want requests and no errors", f.RoundTrips)
	}
}
