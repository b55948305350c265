-- 002: the columns the calibration queries need, the bucket capacities of
-- every ConfigChanged, per-attempt and per-request facts, and hourly rollups.
--
-- Facts are AggregatingMergeTree tables fed by materialized views on events,
-- and hold only duplicate-insensitive aggregates (min, max, argMax,
-- uniqExact): an event the sink inserts twice (Kafka redelivery) leaves
-- every fact unchanged, so the facts are as exact as `events FINAL`. Read
-- them with the -Merge functions grouped by their sorting key (README.md).
--
-- The hourly rollup counts inserted rows (countState, sumState): a
-- redelivered event is counted again. It feeds dashboards and trends, never
-- a figure the report calls exact.
--
-- ADD COLUMN IF NOT EXISTS does not exist on 18.16: Migrate runs such a
-- statement only when system.columns lacks the column (and strips the
-- IF NOT EXISTS), so the statement stays idempotent on both engines.
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS needed Int64 AFTER retry_after_ms;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS available Int64 AFTER needed;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS hold_ttl_ms Int64 AFTER available;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS max_wait_ms Int64 AFTER hold_ttl_ms;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS deadline_ms Int64 AFTER max_wait_ms;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS req_path String AFTER deadline_ms;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS prompt_family String AFTER req_path;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS context_band String AFTER prompt_family;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS fallback UInt8 AFTER context_band;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS partial UInt8 AFTER fallback;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS config_version String AFTER partial;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS config_source String AFTER config_version;

