-- retry_amplification: upstream attempts ÷ logical requests, and the estimated tokens of retried upstream attempts (attempt > 1), by provider, tenant and class.
SELECT provider, tenant, class, uniqExact(request_id) AS requests, sum(dispatched) AS upstream_attempts,
    sum(dispatched) / uniqExact(request_id) AS amplification,
    sum(if(attempt > 1 AND dispatched = 1, est_input_tokens + est_output_tokens, 0)) AS retried_tokens
FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
GROUP BY provider, tenant, class
ORDER BY provider, tenant, class
