package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files (only when adding new fields or types)")

// goldenEvents holds one fully populated event per type. The golden file
// testdata/v1.jsonl is their encoding when the field meanings were fixed; a
// test fails when a field is renamed, retyped or reinterpreted.
func goldenEvents() []Event {
	env := func(t Type) Event {
		return Event{V: 1, Type: t, ID: "0190a0b0-c0d0-7000-8000-00000000000" + string('a'+rune(indexOf(t))),
			ProducedAtMs: 1764460800123, RequestID: "req-1", Attempt: 2, Node: "gw-1",
			Scope: "openai:org-1/proj-1", Tenant: "acme", KeyID: "key-42", Route: "chat-default", Class: "interactive"}
	}
	var out []Event
	e := env(TypeReserveRequested)
	e.ReserveRequested = &ReserveRequested{Path: []PathLevel{{"org", "o1"}, {"tenant", "acme"}, {"key", "key-42"}},
		InputTokens: 1200, CachedInputTokens: 100, OutputTokens: 512, SpendMicros: 3400, Streaming: true, Priority: 5,
		MaxWaitMs: 300, DeadlineMs: 30000, MaxAttempts: 3, FallbackAllowed: true, IdempotencyKey: "idem-1", EmergencyAdmitted: false,
		PromptFamily: "pf-3f9a2c", ClientRetryCount: 2}
	out = append(out, e)
	e = env(TypeDecision)
	e.Decision = &Decision{Status: StatusDenied, Reason: "over_limit", LimitPath: "tenant:acme/key:key-42", LimitDimension: DimInputTokens,
		Needed: 1200, Available: 800, RetryAfterMs: 1500, Borrowed: true, GatewayDecision: GDRejectedLocally, FallbackAllowed: true,
		RetryClass: "retryable_capacity", InputPartition: 3, InputOffset: 99, LogTimeMs: 1764460800200, HoldTTLMs: 60000, SendAtMs: 1764460800350}
	out = append(out, e)
	e = env(TypeDispatched)
	e.Dispatched = &Dispatched{Provider: "openai", Deployment: "gpt4o-east", Model: "gpt-4o", QueueMs: 12, Fallback: true}
	out = append(out, e)
	e = env(TypeReconciled)
	e.Reconciled = &Reconciled{InputTokens: 1100, CachedInputTokens: 90, OutputTokens: 300, SpendMicros: 2900, HTTPStatus: 200,
		FirstByteMs: 150, TotalMs: 900, Streaming: true, Partial: true, EstimatedInputTokens: 1200, EstimatedOutputTokens: 512}
	out = append(out, e)
	e = env(TypeProviderRejected)
	e.ProviderRejected = &ProviderRejected{HTTPStatus: 429, Kind: "rate_limited", Limiter: DimRequests, RetryAfterMs: 2000,
		ProviderRequestID: "req_abc", Deployment: "gpt4o-east", Message: "Rate limit reached"}
	out = append(out, e)
	e = env(TypeProviderObserved)
	e.ProviderObserved = &ProviderObserved{Deployment: "gpt4o-east", Observations: []Observation{
		{Dimension: DimRequests, Limit: 500, Remaining: 499, ResetMs: 120}, {Dimension: DimTotalTokens, Limit: 30000, Remaining: 28000, ResetMs: 6000}}}
	out = append(out, e)
	e = env(TypeRetryRequested)
	e.RetryRequested = &RetryRequested{PreviousAttempt: 1, Reason: "retryable_capacity", RetryAfterMs: 2000}
	out = append(out, e)
	e = env(TypeReleased)
	e.Released = &Released{Reason: "client_disconnect", InputTokens: 1200, OutputTokens: 40}
	out = append(out, e)
	e = env(TypeOutcome)
	e.Outcome = &Outcome{Status: "success", HTTPStatus: 200, Attempts: 2, QueueMs: 12, TotalMs: 950, ErrorCode: "",
		GatewayDecision: GDQueuedThenAdmitted, InputTokens: 1100, OutputTokens: 300}
	out = append(out, e)
	e = env(TypeConfigChanged)
	e.ConfigChanged = &ConfigChanged{ConfigVersion: "v7", Source: "admin-api", Actor: "operator:alice", Reason: "incident 42",
		Ledger: []byte(`{"scopes":[]}`), Change: "key.pause tenant=acme key=acme-app", Admission: []byte(`{"version":7}`)}
	out = append(out, e)
	e = env(TypeTick)
	e.Tick = &Tick{Reason: "queue"}
	out = append(out, e)
	e = env(TypeSnapshot)
	e.Snapshot = &Snapshot{Partition: 3, InputOffset: 1000, LogTimeMs: 1764460800999, State: []byte{0, 1, 2, 255}}
	out = append(out, e)
	e = env(TypeHeartbeat)
	e.Heartbeat = &Heartbeat{}
	out = append(out, e)
	e = env(TypeCapacityLearned)
	e.CapacityLearned = &CapacityLearned{Level: "deployment", ID: "gpt4o-east", Dimension: DimTotalTokens, PeriodMs: 60000,
		ConfiguredCapacity: 120000, PreviousCapacity: 120000, LearnedCapacity: 30000, Source: LearnedHeaders, ReportedLimit: 30000,
		InputPartition: 3, InputOffset: 1001, LogTimeMs: 1764460801000}
	out = append(out, e)
	e = env(TypeLeaseRequested)
	e.LeaseRequested = &LeaseRequested{Budget: "tenant-acme-daily", Holder: "openai:org-1/proj-1", WindowStartMs: 1764460800000,
		Seq: 7, Granted: 5000, Returned: 1000, Used: 3900, Demand: 2500, Need: 300}
	out = append(out, e)
	e = env(TypeLeaseGranted)
	e.LeaseGranted = &LeaseGranted{Budget: "tenant-acme-daily", Holder: "openai:org-1/proj-1", WindowStartMs: 1764460800000,
		Seq: 4, AckSeq: 7, Granted: 6500, Amount: 1500, Target: 6400, Available: 90000, TermMs: 2000, WindowEndMs: 1764547200000}
	out = append(out, e)
	e = env(TypeLeaseReturned)
	e.LeaseReturned = &LeaseReturned{Budget: "tenant-acme-daily", Holder: "openai:org-1/proj-1", WindowStartMs: 1764460800000,
		Seq: 8, Granted: 6500, Returned: 2600, Used: 3900, Reason: LeaseTermEnded}
	out = append(out, e)
	return out
}

