-- route_calibration: per route, the evidence for its output estimate and input correction: reconciled attempts, p95 of actual output, mean reserved output, p95 of actual input, and estimated ÷ actual input tokens (summed).
SELECT route, count() AS n,
    quantileExact(0.95)(output_tokens) AS out_p95,
    avg(est_output_tokens) AS est_out_mean,
    quantileExact(0.95)(input_tokens) AS in_p95,
    sum(est_input_tokens) / sum(input_tokens) AS in_ratio
FROM {db}.attempts WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND reconciled = 1 AND input_tokens > 0
GROUP BY route
ORDER BY route
