package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/services/gateway"
)

// TestPrintUsageOfASplitScope: `sluice usage` shows a split scope's rows
// under the scope, saying how many sub-scopes a row sums, or which one
// holds the key's bucket.
func TestPrintUsageOfASplitScope(t *testing.T) {
	left, used := int64(2999), int64(1)
	u := &gateway.Usage{Tenant: "t", KeyID: "k", Limits: []gateway.UsageLimit{
		{Scope: "s", Level: "tenant", ID: "t", Capacity: 3000, Max: 3000, Unit: "requests/day", Remaining: &left, Used: &used,
			SubScopes: []gateway.UsageSubScope{{Scope: "s#0"}, {Scope: "s#1"}, {Scope: "s#2"}}},
		{Scope: "s", Level: "key", ID: "k", Capacity: 600, Max: 10, Unit: "requests/min", Remaining: &left, Used: &used,
			SubScopes: []gateway.UsageSubScope{{Scope: "s#1"}}},
		{Scope: "plain", Level: "key", ID: "k", Capacity: 5, Max: 5, Unit: "requests in flight"},
	}}
	var out bytes.Buffer
	printUsage(&out, u)
	for _, want := range []string{"s (3 sub-scopes)  tenant:t", "s (s#1)", "plain  ", "sub-scopes: the scope is split"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}
