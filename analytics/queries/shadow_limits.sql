-- shadow_limits: grants that carried a shadow verdict (limits evaluated, never enforced), by scope, tenant, class and the shadow bucket that would have refused them (limit_path and dimension; empty: the grants every shadow bucket covered): grants in the row, grants of the scope, tenant and class the shadow limits evaluated, the grants enforcing them would have queued or denied and their share of the evaluated, and p50/p95 (quantileExact) of the shortfall needed − available.
SELECT scope, tenant, class, limit_path, dimension, grants, evaluated, would_refuse,
    would_refuse / evaluated AS refuse_share, shortfall_p50, shortfall_p95
FROM
(
    SELECT scope, tenant, class, limit_path, dimension, count() AS grants, sum(limited) AS would_refuse,
        quantileExact(0.5)(if(limited = 1, needed - available, 0)) AS shortfall_p50,
        quantileExact(0.95)(if(limited = 1, needed - available, 0)) AS shortfall_p95
    FROM
    (
        SELECT event_id, any(replaceRegexpOne(scope, '^([^#]+)#([0-9]|[1-5][0-9]|6[0-3])$', '\\1')) AS scope, any(tenant) AS tenant, any(class) AS class,
            any(shadow_limit_path) AS limit_path, any(shadow_limit_dimension) AS dimension, any(shadow_limited) AS limited,
            any(shadow_needed) AS needed, any(shadow_available) AS available
        FROM {db}.events
        WHERE type = 'Decision' AND status = 'granted' AND shadow_buckets > 0
            AND produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
        GROUP BY event_id
    )
    GROUP BY scope, tenant, class, limit_path, dimension
) AS s
ALL INNER JOIN
(
    SELECT replaceRegexpOne(scope, '^([^#]+)#([0-9]|[1-5][0-9]|6[0-3])$', '\\1') AS scope, tenant, class, uniqExact(event_id) AS evaluated
    FROM {db}.events
    WHERE type = 'Decision' AND status = 'granted' AND shadow_buckets > 0
        AND produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
    GROUP BY scope, tenant, class
) AS c USING (scope, tenant, class)
ORDER BY scope, tenant, class, limit_path, dimension
