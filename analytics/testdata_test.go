package analytics

import (
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/schemas/eventid"
)

// sampleEvent returns a valid event of type typ with a realistic payload.
func sampleEvent(typ schemas.Type, producedAtMs int64) *schemas.Event {
	e := eventid.New(typ, producedAtMs)
	e.RequestID, e.Attempt, e.Node = "req-"+e.ID[:8], 1, "gw-1"
	e.Scope, e.Tenant, e.KeyID, e.Route, e.Class = "openai:org1:gpt", "acme", "k1", "chat-default", "interactive"
	switch typ {
	case schemas.TypeReserveRequested:
		e.ReserveRequested = &schemas.ReserveRequested{
			Path:        []schemas.PathLevel{{Level: "tenant", ID: "acme"}, {Level: "key", ID: "k1"}},
			InputTokens: 1000, CachedInputTokens: 100, OutputTokens: 256, SpendMicros: 1234, Streaming: true,
			MaxWaitMs: 300, DeadlineMs: 30000, PromptFamily: "pf-1",
		}
	case schemas.TypeDecision:
		e.Decision = &schemas.Decision{
			Status: schemas.StatusDenied, Reason: "capacity", LimitPath: "tenant:acme", LimitDimension: schemas.DimInputTokens,
			Needed: 1000, Available: 10, RetryAfterMs: 1500, GatewayDecision: schemas.GDRejectedLocally,
			RetryClass: "retryable_capacity", Borrowed: true, InputPartition: 2, InputOffset: 7, LogTimeMs: producedAtMs,
			HoldTTLMs: 60000,
		}
	case schemas.TypeDispatched:
		e.Dispatched = &schemas.Dispatched{Provider: "openai", Deployment: "d1", Model: "gpt-4o", QueueMs: 12}
	case schemas.TypeReconciled:
		e.Reconciled = &schemas.Reconciled{
			InputTokens: 900, CachedInputTokens: 50, OutputTokens: 210, SpendMicros: 999, HTTPStatus: 200,
			FirstByteMs: 80, TotalMs: 900, EstimatedInputTokens: 1000, EstimatedOutputTokens: 256,
		}
	case schemas.TypeProviderRejected:
		e.ProviderRejected = &schemas.ProviderRejected{HTTPStatus: 429, Kind: "rate_limited", Limiter: schemas.DimRequests, RetryAfterMs: 2000, Deployment: "d1"}
	case schemas.TypeProviderObserved:
		e.ProviderObserved = &schemas.ProviderObserved{Deployment: "d1", Observations: []schemas.Observation{{Dimension: schemas.DimRequests, Limit: 60, Remaining: 3, ResetMs: 1000}}}
	case schemas.TypeRetryRequested:
		e.RetryRequested = &schemas.RetryRequested{PreviousAttempt: 1, Reason: "retryable_capacity", RetryAfterMs: 2000}
	case schemas.TypeReleased:
		e.Released = &schemas.Released{Reason: "client_disconnect", InputTokens: 5}
	case schemas.TypeOutcome:
		e.Outcome = &schemas.Outcome{
			Status: "success", HTTPStatus: 200, Attempts: 2, QueueMs: 30, TotalMs: 1200,
			GatewayDecision: schemas.GDQueuedThenAdmitted, InputTokens: 900, OutputTokens: 210,
		}
	case schemas.TypeConfigChanged:
		e.ConfigChanged = &schemas.ConfigChanged{ConfigVersion: "v7", Source: "test",
			Ledger: []byte(`{"scopes":[{"name":"openai:org1:gpt","buckets":[{"level":"tenant","id":"acme","dimension":"input_tokens","capacity":90000,"period_ms":60000},{"level":"key","id":"k1","dimension":"requests","capacity":600,"refill":"continuous","period_ms":60000}]}]}`)}
	case schemas.TypeTick:
		e.Tick = &schemas.Tick{Reason: "queue"}
	case schemas.TypeSnapshot:
		e.Snapshot = &schemas.Snapshot{Partition: 1, InputOffset: 10, LogTimeMs: producedAtMs, State: []byte{1, 2, 3}}
	case schemas.TypeHeartbeat:
		e.Heartbeat = &schemas.Heartbeat{}
	case schemas.TypeCapacityLearned:
		e.CapacityLearned = &schemas.CapacityLearned{Level: "deployment", ID: "gpt", Dimension: schemas.DimRequests, PeriodMs: 60000,
			ConfiguredCapacity: 600, PreviousCapacity: 600, LearnedCapacity: 420, Source: schemas.LearnedRefusal}
	case schemas.TypeLeaseRequested:
		e.LeaseRequested = &schemas.LeaseRequested{Budget: "acme-daily", Holder: "openai:org1:gpt", WindowStartMs: producedAtMs,
			Seq: 1, Demand: 100, Need: 10}
	case schemas.TypeLeaseGranted:
		e.LeaseGranted = &schemas.LeaseGranted{Budget: "acme-daily", Holder: "openai:org1:gpt", WindowStartMs: producedAtMs,
			Seq: 1, AckSeq: 1, Granted: 100, Amount: 100, Target: 100, Available: 1000, TermMs: 2000}
	case schemas.TypeLeaseReturned:
		e.LeaseReturned = &schemas.LeaseReturned{Budget: "acme-daily", Holder: "openai:org1:gpt", WindowStartMs: producedAtMs,
			Seq: 2, Granted: 100, Returned: 60, Used: 40, Reason: schemas.LeaseTermEnded}
	}
	return e
}
