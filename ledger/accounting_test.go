package ledger

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/schemas"
)

// Step tables of the accounting modes: how a bucket counts the way its
// provider does (max_tokens on arrival, output when produced, cached input
// not counted).

func maxOut(n int64) reqOpt {
	return func(ev *schemas.Event) { ev.ReserveRequested.MaxOutputTokens = n }
}

func cachedIn(n int64) reqOpt {
	return func(ev *schemas.Event) { ev.ReserveRequested.CachedInputTokens = n }
}

// level checks the available units of the scope node's bucket of dimension d.
func level(d schemas.Dimension, want int64) func(*testing.T, *Ledger, []Output) {
	return func(t *testing.T, l *Ledger, _ []Output) {
		t.Helper()
		n := &l.st.Nodes[l.nodeIdx[nodeKey{0, 0, "s"}]]
		di, _ := dimIndex(d)
		for bi := n.First; bi < n.First+n.N; bi++ {
			b := &l.st.Buckets[bi]
			if sp := &l.cc.specs[b.Spec]; int(sp.dim) == di {
				if got := l.available(b, sp); got != want {
					t.Fatalf("%s available %d, want %d", d, got, want)
				}
				return
			}
		}
		t.Fatalf("no %s bucket", d)
	}
}

// tpm is a total-tokens scope bucket with a whole-minute window, so that
// nothing refills within a step table's few milliseconds.
func tpm(perMin int64, accounting Accounting) BucketConfig {
	return BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimTotalTokens, Capacity: perMin,
		PeriodMs: 60_000, WindowMs: 60_000, Accounting: accounting}
}

func TestAccountingMaxTokensOnArrival(t *testing.T) {
	// OpenAI counts prompt + max_tokens when the request arrives and keeps
	// it: the ledger charges 100 + 4000 and refunds nothing at reconcile.
	cfg := testConfig(tpm(10_000, AccountingMaxTokensOnArrival))
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", tokens(100, 500), maxOut(4000)), Want: []string{"a/1 granted admitted"}, Check: level(schemas.DimTotalTokens, 5900)},
		// Actual 100 + 50: the 3950 unused output stays consumed.
		{At: 1, Ev: reconcile("a", 100, 50), Check: level(schemas.DimTotalTokens, 5900)},
		{At: 1, Ev: reserve("b", tokens(100, 500), maxOut(4000)), Want: []string{"b/1 granted admitted"}, Check: level(schemas.DimTotalTokens, 1800)},
		// What the provider has counted leaves no room for a third: it waits
		// for refill (which a whole-minute window makes slow), and expires.
		{At: 1, Ev: reserve("c", tokens(100, 500), maxOut(4000), maxWait(1)), Want: []string{"c/1 denied wait_exceeds_max rejected_locally"}},
		// Overage above the arrival charge is still debt.
		{At: 2, Ev: reconcile("b", 900, 4000), Check: level(schemas.DimTotalTokens, 1000)},
	})
}

func TestAccountingArrivalRefundsWhatWasNeverSent(t *testing.T) {
	cfg := testConfig(tpm(10_000, AccountingMaxTokensOnArrival))
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", tokens(100, 500), maxOut(4000)), Want: []string{"a/1 granted admitted"}, Check: level(schemas.DimTotalTokens, 5900)},
		// The provider refused it: it did not count it, the charge returns.
		{At: 1, Ev: rejected("a", 1, schemas.KindRequestError, 0), Check: level(schemas.DimTotalTokens, 10_000)},
		{At: 2, Ev: reserve("b", tokens(100, 500), maxOut(4000)), Want: []string{"b/1 granted admitted"}},
		// Released without usage: never dispatched, the charge returns.
		{At: 3, Ev: releaseEv("b"), Check: level(schemas.DimTotalTokens, 10_000)},
		{At: 4, Ev: reserve("c", tokens(100, 500), maxOut(4000)), Want: []string{"c/1 granted admitted"}},
		// Released with partial usage (a stream the client left): sent and
		// counted, the charge stays.
		{At: 5, Ev: func() *schemas.Event {
			ev := releaseEv("c")
			ev.Released.OutputTokens = 10
			return ev
		}(), Check: level(schemas.DimTotalTokens, 5900)},
	})
}

func TestAccountingArrivalOnOutputBucket(t *testing.T) {
	// An output bucket counting max_tokens on arrival; the input bucket of
	// the same scope reconciles as usual. Without MaxOutputTokens the
	// output estimate is charged.
	cfg := testConfig(
		BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimOutputTokens, Capacity: 10_000, PeriodMs: 60_000, WindowMs: 60_000, Accounting: AccountingMaxTokensOnArrival},
		BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimInputTokens, Capacity: 10_000, PeriodMs: 60_000, WindowMs: 60_000},
	)
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", tokens(1000, 500), maxOut(2000)), Want: []string{"a/1 granted admitted"}, Check: level(schemas.DimOutputTokens, 8000)},
		{At: 1, Ev: reconcile("a", 400, 100), Check: func(t *testing.T, l *Ledger, o []Output) {
			level(schemas.DimOutputTokens, 8000)(t, l, o)
			level(schemas.DimInputTokens, 9600)(t, l, o)
		}},
		// No max output given: the estimate is what the provider counts.
		{At: 2, Ev: reserve("b", tokens(0, 500)), Want: []string{"b/1 granted admitted"}, Check: level(schemas.DimOutputTokens, 7500)},
		{At: 3, Ev: reconcile("b", 0, 20), Check: level(schemas.DimOutputTokens, 7500)},
		// A max output below the estimate never charges less than the estimate.
		{At: 4, Ev: reserve("c", tokens(0, 500), maxOut(100)), Want: []string{"c/1 granted admitted"}, Check: level(schemas.DimOutputTokens, 7000)},
	})
}

