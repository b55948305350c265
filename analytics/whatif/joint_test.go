package whatif

import (
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// jointConfig is one tenant budget of limit requests over two scopes whose
// buckets are far above the traffic: only the budget limits.
func jointConfig(limit int64) []byte {
	return fmt.Appendf(nil, `{"scopes":[
 {"name":"openai:acme","buckets":[{"level":"tenant","id":"*","dimension":"requests","capacity":100000,"period_ms":60000}]},
 {"name":"anthropic:acme","buckets":[{"level":"tenant","id":"*","dimension":"requests","capacity":100000,"period_ms":60000}]}],
 "budget":{"budgets":[{"id":"acme-daily","level":"tenant","subject":"acme","unit":"requests","limit":%d,"window":"day"}]}}`, limit)
}

// TestJointBudgetLimit replays a log with no recorded lease messages (as
// if recorded with no budget) under budgets of several limits: the joint
// replay's own lease machine grants exactly the limit when demand exceeds
// it, spread over both scopes as their demand moves, and the budget's
// effect reports it.
func TestJointBudgetLimit(t *testing.T) {
	parts := map[string]int32{"acme-daily": 3, "openai:acme": 1, "anthropic:acme": 2}
	route := func(k string) int32 { return parts[k] }
	const t0 = int64(1_700_000_000_000)
	tests := []struct {
		limit, wantGrants int64
		n                 int
		gap               int64
	}{{10, 10, 60, 100}, {40, 40, 60, 100}, {200, 60, 60, 100}, {80, 80, 600, 33}, {200, 200, 600, 33}}
	for _, tc := range tests {
		n, gap := tc.n, tc.gap
		j, err := NewJoint([]int32{0, 1, 2, 3}, Options{Ledger: jointConfig(tc.limit)}, route)
		if err != nil {
			t.Fatal(err)
		}
		next := map[int32]int64{}
		in := func(p int32, ms int64, ev *schemas.Event) {
			j.Input(p, next[p], ms, ev)
			next[p]++
		}
		for p := int32(0); p < 4; p++ {
			in(p, t0, &schemas.Event{V: 1, Type: schemas.TypeConfigChanged, ID: "cfg", ConfigChanged: &schemas.ConfigChanged{ConfigVersion: "v1", Ledger: jointConfig(1)}})
		}
		for i := range n {
			scope := "openai:acme"
			if i >= n/2 {
				scope = "anthropic:acme"
			}
			ms := t0 + 1000 + int64(i)*gap
			ev := &schemas.Event{V: 1, Type: schemas.TypeReserveRequested, ID: fmt.Sprintf("e%d", i), RequestID: fmt.Sprintf("r%d", i), Attempt: 1,
				Node: "gw", Scope: scope, Tenant: "acme", KeyID: "k", Class: "interactive",
				ReserveRequested: &schemas.ReserveRequested{Path: []schemas.PathLevel{{Level: "tenant", ID: "acme"}, {Level: "key", ID: "k"}},
					InputTokens: 10, OutputTokens: 10, MaxWaitMs: 5000}}
			in(parts[scope], ms, ev)
		}
		for p := int32(0); p < 4; p++ { // the queue's deadlines pass
			in(p, t0+60_000, &schemas.Event{V: 1, Type: schemas.TypeTick, ID: fmt.Sprintf("t%d", p), Tick: &schemas.Tick{Reason: "test"}})
		}
		var grants int64
		for p := int32(0); p < 4; p++ {
			grants += j.Partition(p).WhatIf.Grants
		}
		bs, err := j.Budgets(jointConfig(tc.limit))
		if err != nil || len(bs) != 1 {
			t.Fatalf("limit %d: budgets %+v, %v", tc.limit, bs, err)
		}
		t.Logf("limit %d: grants %d, %+v", tc.limit, grants, bs[0])
		if grants != tc.wantGrants || bs[0].WhatIfSpent != tc.wantGrants {
			t.Errorf("limit %d: granted %d, spent %d, want %d", tc.limit, grants, bs[0].WhatIfSpent, tc.wantGrants)
		}
	}
}
