-- stranded_quota: capacity held by granted attempts above their actual use, per scope, bucket and token dimension: token·ms (exact integer), token·s, % of the bucket's latest capacity over the range, and the attempts this bucket queued or denied in the range (demand turned away while that capacity sat reserved).
SELECT scope, bucket, dimension, bucket_capacity, stranded_token_ms, stranded_token_ms / 1000 AS stranded_token_s,
    100 * stranded_token_ms / (bucket_capacity * ({to} - {from}) * 1000) AS pct_of_capacity, refused
FROM
(
    SELECT scope, bucket, dimension, any(capacity) AS bucket_capacity,
        sum(multiIf(dimension = 'input_tokens', s_in, dimension = 'output_tokens', s_out, s_in + s_out)) AS stranded_token_ms,
        sum(if(endsWith(concat('/', limit_path), concat('/', bucket)), multiIf(dimension = 'input_tokens', r_in, dimension = 'output_tokens', r_out, r_total), 0)) AS refused
    FROM
    (
        SELECT scope, req_path, limit_path, sum(stranded_input_token_ms) AS s_in, sum(stranded_output_token_ms) AS s_out,
            sum((was_queued = 1 OR was_denied = 1) AND limit_dimension = 'input_tokens') AS r_in,
            sum((was_queued = 1 OR was_denied = 1) AND limit_dimension = 'output_tokens') AS r_out,
            sum((was_queued = 1 OR was_denied = 1) AND limit_dimension = 'total_tokens') AS r_total
        FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) GROUP BY scope, req_path, limit_path
    ) AS a
    ALL INNER JOIN
    (
        SELECT scope, bucket, dimension, argMax(capacity, log_time_ms) AS capacity
        FROM {db}.bucket_capacity FINAL
        WHERE dimension IN ('input_tokens', 'output_tokens', 'total_tokens') AND log_time_ms < {to} * 1000
        GROUP BY scope, bucket, dimension
    ) AS c USING scope
    WHERE position(concat('/', req_path, '/'), concat('/', bucket, '/')) > 0
    GROUP BY scope, bucket, dimension
)
ORDER BY scope, bucket, dimension