-- One row per bucket of every ConfigChanged, expanded by the sink from the
-- ledger document (base64 inside the payload, which 18.16 cannot decode).
-- bucket is "level:id", the last element of a Decision's limit_path.
CREATE TABLE IF NOT EXISTS {db}.bucket_capacity
(
    scope          String,
    bucket         String,
    dimension      String,
    capacity       Int64,
    refill         String,
    period_ms      Int64,
    window_ms      Int64,
    config_version String,
    source         String,
    event_id       String,
    log_time_ms    UInt64,
    produced_at    DateTime,
    inserted_at    DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(produced_at)
ORDER BY (scope, bucket, dimension, event_id);

-- One row per attempt (request_id, attempt) once merged.
CREATE TABLE IF NOT EXISTS {db}.attempt_facts
(
    request_id        String,
    attempt           Int32,
    s_scope           AggregateFunction(max, String),
    s_tenant          AggregateFunction(max, String),
    s_route           AggregateFunction(max, String),
    s_class           AggregateFunction(max, String),
    s_req_path        AggregateFunction(max, String),
    s_prompt_family   AggregateFunction(max, String),
    s_context_band    AggregateFunction(max, String),
    s_streaming       AggregateFunction(max, UInt8),
    s_provider        AggregateFunction(max, String),
    s_model           AggregateFunction(max, String),
    s_est_input_tokens AggregateFunction(maxIf, Int64, UInt8),
    s_est_output_tokens AggregateFunction(maxIf, Int64, UInt8),
    s_est_cached_tokens AggregateFunction(maxIf, Int64, UInt8),
    s_input_tokens    AggregateFunction(maxIf, Int64, UInt8),
    s_output_tokens   AggregateFunction(maxIf, Int64, UInt8),
    s_cached_tokens   AggregateFunction(maxIf, Int64, UInt8),
    s_requested_ms    AggregateFunction(minIf, UInt64, UInt8),
    s_granted_ms      AggregateFunction(minIf, UInt64, UInt8),
    s_dispatched_ms   AggregateFunction(minIf, UInt64, UInt8),
    s_hold_end_ms     AggregateFunction(minIf, UInt64, UInt8),
    s_reconciled      AggregateFunction(max, UInt8),
    s_dispatched      AggregateFunction(max, UInt8),
    s_rejected_429    AggregateFunction(max, UInt8),
    s_borrowed        AggregateFunction(max, UInt8),
    s_was_queued      AggregateFunction(max, UInt8),
    s_was_denied      AggregateFunction(max, UInt8),
    s_provider_limiter AggregateFunction(argMaxIf, String, UInt64, UInt8),
    s_decision_status AggregateFunction(argMaxIf, String, UInt64, UInt8),
    s_gateway_decision AggregateFunction(argMaxIf, String, UInt64, UInt8),
    s_limit_path      AggregateFunction(argMaxIf, String, UInt64, UInt8),
    s_limit_dimension AggregateFunction(argMaxIf, String, UInt64, UInt8),
    s_produced_at     AggregateFunction(min, DateTime)
)
ENGINE = AggregatingMergeTree()
ORDER BY (request_id, attempt);

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.attempt_facts_mv TO {db}.attempt_facts AS
SELECT
    request_id,
    attempt,
    maxState(scope) AS s_scope,
    maxState(tenant) AS s_tenant,
    maxState(route) AS s_route,
    maxState(class) AS s_class,
    maxState(req_path) AS s_req_path,
    maxState(prompt_family) AS s_prompt_family,
    maxState(context_band) AS s_context_band,
    maxState(streaming) AS s_streaming,
    maxState(provider) AS s_provider,
    maxState(model) AS s_model,
    maxIfState(est_input_tokens, type = 'ReserveRequested') AS s_est_input_tokens,
    maxIfState(est_output_tokens, type = 'ReserveRequested') AS s_est_output_tokens,
    maxIfState(est_cached_input_tokens, type = 'ReserveRequested') AS s_est_cached_tokens,
    maxIfState(input_tokens, type = 'Reconciled') AS s_input_tokens,
    maxIfState(output_tokens, type = 'Reconciled') AS s_output_tokens,
    maxIfState(cached_input_tokens, type = 'Reconciled') AS s_cached_tokens,
    minIfState(log_time_ms, type = 'ReserveRequested') AS s_requested_ms,
    minIfState(log_time_ms, type = 'Decision' AND status = 'granted') AS s_granted_ms,
    minIfState(log_time_ms, type = 'Dispatched') AS s_dispatched_ms,
    minIfState(log_time_ms, type IN ('Reconciled', 'Released') OR (type = 'Decision' AND status IN ('expired', 'released', 'reconciled'))) AS s_hold_end_ms,
    maxState(toUInt8(type = 'Reconciled')) AS s_reconciled,
    maxState(toUInt8(type = 'Dispatched')) AS s_dispatched,
    maxState(toUInt8(type = 'ProviderRejected' AND http_status = 429)) AS s_rejected_429,
    maxState(borrowed) AS s_borrowed,
    maxState(toUInt8(type = 'Decision' AND status = 'queued')) AS s_was_queued,
    maxState(toUInt8(type = 'Decision' AND status = 'denied')) AS s_was_denied,
    argMaxIfState(limit_dimension, log_time_ms, type = 'ProviderRejected') AS s_provider_limiter,
    argMaxIfState(status, log_time_ms, type = 'Decision') AS s_decision_status,
    argMaxIfState(gateway_decision, log_time_ms, type = 'Decision') AS s_gateway_decision,
    argMaxIfState(limit_path, log_time_ms, type = 'Decision' AND limit_path != '') AS s_limit_path,
    argMaxIfState(limit_dimension, log_time_ms, type = 'Decision' AND limit_dimension != '') AS s_limit_dimension,
    minState(produced_at) AS s_produced_at
FROM {db}.events
WHERE request_id != '' AND attempt > 0 AND type IN ('ReserveRequested', 'Decision', 'Dispatched', 'Reconciled', 'ProviderRejected', 'Released')
GROUP BY request_id, attempt;

-- One row per logical request once merged.
CREATE TABLE IF NOT EXISTS {db}.request_facts
(
    request_id        String,
    s_scope           AggregateFunction(max, String),
    s_tenant          AggregateFunction(max, String),
    s_route           AggregateFunction(max, String),
    s_class           AggregateFunction(max, String),
    s_provider        AggregateFunction(max, String),
    s_received_ms     AggregateFunction(minIf, UInt64, UInt8),
    s_first_dispatch_ms AggregateFunction(minIf, UInt64, UInt8),
    s_attempts_reserved AggregateFunction(uniqExactIf, Int32, UInt8),
    s_attempts_upstream AggregateFunction(uniqExactIf, Int32, UInt8),
    s_outcome_status  AggregateFunction(argMaxIf, String, UInt64, UInt8),
    s_outcome_decision AggregateFunction(argMaxIf, String, UInt64, UInt8),
    s_outcome_error   AggregateFunction(argMaxIf, String, UInt64, UInt8),
    s_outcome_total_ms AggregateFunction(maxIf, Int64, UInt8),
    s_deadline_ms     AggregateFunction(maxIf, Int64, UInt8),
    s_produced_at     AggregateFunction(min, DateTime)
)
ENGINE = AggregatingMergeTree()
ORDER BY request_id;

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.request_facts_mv TO {db}.request_facts AS
SELECT
    request_id,
    maxState(scope) AS s_scope,
    maxState(tenant) AS s_tenant,
    maxState(route) AS s_route,
    maxState(class) AS s_class,
    maxState(provider) AS s_provider,
    minIfState(log_time_ms, type = 'ReserveRequested') AS s_received_ms,
    minIfState(log_time_ms, type = 'Dispatched') AS s_first_dispatch_ms,
    uniqExactIfState(attempt, type = 'ReserveRequested') AS s_attempts_reserved,
    uniqExactIfState(attempt, type = 'Dispatched') AS s_attempts_upstream,
    argMaxIfState(status, log_time_ms, type = 'Outcome') AS s_outcome_status,
    argMaxIfState(gateway_decision, log_time_ms, type = 'Outcome') AS s_outcome_decision,
    argMaxIfState(reason, log_time_ms, type = 'Outcome') AS s_outcome_error,
    maxIfState(total_ms, type = 'Outcome') AS s_outcome_total_ms,
    maxIfState(deadline_ms, type = 'ReserveRequested') AS s_deadline_ms,
    minState(produced_at) AS s_produced_at
FROM {db}.events
WHERE request_id != '' AND type IN ('ReserveRequested', 'Dispatched', 'Outcome')
GROUP BY request_id;

-- Hourly rollup by scope × tenant × route × class (at-least-once counts).
CREATE TABLE IF NOT EXISTS {db}.hourly
(
    hour              DateTime,
    scope             String,
    tenant            String,
    route             String,
    class             String,
    n_reserves          AggregateFunction(countIf, UInt8),
    n_dispatched        AggregateFunction(countIf, UInt8),
    n_granted           AggregateFunction(countIf, UInt8),
    n_queued            AggregateFunction(countIf, UInt8),
    n_denied            AggregateFunction(countIf, UInt8),
    n_expired           AggregateFunction(countIf, UInt8),
    n_borrowed          AggregateFunction(countIf, UInt8),
    n_provider_429      AggregateFunction(countIf, UInt8),
    n_outcomes          AggregateFunction(countIf, UInt8),
    n_outcome_success   AggregateFunction(countIf, UInt8),
    sum_est_input_tokens  AggregateFunction(sumIf, Int64, UInt8),
    sum_est_output_tokens AggregateFunction(sumIf, Int64, UInt8),
    sum_input_tokens      AggregateFunction(sumIf, Int64, UInt8),
    sum_output_tokens     AggregateFunction(sumIf, Int64, UInt8),
    sum_cached_tokens     AggregateFunction(sumIf, Int64, UInt8),
    q_output_error      AggregateFunction(quantilesTDigestIf(0.5, 0.95), Float64, UInt8),
    q_queue_ms          AggregateFunction(quantilesTDigestIf(0.5, 0.95, 0.99), Float64, UInt8)
)
ENGINE = AggregatingMergeTree()
PARTITION BY toYYYYMM(hour)
ORDER BY (hour, scope, tenant, route, class);

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.hourly_mv TO {db}.hourly AS
SELECT
    toStartOfHour(produced_at) AS hour,
    scope,
    tenant,
    route,
    class,
    countIfState(toUInt8(type = 'ReserveRequested')) AS n_reserves,
    countIfState(toUInt8(type = 'Dispatched')) AS n_dispatched,
    countIfState(toUInt8(type = 'Decision' AND status = 'granted')) AS n_granted,
    countIfState(toUInt8(type = 'Decision' AND status = 'queued')) AS n_queued,
    countIfState(toUInt8(type = 'Decision' AND status = 'denied')) AS n_denied,
    countIfState(toUInt8(type = 'Decision' AND status = 'expired')) AS n_expired,
    countIfState(toUInt8(type = 'Decision' AND status = 'granted' AND borrowed = 1)) AS n_borrowed,
    countIfState(toUInt8(type = 'ProviderRejected' AND http_status = 429)) AS n_provider_429,
    countIfState(toUInt8(type = 'Outcome')) AS n_outcomes,
    countIfState(toUInt8(type = 'Outcome' AND status = 'success')) AS n_outcome_success,
    sumIfState(est_input_tokens, toUInt8(type = 'Reconciled')) AS sum_est_input_tokens,
    sumIfState(est_output_tokens, toUInt8(type = 'Reconciled')) AS sum_est_output_tokens,
    sumIfState(input_tokens, toUInt8(type = 'Reconciled')) AS sum_input_tokens,
    sumIfState(output_tokens, toUInt8(type = 'Reconciled')) AS sum_output_tokens,
    sumIfState(cached_input_tokens, toUInt8(type = 'Reconciled')) AS sum_cached_tokens,
    quantilesTDigestIfState(0.5, 0.95)(toFloat64(est_output_tokens - output_tokens) / greatest(output_tokens, 1), toUInt8(type = 'Reconciled' AND output_tokens > 0)) AS q_output_error,
    quantilesTDigestIfState(0.5, 0.95, 0.99)(toFloat64(queue_ms), toUInt8(type = 'Dispatched')) AS q_queue_ms
FROM {db}.events
WHERE type IN ('ReserveRequested', 'Dispatched', 'Decision', 'ProviderRejected', 'Outcome', 'Reconciled')
GROUP BY hour, scope, tenant, route, class;
