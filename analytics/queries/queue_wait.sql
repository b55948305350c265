-- queue_wait: first Dispatched − ReserveRequested (log time, ms) of dispatched logical requests, p50/p95/p99 (quantileExact) by class.
SELECT class, count() AS n,
    quantileExact(0.5)(toInt64(first_dispatch_ms) - toInt64(received_ms)) AS p50_ms,
    quantileExact(0.95)(toInt64(first_dispatch_ms) - toInt64(received_ms)) AS p95_ms,
    quantileExact(0.99)(toInt64(first_dispatch_ms) - toInt64(received_ms)) AS p99_ms
FROM {requests} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND received_ms > 0 AND first_dispatch_ms > 0
GROUP BY class
ORDER BY class