func TestAccountingOutputWhenProduced(t *testing.T) {
	// Anthropic OTPM: the estimate is held while the request runs, the
	// actual output is what is charged. MaxOutputTokens plays no part.
	cfg := testConfig(BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimOutputTokens, Capacity: 10_000,
		PeriodMs: 60_000, WindowMs: 60_000, Accounting: AccountingOutputWhenProduced})
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", tokens(100, 500), maxOut(4000)), Want: []string{"a/1 granted admitted"}, Check: level(schemas.DimOutputTokens, 9500)},
		{At: 1, Ev: reconcile("a", 100, 50), Check: level(schemas.DimOutputTokens, 9950)},
		{At: 2, Ev: reserve("b", tokens(100, 500)), Want: []string{"b/1 granted admitted"}},
		{At: 3, Ev: reconcile("b", 100, 800), Check: level(schemas.DimOutputTokens, 9150)},
	})
}

func TestAccountingCachedInputNotCounted(t *testing.T) {
	// Anthropic ITPM: cache reads count neither in the estimate nor in the
	// actual.
	cfg := testConfig(BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimInputTokens, Capacity: 10_000,
		PeriodMs: 60_000, WindowMs: 60_000, ExcludeCachedInput: true})
	withCache := func(id string, in, cached, out int64) *schemas.Event {
		ev := reconcile(id, in, out)
		ev.Reconciled.CachedInputTokens = cached
		return ev
	}
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", tokens(3000, 10), cachedIn(2000)), Want: []string{"a/1 granted admitted"}, Check: level(schemas.DimInputTokens, 9000)},
		// Actual 3500 of which 3000 cached: 500 counted.
		{At: 1, Ev: withCache("a", 3500, 3000, 10), Check: level(schemas.DimInputTokens, 9500)},
		// Estimated 2000 cached but none read: all 3000 are counted.
		{At: 2, Ev: reserve("b", tokens(3000, 10), cachedIn(2000)), Want: []string{"b/1 granted admitted"}, Check: level(schemas.DimInputTokens, 8500)},
		{At: 3, Ev: withCache("b", 3000, 0, 10), Check: level(schemas.DimInputTokens, 6500)},
	})
}

func TestAccountingConfigProblems(t *testing.T) {
	c := testConfig(
		BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimInputTokens, Capacity: 60_000, Accounting: AccountingMaxTokensOnArrival},
		BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimOutputTokens, Capacity: 60_000, Accounting: "on_tuesdays"},
		BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimRequests, Capacity: 60_000, ExcludeCachedInput: true},
		BucketConfig{Level: "scope", ID: "*", Dimension: schemas.DimTotalTokens, Capacity: 60_000, Accounting: AccountingOutputWhenProduced, ExcludeCachedInput: true},
	)
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`scopes[0].buckets[0].accounting: "max_tokens_on_arrival" counts output tokens: only for output_tokens or total_tokens buckets, not input_tokens`,
		`scopes[0].buckets[1].accounting: unknown accounting "on_tuesdays"`,
		`scopes[0].buckets[2].exclude_cached_input: only for input_tokens or total_tokens buckets, not requests`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "buckets[3]") {
		t.Errorf("bucket 3 is valid: %v", err)
	}
}

// TestAccountingAbandonedInFlightKept: an attempt released because its
// client went away (or its deadline passed) during the upstream call was
// counted by the provider on arrival, so a max_tokens_on_arrival bucket
// keeps its charge; one released for another reason (the gateway never
// sent it) gets it back.
func TestAccountingAbandonedInFlightKept(t *testing.T) {
	cfg := testConfig(tpm(10_000, AccountingMaxTokensOnArrival))
	rel := func(id string, reason schemas.Reason) *schemas.Event {
		ev := releaseEv(id)
		ev.Released.Reason = reason
		return ev
	}
	runSteps(t, cfg, []step{
		{At: 0, Ev: reserve("a", tokens(100, 500), maxOut(1000)), Want: []string{"a/1 granted admitted"}, Check: level(schemas.DimTotalTokens, 8900)},
		{At: 1, Ev: rel("a", schemas.ReasonClientDisconnect), Check: level(schemas.DimTotalTokens, 8900)},
		{At: 2, Ev: reserve("b", tokens(100, 500), maxOut(1000)), Want: []string{"b/1 granted admitted"}, Check: level(schemas.DimTotalTokens, 7800)},
		{At: 3, Ev: rel("b", schemas.ReasonDeadline), Check: level(schemas.DimTotalTokens, 7800)},
		{At: 4, Ev: reserve("c", tokens(100, 500), maxOut(1000)), Want: []string{"c/1 granted admitted"}, Check: level(schemas.DimTotalTokens, 6700)},
		{At: 5, Ev: rel("c", schemas.ReasonError), Check: level(schemas.DimTotalTokens, 7800)},
	})
}
