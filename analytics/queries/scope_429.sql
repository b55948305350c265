-- scope_429: provider 429s ÷ upstream attempts per provider scope, for bucket-size recommendations.
SELECT scope, sum(dispatched) AS upstream_attempts, sum(rejected_429) AS provider_429,
    sum(rejected_429) / greatest(sum(dispatched), 1) AS ratio
FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND dispatched = 1
GROUP BY scope
ORDER BY scope
