-- route_calibration: per route, the evidence for its output estimate and input correction: reconciled attempts, p95 of actual output, mean reserved output, p95 of actual input, estimated ÷ actual input tokens (summed) and the p95 of actual ÷ estimated input (a correction must not go under it).
SELECT route, count() AS n,
    quantileExact(0.95)(output_tokens) AS out_p95,
    avg(est_output_tokens) AS est_out_mean,
    quantileExact(0.95)(input_tokens) AS in_p95,
    sum(est_input_tokens) / sum(input_tokens) AS in_ratio,
    quantileExact(0.95)(input_tokens / greatest(est_input_tokens, 1)) AS in_under_p95
FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND reconciled = 1 AND input_tokens > 0
GROUP BY route
ORDER BY route
