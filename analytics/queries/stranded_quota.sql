-- stranded_quota: capacity held by granted attempts above their actual use, per scope, bucket and token dimension: token·ms (exact integer), token·s, % of what the bucket holds over the range (its latest capacity × window ÷ period for token and ramp buckets, the capacity for fixed and rolling ones), and the attempts this bucket queued or denied in the range (demand turned away while that capacity sat reserved).
SELECT scope, bucket, dimension, bucket_capacity, bucket_held, stranded_token_ms, stranded_token_ms / 1000 AS stranded_token_s,
    100 * stranded_token_ms / (bucket_held * ({to} - {from}) * 1000) AS pct_of_capacity, refused
FROM
(
    SELECT scope, bucket, dimension, any(latest_capacity) AS bucket_capacity, any(held) AS bucket_held,
        sum(multiIf(dimension = 'input_tokens', s_in, dimension = 'output_tokens', s_out, s_in + s_out)) AS stranded_token_ms,
        sum(if(endsWith(concat('/', limit_path), concat('/', bucket)), multiIf(dimension = 'input_tokens', r_in, dimension = 'output_tokens', r_out, r_total), 0)) AS refused
    FROM
    (
        SELECT replaceRegexpOne(scope, '^([^#]+)#([0-9]|[1-5][0-9]|6[0-3])$', '\\1') AS scope, req_path, limit_path, sum(stranded_input_token_ms) AS s_in, sum(stranded_output_token_ms) AS s_out,
            sum((was_queued = 1 OR was_denied = 1) AND limit_dimension = 'input_tokens') AS r_in,
            sum((was_queued = 1 OR was_denied = 1) AND limit_dimension = 'output_tokens') AS r_out,
            sum((was_queued = 1 OR was_denied = 1) AND limit_dimension = 'total_tokens') AS r_total
        FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) GROUP BY scope, req_path, limit_path
    ) AS a
    ALL INNER JOIN
    (
        SELECT scope, bucket, dimension, argMax(capacity, log_time_ms) AS latest_capacity,
            argMax(if(refill IN ('', 'token', 'ramp'),
                capacity * if(window_ms > 0, window_ms, least(1000, if(period_ms > 0, period_ms, 60000))) / if(period_ms > 0, period_ms, 60000),
                toFloat64(capacity)), log_time_ms) AS held
        FROM {db}.bucket_capacity FINAL
        WHERE dimension IN ('input_tokens', 'output_tokens', 'total_tokens') AND log_time_ms < {to} * 1000
        GROUP BY scope, bucket, dimension
    ) AS c USING scope
    WHERE position(concat('/', req_path, '/'), concat('/', bucket, '/')) > 0
    GROUP BY scope, bucket, dimension
)
ORDER BY scope, bucket, dimension
