-- estimation_error: (estimate − actual) ÷ actual of reconciled attempts, per dimension (input, output): p50, p95 (quantileExact) and bias (mean), by route, model, tenant, prompt family, context band and streaming.
-- One scan: ARRAY JOIN counts each attempt once under every grouping.
SELECT d.1 AS by, d.2 AS key, count() AS n,
    quantileExact(0.5)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p50,
    quantileExact(0.95)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p95,
    avg(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_bias,
    quantileExact(0.5)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p50,
    quantileExact(0.95)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p95,
    avg(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_bias
FROM {attempts}
ARRAY JOIN [('route', route), ('model', model), ('tenant', tenant), ('prompt_family', prompt_family),
    ('context_band', context_band), ('streaming', if(streaming = 1, 'streaming', 'not_streaming'))] AS d
WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND reconciled = 1 AND input_tokens > 0 AND output_tokens > 0
GROUP BY by, key
ORDER BY by, key
