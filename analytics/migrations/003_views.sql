-- 003: one row per attempt and per logical request, merged from the facts
-- tables. Every metric query (queries/*.sql) reads these views, filtered by
-- produced_at (the first event's second) over the report's range.
--
-- Times are log times in unix milliseconds (0 = the event did not happen).
-- hold_ms: how long the grant held capacity (grant → reconcile, release or
-- expiry). stranded_*_token_ms: capacity held above actual use,
-- max(0, reserved − used) × hold_ms; an attempt released without usage
-- strands its whole reservation.
CREATE VIEW IF NOT EXISTS {db}.attempts AS
SELECT
    request_id,
    attempt,
    scope, tenant, route, class, req_path, prompt_family, context_band, streaming, provider, model,
    est_input_tokens, est_output_tokens, est_cached_tokens, input_tokens, output_tokens, cached_tokens,
    requested_ms, granted_ms, dispatched_ms, hold_end_ms,
    reconciled, dispatched, rejected_429, borrowed, was_queued, was_denied, provider_limiter,
    decision_status, gateway_decision, limit_path, limit_dimension, produced_at,
    if(granted_ms > 0 AND hold_end_ms >= granted_ms, toInt64(hold_end_ms) - toInt64(granted_ms), toInt64(0)) AS hold_ms,
    greatest(est_input_tokens - input_tokens, toInt64(0)) * hold_ms AS stranded_input_token_ms,
    greatest(est_output_tokens - output_tokens, toInt64(0)) * hold_ms AS stranded_output_token_ms
FROM
(
    SELECT
        request_id,
        attempt,
        maxMerge(f.s_scope) AS scope,
        maxMerge(f.s_tenant) AS tenant,
        maxMerge(f.s_route) AS route,
        maxMerge(f.s_class) AS class,
        maxMerge(f.s_req_path) AS req_path,
        maxMerge(f.s_prompt_family) AS prompt_family,
        maxMerge(f.s_context_band) AS context_band,
        maxMerge(f.s_streaming) AS streaming,
        maxMerge(f.s_provider) AS provider,
        maxMerge(f.s_model) AS model,
        maxIfMerge(f.s_est_input_tokens) AS est_input_tokens,
        maxIfMerge(f.s_est_output_tokens) AS est_output_tokens,
        maxIfMerge(f.s_est_cached_tokens) AS est_cached_tokens,
        maxIfMerge(f.s_input_tokens) AS input_tokens,
        maxIfMerge(f.s_output_tokens) AS output_tokens,
        maxIfMerge(f.s_cached_tokens) AS cached_tokens,
        minIfMerge(f.s_requested_ms) AS requested_ms,
        minIfMerge(f.s_granted_ms) AS granted_ms,
        minIfMerge(f.s_dispatched_ms) AS dispatched_ms,
        minIfMerge(f.s_hold_end_ms) AS hold_end_ms,
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
);

CREATE VIEW IF NOT EXISTS {db}.requests AS
SELECT
    request_id,
    maxMerge(f.s_scope) AS scope,
    maxMerge(f.s_tenant) AS tenant,
    maxMerge(f.s_route) AS route,
    maxMerge(f.s_class) AS class,
    maxMerge(f.s_provider) AS provider,
    minIfMerge(f.s_received_ms) AS received_ms,
    minIfMerge(f.s_first_dispatch_ms) AS first_dispatch_ms,
    uniqExactIfMerge(f.s_attempts_reserved) AS attempts_reserved,
    uniqExactIfMerge(f.s_attempts_upstream) AS attempts_upstream,
    argMaxIfMerge(f.s_outcome_status) AS outcome_status,
    argMaxIfMerge(f.s_outcome_decision) AS outcome_decision,
    argMaxIfMerge(f.s_outcome_error) AS outcome_error,
    maxIfMerge(f.s_outcome_total_ms) AS outcome_total_ms,
    maxIfMerge(f.s_deadline_ms) AS deadline_ms,
    minMerge(f.s_produced_at) AS produced_at
FROM {db}.request_facts AS f
GROUP BY request_id;
