-- acceptance: logical requests dispatched upstream ÷ logical requests received, by tenant and class.
SELECT tenant, class, count() AS received, countIf(first_dispatch_ms > 0) AS dispatched,
    countIf(first_dispatch_ms > 0) / count() AS acceptance_rate
FROM {requests} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND received_ms > 0
GROUP BY tenant, class
ORDER BY tenant, class