func indexOf(t Type) int {
	for i, x := range Types {
		if x == t {
			return i
		}
	}
	return -1
}

func TestGoldenCompatibility(t *testing.T) {
	want := goldenEvents()
	if len(want) != len(Types) {
		t.Fatalf("golden events cover %d types, schema has %d: add the new type to goldenEvents", len(want), len(Types))
	}
	path := filepath.Join("testdata", "v1.jsonl")
	if *update {
		var buf bytes.Buffer
		for i := range want {
			b, err := Encode(&want[i])
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(b)
			buf.WriteByte('\n')
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) != len(want) {
		t.Fatalf("golden file has %d events, want %d", len(lines), len(want))
	}
	for i, line := range lines {
		var got Event
		if err := Decode(line, &got); err != nil {
			t.Fatalf("golden %d (%s): %v", i, want[i].Type, err)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("golden %d (%s): decoded %+v\nwant %+v\n(a field changed name, type or meaning: add a new field instead)", i, want[i].Type, got, want[i])
		}
		re, err := Encode(&got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(re, line) {
			t.Errorf("golden %d (%s): re-encoding differs:\n got %s\nwant %s", i, want[i].Type, re, line)
		}
	}
}

func TestDecodeSkipsUnknownFields(t *testing.T) {
	in := []byte(`{"v":2,"type":"Tick","id":"x","produced_at_ms":5,"future_field":{"a":[1,2]},"tick":{"reason":"q","new":true}}`)
	var e Event
	if err := Decode(in, &e); err != nil {
		t.Fatalf("a newer writer's event must decode: %v", err)
	}
	if e.Tick == nil || e.Tick.Reason != "q" || e.ProducedAtMs != 5 {
		t.Fatalf("decoded %+v", e)
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := []struct{ name, in string }{
		{"not json", `{"v":1,`},
		{"no version", `{"type":"Tick","id":"x","tick":{}}`},
		{"no id", `{"v":1,"type":"Tick","tick":{}}`},
		{"payload mismatch", `{"v":1,"type":"Tick","id":"x","outcome":{}}`},
		{"two payloads", `{"v":1,"type":"Tick","id":"x","tick":{},"outcome":{}}`},
		{"unknown type", `{"v":1,"type":"Nope","id":"x"}`},
		{"wrong field type", `{"v":1,"type":"Tick","id":"x","attempt":"two","tick":{}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e Event
			err := Decode([]byte(c.in), &e)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode(%s) = %v, want ErrInvalid", c.in, err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, e := range goldenEvents() {
		b, _ := json.Marshal(e)
		f.Add(b)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e Event
		if err := Decode(b, &e); err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same event.
		re, err := Encode(&e)
		if err != nil {
			t.Fatalf("decoded event does not encode: %v", err)
		}
		var e2 Event
		if err := Decode(re, &e2); err != nil {
			t.Fatalf("re-encoded event does not decode: %v", err)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	evs := goldenEvents()
	enc := make([][]byte, len(evs))
	for i := range evs {
		enc[i], _ = Encode(&evs[i])
	}
	b.ReportAllocs()
	var e Event
	for i := 0; b.Loop(); i++ {
		if err := Decode(enc[i%len(enc)], &e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	evs := goldenEvents()
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var err error
		buf, err = Append(buf[:0], &evs[i%len(evs)])
		if err != nil {
			b.Fatal(err)
		}
	}
}

// TestDeriveCarriesTheEnvelopeOnly: a derived event has its source's
// envelope, a new id and no payload, so setting the one of its type makes a
// valid event whatever the source carried.
func TestDeriveCarriesTheEnvelopeOnly(t *testing.T) {
	for _, src := range goldenEvents() {
		src := src
		d := src.DeriveWithID("derived-id", TypeReleased, 5)
		d.Released = &Released{Reason: "cancel"}
		if err := d.Validate(); err != nil {
			t.Errorf("derived from %s: %v", src.Type, err)
		}
		if d.ID == src.ID || d.ProducedAtMs != 5 || d.V != Version {
			t.Errorf("derived from %s: id %q, produced_at_ms %d, v %d", src.Type, d.ID, d.ProducedAtMs, d.V)
		}
		want := src
		want.Type, want.ID, want.ProducedAtMs = d.Type, d.ID, d.ProducedAtMs
		want.ReserveRequested, want.Decision, want.Dispatched, want.Reconciled = nil, nil, nil, nil
		want.ProviderRejected, want.ProviderObserved, want.RetryRequested, want.Released = nil, nil, nil, d.Released
		want.Outcome, want.ConfigChanged, want.Tick, want.Snapshot, want.Heartbeat, want.CapacityLearned = nil, nil, nil, nil, nil, nil
		want.LeaseRequested, want.LeaseGranted, want.LeaseReturned = nil, nil, nil
		if !reflect.DeepEqual(*d, want) {
			t.Errorf("derived from %s:\n got  %+v\n want %+v", src.Type, *d, want)
		}
	}
	retry := Event{V: 1, Type: TypeRetryRequested, ID: "x", RequestID: "r", RetryRequested: &RetryRequested{PreviousAttempt: 2}}
	if got := retry.DeriveWithID("derived-id", TypeReleased, 0).Attempt; got != 3 {
		t.Errorf("derived from a RetryRequested without attempt: attempt %d, want 3", got)
	}
}
