package loadtest

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestEmbeddedSteadySmoke runs the steady scenario for 2 s on a whole
// in-process stack (kfake, simulator, ledger, gateway) and checks that
// requests were served. No timing assertions.
func TestEmbeddedSteadySmoke(t *testing.T) {
	sc, err := LoadScenario("steady", "../../deploy/scenarios")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Execute(ctx, sc, Options{Embedded: true, Duration: 2 * time.Second, Retries: -1, Drain: 10 * time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Requests == 0 || rep.Totals.Outcomes.Success == 0 {
		t.Fatalf("nothing served: %+v", rep.Totals)
	}
	if rep.Simulator == nil || rep.Simulator.OK == 0 {
		t.Fatalf("the simulator served nothing: %+v", rep.Simulator)
	}
	if rep.Mode != "embedded" || rep.Conditions.SluiceQuota == nil {
		t.Errorf("conditions: %+v", rep.Conditions)
	}
}

// TestEmbeddedHandwrittenConfigSmoke runs noisy-neighbor-handwritten for
// 2 s through the shipped quick-start config (--config) and checks that the
// hand-written config served requests and is named in the report.
func TestEmbeddedHandwrittenConfigSmoke(t *testing.T) {
	sc, err := LoadScenario("noisy-neighbor-handwritten", "../../deploy/scenarios")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const file = "../../deploy/examples/dev-three-tenants.yaml"
	rep, err := Execute(ctx, sc, Options{Embedded: true, ConfigFile: file, Duration: 2 * time.Second, Retries: -1, Drain: 10 * time.Second}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Simulator == nil || rep.Simulator.OK == 0 {
		t.Fatalf("the simulator served nothing: %+v", rep.Simulator)
	}
	if rep.Conditions.GatewayConfig != file || rep.Conditions.SluiceQuota != nil || rep.Wasted.Source != "simulator" {
		t.Errorf("conditions: gateway_config %q, sluice_quota %+v, wasted %+v", rep.Conditions.GatewayConfig, rep.Conditions.SluiceQuota, rep.Wasted)
	}
}
