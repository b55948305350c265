-- retry_amplification: upstream attempts ÷ request ids sent upstream at least once (amplification, the gateway's retries) and ÷ logical requests (attempts_per_logical, every layer's retries), with gateway retries (upstream attempts > 1), SDK retries (later request ids of a logical request with client_retry_count > 0), client duplicates (later request ids with client_retry_count 0, by idempotency key) and the estimated tokens of retried upstream attempts, by provider (the logical request's, the greatest name if several), tenant and class. Logical requests as README.md defines them; each counts once, whatever its layers did.
SELECT provider, tenant, class, sum(reqs) AS requests, count() AS logical_requests, sum(upstream) AS upstream_attempts,
    sum(upstream) / sum(reqs) AS amplification, sum(upstream) / count() AS attempts_per_logical,
    sum(gw) AS gateway_retries, sum(sdk) AS sdk_retries, sum(n) - count() - sum(sdk) AS client_duplicates,
    sum(retried) AS retried_tokens
FROM
(
    -- one row per logical request: its request ids and their attempts
    SELECT if(lg = '', request_id, lg) AS logical, max(provider) AS provider, min(tenant) AS tenant, min(class) AS class,
        countIf(up_n > 0) AS reqs, count() AS n, sum(up_n) AS upstream, sum(gw_n) AS gw,
        toInt64(countIf(o_crc > 0)) - toInt64(argMin(o_crc, o_ms) > 0) AS sdk, sum(retried_n) AS retried
    FROM
    (
        SELECT request_id, max(provider) AS provider, any(tenant) AS tenant, any(class) AS class, sum(dispatched) AS up_n,
            sum(attempt > 1 AND dispatched = 1) AS gw_n,
            sum(if(attempt > 1 AND dispatched = 1, est_input_tokens + est_output_tokens, 0)) AS retried_n
        FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
        GROUP BY request_id
    ) AS per_request
    ANY LEFT JOIN
    (
        -- the request ids that are not a logical request of their own
        -- with retry count 0 (what the join gives a request it does not
        -- find): those with an idempotency key, and the SDK retries
        -- without one, each joined to the first try numbered ri of the
        -- same tenant, key id and route (a lookup into an array kept
        -- beside every request would copy it per request); lg '' = its own
        SELECT rid AS request_id, concat('idem:', o_tenant, ':', key) AS lg, crc AS o_crc, ms AS o_ms
        FROM
        (
            SELECT request_id AS rid, any(tenant) AS o_tenant, any(key_id) AS kid, any(route) AS rt,
                min(toUInt64(produced_at) * 1000 + produced_ms) AS ms, argMin(client_retry_count, attempt) AS crc,
                max(idempotency_key) AS key
            FROM {db}.events
            WHERE type = 'ReserveRequested' AND request_id != '' AND produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
            GROUP BY request_id
        )
        WHERE key != ''
        UNION ALL
        SELECT request_id, if(o_ms <= root_ms + toUInt64(o_crc) * 60000, root, '') AS lg, o_crc, o_ms
        FROM
        (
            SELECT el.1 AS root, el.2 AS root_ms, o_tenant, kid, rt, ri
            FROM
            (
                -- per tenant, key id and route: the requests in time order (a
                -- first try ahead of a retry of the same millisecond, then by
                -- request id); ri numbers each one's latest first try without a
                -- key (0: none yet)
                SELECT o_tenant, kid, rt, arraySort(x -> (x.2, x.3 > 0, x.1), groupArray((rid, ms, crc, key))) AS s,
                    arrayCumSum(arrayMap(x -> toUInt64(x.3 = 0 AND x.4 = ''), s)) AS ris
                FROM
                (
                    SELECT request_id AS rid, any(tenant) AS o_tenant, any(key_id) AS kid, any(route) AS rt,
                        min(toUInt64(produced_at) * 1000 + produced_ms) AS ms, argMin(client_retry_count, attempt) AS crc,
                        max(idempotency_key) AS key
                    FROM {db}.events
                    WHERE type = 'ReserveRequested' AND request_id != '' AND produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
                    GROUP BY request_id
                )
                GROUP BY o_tenant, kid, rt
            )
            ARRAY JOIN s AS el, ris AS ri
            WHERE el.3 = 0 AND el.4 = ''
        ) AS roots
        ALL INNER JOIN
        (
            SELECT el.1 AS request_id, el.2 AS o_ms, el.3 AS o_crc, o_tenant, kid, rt, ri
            FROM
            (
                SELECT o_tenant, kid, rt, arraySort(x -> (x.2, x.3 > 0, x.1), groupArray((rid, ms, crc, key))) AS s,
                    arrayCumSum(arrayMap(x -> toUInt64(x.3 = 0 AND x.4 = ''), s)) AS ris
                FROM
                (
                    SELECT request_id AS rid, any(tenant) AS o_tenant, any(key_id) AS kid, any(route) AS rt,
                        min(toUInt64(produced_at) * 1000 + produced_ms) AS ms, argMin(client_retry_count, attempt) AS crc,
                        max(idempotency_key) AS key
                    FROM {db}.events
                    WHERE type = 'ReserveRequested' AND request_id != '' AND produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
                    GROUP BY request_id
                )
                GROUP BY o_tenant, kid, rt
            )
            ARRAY JOIN s AS el, ris AS ri
            WHERE el.3 > 0 AND el.4 = '' AND ri > 0
        ) AS c USING (o_tenant, kid, rt, ri)
    ) AS c USING request_id
    GROUP BY logical
    HAVING upstream > 0
)
GROUP BY provider, tenant, class
ORDER BY provider, tenant, class
