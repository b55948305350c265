package ledger

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestResIndexCollisions drives the reservation index with few distinct
// hashes, so that probe runs are long and wrap around, and checks after
// every put and delete that each live key is found at its index and no
// deleted key is (backward-shift deletion must keep every run intact).
func TestResIndexCollisions(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x resIndex
	var rs []res
	live := map[int32]bool{}
	var order []int32 // live indexes, for a reproducible choice
	check := func(step int) {
		t.Helper()
		n := 0
		for i := range rs {
			r := &rs[i]
			got, ok := x.get(rs, uint32(len(r.RequestID)%5)*0x9e3779b1, r.RequestID, r.Attempt)
			if live[int32(i)] {
				n++
				if !ok || got != int32(i) {
					t.Fatalf("step %d: %s/%d: got %d %v, want %d", step, r.RequestID, r.Attempt, got, ok, i)
				}
			} else if ok {
				t.Fatalf("step %d: deleted %s/%d still found at %d", step, r.RequestID, r.Attempt, got)
			}
		}
		if n != x.n {
			t.Fatalf("step %d: index counts %d, live %d", step, x.n, n)
		}
	}
	h := func(r *res) uint32 { return uint32(len(r.RequestID)%5) * 0x9e3779b1 } // 5 hashes only
	for step := range 3000 {
		if rng.IntN(3) > 0 || len(live) == 0 {
			rs = append(rs, res{RequestID: "r" + strconv.Itoa(rng.IntN(1000000)), Attempt: int32(len(rs))})
			ri := int32(len(rs) - 1)
			x.put(h(&rs[ri]), ri)
			live[ri] = true
			order = append(order, ri)
		} else {
			j := rng.IntN(len(order))
			ri := order[j]
			order = append(order[:j], order[j+1:]...)
			x.del(h(&rs[ri]), ri)
			delete(live, ri)
		}
		if step%50 == 0 {
			check(step)
		}
	}
	check(-1)
}
