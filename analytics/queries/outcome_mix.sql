-- outcome_mix: final status of logical requests (success, cancelled, timeout, failure) and its share.
SELECT outcome_status AS status, count() AS requests,
    count() / ifNull((SELECT count() FROM {requests} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND outcome_status != ''), 0) AS share
FROM {requests} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND outcome_status != ''
GROUP BY status
ORDER BY status
