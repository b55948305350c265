package layout

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/purity"
)

const module = "github.com/sluice-dev/sluice/"

// kind says what a room is for. Product code runs in a deployment;
// harness code (simulators, load tests, benches, test helpers, the
// calibration loop) exists to exercise it and must not be imported by it.
type kind int

const (
	product kind = iota
	harness
	binary // services/sluice: the one binary, a subcommand per service and tool
)

func (k kind) String() string { return [...]string{"product", "harness", "binary"}[k] }

// room is one entry of the floor plan: the packages under prefix.
type room struct {
	prefix string
	floor  int
	kind   kind
}

// plan is the house from the ground up. A package belongs to the room of
// the longest prefix that holds it. Imports run down the floors; product
// rooms on one floor are peers and do not import each other (the services
// are peers: the dev stack above them assembles them), while a harness room
// may use the products of its own floor (synth feeds analytics). The
// harness that drives the whole house (the pipeline simulation, the
// calibration loop) lives under services/loadtest, at the top.
var plan = []room{
	{"schemas", 0, product},
	{"internal", 1, product},
	{"internal/purity", 1, harness},
	{"internal/testenv", 1, harness},
	{"internal/layout", 1, harness},
	{"ledger", 2, product},
	{"admission", 3, product},
	{"analytics", 4, product},
	{"analytics/synth", 4, harness},
	{"analytics/analyticstest", 4, harness},
	{"dashboards", 5, product},
	{"services/admin", 6, product},
	{"services/gateway", 6, product},
	{"services/ledgerd", 6, product},
	{"services/sim", 6, harness},
	{"services/dev", 7, harness},
	{"services/gateway/gatewaybench", 7, harness},
	{"services/loadtest", 8, harness},
	{"sdktest", 8, harness},
	{"deploy", 8, harness},
	{"services/sluice", 9, binary},
}

// allowed are the arrows that break the plan today, each with why it is
// there. The list only shrinks: a new breach fails the test, and so does an
// entry here that no longer happens (delete it).
var allowed = map[string]string{}

func roomOf(pkg string) (room, bool) {
	rel := strings.TrimPrefix(pkg, module)
	best, ok := room{}, false
	for _, r := range plan {
		if (rel == r.prefix || strings.HasPrefix(rel, r.prefix+"/")) && len(r.prefix) >= len(best.prefix) {
			best, ok = r, true
		}
	}
	return best, ok
}

// breach says what is wrong with an import from a to b, or "".
func breach(a, b room) string {
	switch {
	case a.prefix == b.prefix || a.kind == binary:
		return ""
	case b.floor > a.floor:
		return fmt.Sprintf("runs up from floor %d to %d", a.floor, b.floor)
	case a.kind == product && b.kind == harness:
		return "product imports harness"
	case b.floor == a.floor && a.kind == product:
		return fmt.Sprintf("between peers on floor %d", a.floor)
	}
	return ""
}

// arrows returns every breach of the plan among the module's packages
// (non-test imports only), as "from → to" with what is wrong.
func arrows(t *testing.T) map[string]string {
	t.Helper()
	pkgs, err := purity.List("../..", "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 25 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	out := map[string]string{}
	for _, p := range pkgs {
		a, ok := roomOf(p.ImportPath)
		if !ok {
			t.Errorf("%s stands in no room of the plan", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			b, ok := roomOf(imp)
			if !ok {
				continue // reported as an importer
			}
			if why := breach(a, b); why != "" {
				out[strings.TrimPrefix(p.ImportPath, module)+" → "+strings.TrimPrefix(imp, module)] = why
			}
		}
	}
	return out
}

// TestImportsFollowTheFloors: no import runs up the floors or across to a
// peer, and no product package imports a harness package, but for the
// allowlisted arrows, which must all still happen.
func TestImportsFollowTheFloors(t *testing.T) {
	got := arrows(t)
	for _, a := range slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	}) {
		if _, ok := allowed[a]; !ok {
			t.Errorf("%s: %s (see the README's floor plan)", a, got[a])
		}
	}
	for a := range allowed {
		if _, ok := got[a]; !ok {
			t.Errorf("%s no longer happens: delete it from the allowlist", a)
		}
	}
}

// TestPlanBreaches checks the rules themselves on made-up rooms.
func TestPlanBreaches(t *testing.T) {
	low, high := room{"low", 1, product}, room{"high", 2, product}
	peer, tool := room{"peer", 2, product}, room{"tool", 1, harness}
	bin := room{"bin", 9, binary}
	for _, c := range []struct {
		a, b room
		bad  bool
	}{
		{high, low, false},
		{low, high, true},
		{high, peer, true},
		{high, tool, true},
		{tool, low, false},
		{bin, tool, false},
		{low, low, false},
	} {
		if got := breach(c.a, c.b) != ""; got != c.bad {
			t.Errorf("%s → %s: breach %v, want %v", c.a.prefix, c.b.prefix, got, c.bad)
		}
	}
}
