-- deadline_misses: logical requests that timed out or expired in a queue, by class, with the class's deadline.
SELECT class, count() AS requests,
    countIf(outcome_status = 'timeout' OR outcome_decision = 'queued_then_expired') AS misses,
    countIf(outcome_status = 'timeout' OR outcome_decision = 'queued_then_expired') / count() AS miss_ratio,
    max(deadline_ms) AS deadline_ms_max
FROM {requests} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND outcome_status != ''
GROUP BY class
ORDER BY class
