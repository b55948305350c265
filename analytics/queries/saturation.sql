-- saturation: attempts the ledger queued or denied ÷ attempts, and tokens used, by tenant and route.
SELECT tenant, route, count() AS attempts, sum(was_queued = 1 OR was_denied = 1) AS refused,
    sum(was_queued = 1 OR was_denied = 1) / count() AS refused_share, sum(input_tokens + output_tokens) AS tokens_used
FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
GROUP BY tenant, route
ORDER BY tenant, route
