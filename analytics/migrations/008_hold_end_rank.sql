-- 008: what ended a hold is the same on every run and every engine.
--
-- 005 took hold_end_kind as argMinIf(kind, end time): when two events end
-- a hold in the same millisecond (a ProviderRejected and the next
-- attempt's RetryRequested, a Released and the ledger's hold_expired),
-- argMin keeps whichever state it merged first, which depends on the
-- parts, the threads and the engine (212 of 224k attempts differed
-- between two runs on 18.16 and chDB). s_hold_end is minIf(end time × 8 +
-- rank) instead: the earliest end, and at a tie the lowest rank, a total
-- order. The ranks put the attempt's own settlement first, then the next
-- attempt's retry, then the ledger's expiry: reconciled 1, released 2,
-- late_grant 3, provider_rejected 4, retried 5, hold_expired 6 (the
-- attempts view decodes them; 0 = no end). The oracle
-- (oracle_helpers_integration_test.go endHold) breaks ties the same way.
--
-- The two materialized views of 005 are replaced by the same views with
-- s_hold_end in place of s_hold_end_kind, and the stored events are
-- re-aggregated into the facts (duplicate-insensitive, as in 005). The
-- views still write s_hold_end_kind, as an empty state (condition 0): 18.16
-- wants a view into a table to give every column of it ("Expected column
-- s_hold_end_kind: while pushing to view"); nothing reads it any more.
ALTER TABLE {db}.attempt_facts ADD COLUMN IF NOT EXISTS s_hold_end AggregateFunction(minIf, UInt64, UInt8);

DROP TABLE IF EXISTS {db}.attempt_facts_mv5;

DROP TABLE IF EXISTS {db}.attempt_retry_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.attempt_facts_mv8 TO {db}.attempt_facts AS
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
    maxState(toUInt8(type = 'ReserveRequested')) AS s_reserved,
    maxIfState(est_input_tokens, type = 'ReserveRequested') AS s_est_input_tokens,
    maxIfState(est_output_tokens, type = 'ReserveRequested') AS s_est_output_tokens,
    maxIfState(est_cached_input_tokens, type = 'ReserveRequested') AS s_est_cached_tokens,
    maxIfState(input_tokens, type = 'Reconciled') AS s_input_tokens,
    maxIfState(output_tokens, type = 'Reconciled') AS s_output_tokens,
    maxIfState(cached_input_tokens, type = 'Reconciled') AS s_cached_tokens,
    maxIfState(input_tokens, type IN ('Reconciled', 'Released')) AS s_used_input_tokens,
    maxIfState(output_tokens, type IN ('Reconciled', 'Released')) AS s_used_output_tokens,
    minIfState(log_time_ms, type = 'ReserveRequested') AS s_requested_ms,
    minIfState(if(type = 'Decision' AND visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms),
        type = 'Decision' AND status = 'granted') AS s_granted_ms,
    minIfState(log_time_ms, type = 'Dispatched') AS s_dispatched_ms,
    minIfState(if(type = 'Decision' AND visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms),
        type IN ('Reconciled', 'Released', 'ProviderRejected') OR (type = 'Decision' AND status IN ('expired', 'hold_expired', 'released', 'reconciled'))) AS s_hold_end_ms,
    minIfState(if(type = 'Decision' AND visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms) * 8 + multiIf(type = 'Reconciled', 1, type = 'Released' AND reason = 'late_grant', 3, type = 'Released', 2,
            type = 'ProviderRejected', 4, 6),
        type IN ('Reconciled', 'Released', 'ProviderRejected') OR (type = 'Decision' AND status IN ('expired', 'hold_expired', 'released', 'reconciled'))) AS s_hold_end,
    argMinIfState('', toUInt64(0), toUInt8(0)) AS s_hold_end_kind,
    maxState(toUInt8(type = 'Reconciled')) AS s_reconciled,
    maxState(toUInt8(type = 'Dispatched')) AS s_dispatched,
    maxState(toUInt8(type = 'ProviderRejected' AND http_status = 429)) AS s_rejected_429,
    maxState(borrowed) AS s_borrowed,
    maxState(toUInt8(type = 'Decision' AND status = 'queued')) AS s_was_queued,
    maxState(toUInt8(type = 'Decision' AND status = 'denied')) AS s_was_denied,
    argMaxIfState(limit_dimension, log_time_ms, type = 'ProviderRejected') AS s_provider_limiter,
    argMaxIfState(status, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision') AS s_decision_status,
    argMaxIfState(gateway_decision, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision') AS s_gateway_decision,
    argMaxIfState(limit_path, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision' AND limit_path != '') AS s_limit_path,
    argMaxIfState(limit_dimension, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision' AND limit_dimension != '') AS s_limit_dimension,
    minState(produced_at) AS s_produced_at
FROM {db}.events
WHERE request_id != '' AND attempt > 0 AND type IN ('ReserveRequested', 'Decision', 'Dispatched', 'Reconciled', 'ProviderRejected', 'Released')
GROUP BY request_id, attempt;

CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.attempt_retry_mv8 TO {db}.attempt_facts AS
SELECT
    request_id,
    toInt32(visitParamExtractInt(payload, 'previous_attempt')) AS attempt,
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
    maxState(toUInt8(type = 'ReserveRequested')) AS s_reserved,
    maxIfState(est_input_tokens, type = 'ReserveRequested') AS s_est_input_tokens,
    maxIfState(est_output_tokens, type = 'ReserveRequested') AS s_est_output_tokens,
    maxIfState(est_cached_input_tokens, type = 'ReserveRequested') AS s_est_cached_tokens,
    maxIfState(input_tokens, type = 'Reconciled') AS s_input_tokens,
    maxIfState(output_tokens, type = 'Reconciled') AS s_output_tokens,
    maxIfState(cached_input_tokens, type = 'Reconciled') AS s_cached_tokens,
    maxIfState(input_tokens, type IN ('Reconciled', 'Released')) AS s_used_input_tokens,
    maxIfState(output_tokens, type IN ('Reconciled', 'Released')) AS s_used_output_tokens,
    minIfState(log_time_ms, type = 'ReserveRequested') AS s_requested_ms,
    minIfState(if(type = 'Decision' AND visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms),
        type = 'Decision' AND status = 'granted') AS s_granted_ms,
    minIfState(log_time_ms, type = 'Dispatched') AS s_dispatched_ms,
    minIfState(log_time_ms, type = 'RetryRequested') AS s_hold_end_ms,
    minIfState(log_time_ms * 8 + 5, type = 'RetryRequested') AS s_hold_end,
    argMinIfState('', toUInt64(0), toUInt8(0)) AS s_hold_end_kind,
    maxState(toUInt8(type = 'Reconciled')) AS s_reconciled,
    maxState(toUInt8(type = 'Dispatched')) AS s_dispatched,
    maxState(toUInt8(type = 'ProviderRejected' AND http_status = 429)) AS s_rejected_429,
    maxState(borrowed) AS s_borrowed,
    maxState(toUInt8(type = 'Decision' AND status = 'queued')) AS s_was_queued,
    maxState(toUInt8(type = 'Decision' AND status = 'denied')) AS s_was_denied,
    argMaxIfState(limit_dimension, log_time_ms, type = 'ProviderRejected') AS s_provider_limiter,
    argMaxIfState(status, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision') AS s_decision_status,
    argMaxIfState(gateway_decision, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision') AS s_gateway_decision,
    argMaxIfState(limit_path, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision' AND limit_path != '') AS s_limit_path,
    argMaxIfState(limit_dimension, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision' AND limit_dimension != '') AS s_limit_dimension,
    minState(produced_at) AS s_produced_at
FROM {db}.events
WHERE request_id != '' AND type = 'RetryRequested' AND visitParamExtractInt(payload, 'previous_attempt') > 0
GROUP BY request_id, attempt;

-- Re-aggregate what is already stored (see 005: duplicates are harmless).
-- The GROUP BY spills to disk past 1 GB: over 10M stored events it needed
-- more than the server's 4 GB query limit in memory.
INSERT INTO {db}.attempt_facts (request_id, attempt, s_scope, s_tenant, s_route, s_class, s_req_path, s_prompt_family, s_context_band, s_streaming, s_provider, s_model, s_reserved, s_est_input_tokens, s_est_output_tokens, s_est_cached_tokens, s_input_tokens, s_output_tokens, s_cached_tokens, s_used_input_tokens, s_used_output_tokens, s_requested_ms, s_granted_ms, s_dispatched_ms, s_hold_end_ms, s_hold_end, s_hold_end_kind, s_reconciled, s_dispatched, s_rejected_429, s_borrowed, s_was_queued, s_was_denied, s_provider_limiter, s_decision_status, s_gateway_decision, s_limit_path, s_limit_dimension, s_produced_at)
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
    maxState(toUInt8(type = 'ReserveRequested')) AS s_reserved,
    maxIfState(est_input_tokens, type = 'ReserveRequested') AS s_est_input_tokens,
    maxIfState(est_output_tokens, type = 'ReserveRequested') AS s_est_output_tokens,
    maxIfState(est_cached_input_tokens, type = 'ReserveRequested') AS s_est_cached_tokens,
    maxIfState(input_tokens, type = 'Reconciled') AS s_input_tokens,
    maxIfState(output_tokens, type = 'Reconciled') AS s_output_tokens,
    maxIfState(cached_input_tokens, type = 'Reconciled') AS s_cached_tokens,
    maxIfState(input_tokens, type IN ('Reconciled', 'Released')) AS s_used_input_tokens,
    maxIfState(output_tokens, type IN ('Reconciled', 'Released')) AS s_used_output_tokens,
    minIfState(log_time_ms, type = 'ReserveRequested') AS s_requested_ms,
    minIfState(if(type = 'Decision' AND visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms),
        type = 'Decision' AND status = 'granted') AS s_granted_ms,
    minIfState(log_time_ms, type = 'Dispatched') AS s_dispatched_ms,
    minIfState(if(type = 'Decision' AND visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms),
        type IN ('Reconciled', 'Released', 'ProviderRejected') OR (type = 'Decision' AND status IN ('expired', 'hold_expired', 'released', 'reconciled'))) AS s_hold_end_ms,
    minIfState(if(type = 'Decision' AND visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms) * 8 + multiIf(type = 'Reconciled', 1, type = 'Released' AND reason = 'late_grant', 3, type = 'Released', 2,
            type = 'ProviderRejected', 4, 6),
        type IN ('Reconciled', 'Released', 'ProviderRejected') OR (type = 'Decision' AND status IN ('expired', 'hold_expired', 'released', 'reconciled'))) AS s_hold_end,
    argMinIfState('', toUInt64(0), toUInt8(0)) AS s_hold_end_kind,
    maxState(toUInt8(type = 'Reconciled')) AS s_reconciled,
    maxState(toUInt8(type = 'Dispatched')) AS s_dispatched,
    maxState(toUInt8(type = 'ProviderRejected' AND http_status = 429)) AS s_rejected_429,
    maxState(borrowed) AS s_borrowed,
    maxState(toUInt8(type = 'Decision' AND status = 'queued')) AS s_was_queued,
    maxState(toUInt8(type = 'Decision' AND status = 'denied')) AS s_was_denied,
    argMaxIfState(limit_dimension, log_time_ms, type = 'ProviderRejected') AS s_provider_limiter,
    argMaxIfState(status, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision') AS s_decision_status,
    argMaxIfState(gateway_decision, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision') AS s_gateway_decision,
    argMaxIfState(limit_path, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision' AND limit_path != '') AS s_limit_path,
    argMaxIfState(limit_dimension, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision' AND limit_dimension != '') AS s_limit_dimension,
    minState(produced_at) AS s_produced_at
FROM {db}.events
WHERE request_id != '' AND attempt > 0 AND type IN ('ReserveRequested', 'Decision', 'Dispatched', 'Reconciled', 'ProviderRejected', 'Released')
GROUP BY request_id, attempt
SETTINGS max_bytes_before_external_group_by = 1000000000;

INSERT INTO {db}.attempt_facts (request_id, attempt, s_scope, s_tenant, s_route, s_class, s_req_path, s_prompt_family, s_context_band, s_streaming, s_provider, s_model, s_reserved, s_est_input_tokens, s_est_output_tokens, s_est_cached_tokens, s_input_tokens, s_output_tokens, s_cached_tokens, s_used_input_tokens, s_used_output_tokens, s_requested_ms, s_granted_ms, s_dispatched_ms, s_hold_end_ms, s_hold_end, s_hold_end_kind, s_reconciled, s_dispatched, s_rejected_429, s_borrowed, s_was_queued, s_was_denied, s_provider_limiter, s_decision_status, s_gateway_decision, s_limit_path, s_limit_dimension, s_produced_at)
SELECT
    request_id,
    toInt32(visitParamExtractInt(payload, 'previous_attempt')) AS attempt,
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
    maxState(toUInt8(type = 'ReserveRequested')) AS s_reserved,
    maxIfState(est_input_tokens, type = 'ReserveRequested') AS s_est_input_tokens,
    maxIfState(est_output_tokens, type = 'ReserveRequested') AS s_est_output_tokens,
    maxIfState(est_cached_input_tokens, type = 'ReserveRequested') AS s_est_cached_tokens,
    maxIfState(input_tokens, type = 'Reconciled') AS s_input_tokens,
    maxIfState(output_tokens, type = 'Reconciled') AS s_output_tokens,
    maxIfState(cached_input_tokens, type = 'Reconciled') AS s_cached_tokens,
    maxIfState(input_tokens, type IN ('Reconciled', 'Released')) AS s_used_input_tokens,
    maxIfState(output_tokens, type IN ('Reconciled', 'Released')) AS s_used_output_tokens,
    minIfState(log_time_ms, type = 'ReserveRequested') AS s_requested_ms,
    minIfState(if(type = 'Decision' AND visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms),
        type = 'Decision' AND status = 'granted') AS s_granted_ms,
    minIfState(log_time_ms, type = 'Dispatched') AS s_dispatched_ms,
    minIfState(log_time_ms, type = 'RetryRequested') AS s_hold_end_ms,
    minIfState(log_time_ms * 8 + 5, type = 'RetryRequested') AS s_hold_end,
    argMinIfState('', toUInt64(0), toUInt8(0)) AS s_hold_end_kind,
    maxState(toUInt8(type = 'Reconciled')) AS s_reconciled,
    maxState(toUInt8(type = 'Dispatched')) AS s_dispatched,
    maxState(toUInt8(type = 'ProviderRejected' AND http_status = 429)) AS s_rejected_429,
    maxState(borrowed) AS s_borrowed,
    maxState(toUInt8(type = 'Decision' AND status = 'queued')) AS s_was_queued,
    maxState(toUInt8(type = 'Decision' AND status = 'denied')) AS s_was_denied,
    argMaxIfState(limit_dimension, log_time_ms, type = 'ProviderRejected') AS s_provider_limiter,
    argMaxIfState(status, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision') AS s_decision_status,
    argMaxIfState(gateway_decision, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision') AS s_gateway_decision,
    argMaxIfState(limit_path, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision' AND limit_path != '') AS s_limit_path,
    argMaxIfState(limit_dimension, if(visitParamExtractUInt(payload, 'log_time_ms') > 0, visitParamExtractUInt(payload, 'log_time_ms'), log_time_ms), type = 'Decision' AND limit_dimension != '') AS s_limit_dimension,
    minState(produced_at) AS s_produced_at
FROM {db}.events
WHERE request_id != '' AND type = 'RetryRequested' AND visitParamExtractInt(payload, 'previous_attempt') > 0
GROUP BY request_id, attempt
SETTINGS max_bytes_before_external_group_by = 1000000000;

DROP TABLE IF EXISTS {db}.attempts;

CREATE VIEW IF NOT EXISTS {db}.attempts AS
SELECT
    request_id,
    attempt,
    scope, tenant, route, class,
    if(reserved = 1, own_req_path, r_req_path) AS req_path,
    if(reserved = 1, own_prompt_family, r_prompt_family) AS prompt_family,
    if(reserved = 1, own_context_band, r_context_band) AS context_band,
    greatest(own_streaming, if(reserved = 1, own_streaming, r_streaming)) AS streaming,
    provider, model,
    if(reserved = 1, own_est_input_tokens, r_est_input_tokens) AS est_input_tokens,
    if(reserved = 1, own_est_output_tokens, r_est_output_tokens) AS est_output_tokens,
    if(reserved = 1, own_est_cached_tokens, r_est_cached_tokens) AS est_cached_tokens,
    input_tokens, output_tokens, cached_tokens, used_input_tokens, used_output_tokens,
    requested_ms, granted_ms, dispatched_ms, hold_end_ms,
    transform(toUInt8(hold_end % 8), [1, 2, 3, 4, 5, 6], ['reconciled', 'released', 'late_grant', 'provider_rejected', 'retried', 'hold_expired'], '') AS hold_end_kind,
    reserved,
    reconciled, dispatched, rejected_429, borrowed, was_queued, was_denied, provider_limiter,
    decision_status, gateway_decision, limit_path, limit_dimension, produced_at,
    if(granted_ms > 0 AND hold_end_ms >= granted_ms, toInt64(hold_end_ms) - toInt64(granted_ms), toInt64(0)) AS hold_ms,
    greatest(est_input_tokens - used_input_tokens, toInt64(0)) * hold_ms AS stranded_input_token_ms,
    greatest(est_output_tokens - used_output_tokens, toInt64(0)) * hold_ms AS stranded_output_token_ms
FROM
(
    SELECT
        request_id,
        attempt,
        maxMerge(f.s_scope) AS scope,
        maxMerge(f.s_tenant) AS tenant,
        maxMerge(f.s_route) AS route,
        maxMerge(f.s_class) AS class,
        maxMerge(f.s_req_path) AS own_req_path,
        maxMerge(f.s_prompt_family) AS own_prompt_family,
        maxMerge(f.s_context_band) AS own_context_band,
        maxMerge(f.s_streaming) AS own_streaming,
        maxMerge(f.s_provider) AS provider,
        maxMerge(f.s_model) AS model,
        maxMerge(f.s_reserved) AS reserved,
        maxIfMerge(f.s_est_input_tokens) AS own_est_input_tokens,
        maxIfMerge(f.s_est_output_tokens) AS own_est_output_tokens,
        maxIfMerge(f.s_est_cached_tokens) AS own_est_cached_tokens,
        maxIfMerge(f.s_input_tokens) AS input_tokens,
        maxIfMerge(f.s_output_tokens) AS output_tokens,
        maxIfMerge(f.s_cached_tokens) AS cached_tokens,
        maxIfMerge(f.s_used_input_tokens) AS used_input_tokens,
        maxIfMerge(f.s_used_output_tokens) AS used_output_tokens,
        minIfMerge(f.s_requested_ms) AS requested_ms,
        minIfMerge(f.s_granted_ms) AS granted_ms,
        minIfMerge(f.s_dispatched_ms) AS dispatched_ms,
        minIfMerge(f.s_hold_end_ms) AS hold_end_ms,
        minIfMerge(f.s_hold_end) AS hold_end,
        maxMerge(f.s_reconciled) AS reconciled,
        maxMerge(f.s_dispatched) AS dispatched,
        maxMerge(f.s_rejected_429) AS rejected_429,
        maxMerge(f.s_borrowed) AS borrowed,
        maxMerge(f.s_was_queued) AS was_queued,
        maxMerge(f.s_was_denied) AS was_denied,
        argMaxIfMerge(f.s_provider_limiter) AS provider_limiter,
        argMaxIfMerge(f.s_decision_status) AS decision_status,
        argMaxIfMerge(f.s_gateway_decision) AS gateway_decision,
        argMaxIfMerge(f.s_limit_path) AS limit_path,
        argMaxIfMerge(f.s_limit_dimension) AS limit_dimension,
        minMerge(f.s_produced_at) AS produced_at
    FROM {db}.attempt_facts AS f
    GROUP BY request_id, attempt
) AS a
ANY LEFT JOIN
(
    SELECT
        request_id,
        argMinMerge(e.s_est_input_tokens) AS r_est_input_tokens,
        argMinMerge(e.s_est_output_tokens) AS r_est_output_tokens,
        argMinMerge(e.s_est_cached_tokens) AS r_est_cached_tokens,
        argMinMerge(e.s_req_path) AS r_req_path,
        argMinMerge(e.s_prompt_family) AS r_prompt_family,
        argMinMerge(e.s_context_band) AS r_context_band,
        argMinMerge(e.s_streaming) AS r_streaming
    FROM {db}.request_estimates AS e
    WHERE request_id IN (SELECT request_id FROM {db}.attempt_facts WHERE attempt > 1)
    GROUP BY request_id
) AS r USING request_id;
