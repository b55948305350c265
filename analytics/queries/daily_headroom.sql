-- daily_headroom: per requests_per_day bucket, the busiest day's granted attempts against the capacity (headroom = capacity − busiest day).
SELECT scope, bucket, capacity, max(granted) AS busiest_day, capacity - max(granted) AS headroom
FROM
(
    SELECT scope, bucket, capacity, day, sum(day_granted) AS granted
    FROM
    (
        SELECT replaceRegexpOne(scope, '^([^#]+)#([0-9]|[1-5][0-9]|6[0-3])$', '\\1') AS scope, req_path, toDate(produced_at) AS day, countIf(granted_ms > 0) AS day_granted
        FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) GROUP BY scope, req_path, day
    ) AS a
    ALL INNER JOIN
    (
        SELECT scope, bucket, argMax(capacity, log_time_ms) AS capacity
        FROM {db}.bucket_capacity FINAL WHERE dimension = 'requests_per_day' AND log_time_ms < {to} * 1000
        GROUP BY scope, bucket
    ) AS c USING scope
    WHERE position(concat('/', req_path, '/'), concat('/', bucket, '/')) > 0
    GROUP BY scope, bucket, capacity, day
)
GROUP BY scope, bucket, capacity
ORDER BY scope, bucket
