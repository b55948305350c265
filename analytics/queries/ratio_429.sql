-- ratio_429: provider 429s ÷ upstream attempts, by model, tenant, class, and by the limiter the provider named (its share of all upstream attempts).
SELECT by, key, upstream_attempts, provider_429, provider_429 / greatest(upstream_attempts, 1) AS ratio
FROM
(
    SELECT 'model' AS by, model AS key, sum(dispatched) AS upstream_attempts, sum(rejected_429) AS provider_429
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND dispatched = 1 GROUP BY key
    UNION ALL
    SELECT 'tenant' AS by, tenant AS key, sum(dispatched) AS upstream_attempts, sum(rejected_429) AS provider_429
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND dispatched = 1 GROUP BY key
    UNION ALL
    SELECT 'class' AS by, class AS key, sum(dispatched) AS upstream_attempts, sum(rejected_429) AS provider_429
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND dispatched = 1 GROUP BY key
    UNION ALL
    SELECT 'limiter' AS by, provider_limiter AS key,
        ifNull((SELECT sum(dispatched) FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND dispatched = 1), 0) AS upstream_attempts,
        sum(rejected_429) AS provider_429
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND rejected_429 = 1 GROUP BY key
)
ORDER BY by, key
