-- estimation_error: (estimate − actual) ÷ actual of reconciled attempts, per dimension (input, output): p50, p95 (quantileExact) and bias (mean), by route, model, tenant, prompt family, context band and streaming.
SELECT by, key, n, in_p50, in_p95, in_bias, out_p50, out_p95, out_bias
FROM
(
    SELECT 'route' AS by, route AS key, count() AS n,
        quantileExact(0.5)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p50,
        quantileExact(0.95)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p95,
        avg(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_bias,
        quantileExact(0.5)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p50,
        quantileExact(0.95)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p95,
        avg(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_bias
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND reconciled = 1 AND input_tokens > 0 AND output_tokens > 0 GROUP BY key
    UNION ALL
    SELECT 'model' AS by, model AS key, count() AS n,
        quantileExact(0.5)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p50,
        quantileExact(0.95)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p95,
        avg(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_bias,
        quantileExact(0.5)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p50,
        quantileExact(0.95)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p95,
        avg(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_bias
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND reconciled = 1 AND input_tokens > 0 AND output_tokens > 0 GROUP BY key
    UNION ALL
    SELECT 'tenant' AS by, tenant AS key, count() AS n,
        quantileExact(0.5)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p50,
        quantileExact(0.95)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p95,
        avg(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_bias,
        quantileExact(0.5)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p50,
        quantileExact(0.95)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p95,
        avg(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_bias
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND reconciled = 1 AND input_tokens > 0 AND output_tokens > 0 GROUP BY key
    UNION ALL
    SELECT 'prompt_family' AS by, prompt_family AS key, count() AS n,
        quantileExact(0.5)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p50,
        quantileExact(0.95)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p95,
        avg(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_bias,
        quantileExact(0.5)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p50,
        quantileExact(0.95)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p95,
        avg(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_bias
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND reconciled = 1 AND input_tokens > 0 AND output_tokens > 0 GROUP BY key
    UNION ALL
    SELECT 'context_band' AS by, context_band AS key, count() AS n,
        quantileExact(0.5)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p50,
        quantileExact(0.95)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p95,
        avg(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_bias,
        quantileExact(0.5)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p50,
        quantileExact(0.95)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p95,
        avg(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_bias
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND reconciled = 1 AND input_tokens > 0 AND output_tokens > 0 GROUP BY key
    UNION ALL
    SELECT 'streaming' AS by, if(streaming = 1, 'streaming', 'not_streaming') AS key, count() AS n,
        quantileExact(0.5)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p50,
        quantileExact(0.95)(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_p95,
        avg(toFloat64(est_input_tokens - input_tokens) / input_tokens) AS in_bias,
        quantileExact(0.5)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p50,
        quantileExact(0.95)(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_p95,
        avg(toFloat64(est_output_tokens - output_tokens) / output_tokens) AS out_bias
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND reconciled = 1 AND input_tokens > 0 AND output_tokens > 0 GROUP BY key
)
ORDER BY by, key
