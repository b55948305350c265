package ledgerd

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
)

// encodeOutputs are decisions of the shapes the loop produces.
func encodeOutputs() []ledger.Output {
	base := ledger.Output{RequestID: "req-1", Attempt: 1, Node: "gw-1", Scope: "openai:org/proj", Tenant: "acme",
		KeyID: "key-1", Route: "gpt-4o", Class: "interactive", Index: 0}
	granted := base
	granted.Decision = schemas.Decision{Status: schemas.StatusGranted, GatewayDecision: schemas.GDAdmitted, HoldTTLMs: 30000,
		InputPartition: 3, InputOffset: 12345, LogTimeMs: 1_700_000_000_000}
	denied := base
	denied.Index = 1
	denied.Decision = schemas.Decision{Status: schemas.StatusDenied, Reason: schemas.ReasonQuotaExhausted, GatewayDecision: schemas.GDRejectedPolicy,
		RetryClass: schemas.RetryPolicy, LimitPath: "scope:openai:org/proj/tenant:acme", LimitDimension: schemas.DimInputTokens,
		Needed: 1200, Available: 3, RetryAfterMs: 1500, InputPartition: 3, InputOffset: 12346, LogTimeMs: 1_700_000_000_001}
	queued := base
	queued.Decision = schemas.Decision{Status: schemas.StatusQueued, Reason: schemas.ReasonCapacity, GatewayDecision: schemas.GDQueued,
		RetryClass: schemas.RetryCapacity, InputPartition: 0, InputOffset: 7, LogTimeMs: 5}
	return []ledger.Output{granted, denied, queued}
}

// TestDecisionEncoderMatchesEncode: the loop's encoder writes every
// decision byte for byte as schemas.Encode(o.Event()) does (replay checks
// the decisions on the log against that), and a value once returned is
// never overwritten by later ones, across slabs.
func TestDecisionEncoderMatchesEncode(t *testing.T) {
	var e decisionEncoder
	type kept struct {
		got, want []byte
		key       []byte
		scope     string
	}
	var all []kept
	outs := encodeOutputs()
	for i := range 2000 { // several slabs
		o := outs[i%len(outs)]
		o.Decision.InputOffset += int64(i)
		o.RequestID = "req-" + strconv.Itoa(i)
		o.Scope = "scope-" + strconv.Itoa(i)
		want, err := schemas.Encode(o.Event())
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.encode(&o)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, kept{got, want, e.key(o.Scope), o.Scope})
	}
	for i, k := range all {
		if !bytes.Equal(k.got, k.want) {
			t.Fatalf("decision %d:\n got %s\nwant %s", i, k.got, k.want)
		}
		if string(k.key) != k.scope {
			t.Fatalf("decision %d: key %q, want %q", i, k.key, k.scope)
		}
	}
}

// TestDecisionEncodeAllocs: a decision costs at most its id string (the
// slab's share rounds to zero), where Encode(o.Event()) cost four; its
// record key comes out of the slab too.
func TestDecisionEncodeAllocs(t *testing.T) {
	var e decisionEncoder
	o := encodeOutputs()[1]
	c := decisionCounters{vec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "d"}, []string{"status", "dimension"})}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := e.encode(&o); err != nil {
			t.Fatal(err)
		}
		_ = e.key(o.Scope)
		c.inc(&o.Decision)
	})
	if allocs > 1.1 {
		t.Fatalf("%.2f allocations per decision, want ≤ 1 (the id)", allocs)
	}
}

func BenchmarkDecisionEncode(b *testing.B) {
	o := encodeOutputs()[1]
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "d"}, []string{"status", "dimension"})
	b.Run("before", func(b *testing.B) { // the loop as it was: Encode(o.Event()) and WithLabelValues
		b.ReportAllocs()
		for b.Loop() {
			if _, err := schemas.Encode(o.Event()); err != nil {
				b.Fatal(err)
			}
			vec.WithLabelValues(string(o.Decision.Status), string(o.Decision.LimitDimension)).Inc()
		}
	})
	b.Run("encoder", func(b *testing.B) {
		var e decisionEncoder
		c := decisionCounters{vec: vec}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.encode(&o); err != nil {
				b.Fatal(err)
			}
			c.inc(&o.Decision)
		}
	})
}

// BenchmarkDecisionBatchSnappy is what snappy (franz-go's default
// compression, s2.EncodeSnappy) would cost the ledger per decision, and
// the gateway to undo, at the batch sizes an unlingered decision producer
// makes: 1 record at an idle partition, a few at 1,000 req/s, tens in a
// backlog. docs/ledger-service.md (Client settings) quotes it.
func BenchmarkDecisionBatchSnappy(b *testing.B) {
	outs := encodeOutputs()
	for _, k := range []int{1, 4, 32} {
		var batch []byte
		for i := range k {
			o := outs[i%len(outs)]
			o.RequestID = "req-" + strconv.Itoa(1000+i)
			o.Decision.InputOffset += int64(i)
			v, err := schemas.Encode(o.Event())
			if err != nil {
				b.Fatal(err)
			}
			batch = append(batch, v...)
		}
		b.Run(strconv.Itoa(k)+"_records", func(b *testing.B) {
			dst := make([]byte, s2.MaxEncodedLen(len(batch)))
			back := make([]byte, len(batch))
			var n int
			b.ReportAllocs()
			for b.Loop() {
				c := s2.EncodeSnappy(dst, batch)
				n = len(c)
				if _, err := s2.Decode(back, c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(k), "ns/decision")
			b.ReportMetric(float64(len(batch)-n)/float64(k), "bytes_saved/decision")
			b.ReportMetric(float64(len(batch))/float64(k), "bytes/decision")
		})
	}
}
