-- retry_amplification: upstream attempts ÷ logical requests sent upstream at least once, and the estimated tokens of retried upstream attempts (attempt > 1), by provider (the request's, the greatest name if it went to several), tenant and class. Each logical request counts once, whatever its attempts did.
SELECT provider, tenant, class, count() AS requests, sum(upstream) AS upstream_attempts,
    sum(upstream) / count() AS amplification, sum(retried) AS retried_tokens
FROM
(
    SELECT request_id, max(provider) AS provider, any(tenant) AS tenant, any(class) AS class, sum(dispatched) AS upstream,
        sum(if(attempt > 1 AND dispatched = 1, est_input_tokens + est_output_tokens, 0)) AS retried
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
    GROUP BY request_id
    HAVING upstream > 0
)
GROUP BY provider, tenant, class
ORDER BY provider, tenant, class
