-- retry_amplification: upstream attempts ÷ request ids sent upstream at least once (amplification, the gateway's retries) and ÷ logical requests (attempts_per_logical, every layer's retries), with gateway retries (upstream attempts > 1), SDK retries (later request ids of a logical request with client_retry_count > 0), client duplicates (later request ids with client_retry_count 0, by idempotency key) and the estimated tokens of retried upstream attempts, by provider (the logical request's, the greatest name if several), tenant and class. Logical requests as README.md defines them; each counts once, whatever its layers did.
SELECT provider, tenant, class, sum(reqs) AS requests, sum(logicals) AS logical_requests, sum(upstream) AS upstream_attempts,
    sum(upstream) / sum(reqs) AS amplification, sum(upstream) / sum(logicals) AS attempts_per_logical,
    sum(gw) AS gateway_retries, sum(sdk) AS sdk_retries, sum(n) - sum(logicals) - sum(sdk) AS client_duplicates,
    sum(retried) AS retried_tokens
FROM
(
    -- one row per logical request of several request ids (lg, from the
    -- join), and one per provider, tenant and class for the request ids
    -- that are a logical request of their own (lg '', nearly all: summed
    -- there rather than grouped one by one); a logical request sent
    -- upstream by none of its request ids counts nowhere
    SELECT lg, max(p_provider) AS provider, min(p_tenant) AS tenant, min(p_class) AS class, if(lg = '', count(), 1) AS logicals,
        countIf(up_n > 0) AS reqs, count() AS n, sum(up_n) AS upstream, sum(gw_n) AS gw,
        if(lg = '', 0, toInt64(countIf(o_crc > 0)) - toInt64(argMin(o_crc, o_ms) > 0)) AS sdk, sum(retried_n) AS retried
    FROM
    (
        SELECT request_id, max(provider) AS p_provider, any(tenant) AS p_tenant, any(class) AS p_class, sum(dispatched) AS up_n,
            sum(attempt > 1 AND dispatched = 1) AS gw_n,
            sum(if(attempt > 1 AND dispatched = 1, est_input_tokens + est_output_tokens, 0)) AS retried_n
        FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
        GROUP BY request_id
    ) AS per_request
    ANY LEFT JOIN
    (
        -- the request ids that are not a logical request of their own
        -- with retry count 0 (what the join gives a request it does not
        -- find): those with an idempotency key (only their request ids
        -- are grouped: the IN set is small), and the SDK retries without
        -- one, each given the first try numbered ri of the same tenant,
        -- key id and route; lg '' = its own
        SELECT r.1 AS request_id, concat('idem:', o_tenant, ':', key) AS lg, r.2 AS o_crc, r.3 AS o_ms
        FROM
        (
            SELECT o_tenant, key, groupArray((rid, crc, ms)) AS rs
            FROM
            (
                SELECT request_id AS rid, any(tenant) AS o_tenant, min(toUInt64(produced_at) * 1000 + produced_ms) AS ms,
                    argMin(client_retry_count, attempt) AS crc, max(idempotency_key) AS key
                FROM {db}.events
                WHERE type = 'ReserveRequested' AND request_id != '' AND produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
                    AND request_id IN
                    (
                        SELECT request_id FROM {db}.events
                        WHERE type = 'ReserveRequested' AND idempotency_key != '' AND produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
                    )
                GROUP BY request_id
            )
            WHERE key != ''
            GROUP BY o_tenant, key
            HAVING count() > 1
        )
        ARRAY JOIN rs AS r
        UNION ALL
        -- one pass over the chains: the requests of a tenant, key id and
        -- route numbered by their latest first try (ri), then grouped by
        -- that number, each group one first try and the retries after it
        -- (a self-join of the numbered requests read them twice). Only
        -- the retries and the first tries that some retry follows reach
        -- that GROUP BY: back counts, from the end, the retries up to the
        -- next first try (arrayCumSumNonNegative resets it there), so a
        -- first try is followed by one when the next element's back > 0.
        SELECT r.1 AS request_id, root AS lg, r.3 AS o_crc, r.2 AS o_ms
        FROM
        (
            SELECT anyIf(el.1, el.3 = 0) AS root, anyIf(el.2, el.3 = 0) AS root_ms, groupArrayIf((el.1, el.2, el.3), el.3 > 0) AS rets,
                arrayFilter(x -> x.2 <= root_ms + toUInt64(x.3) * 60000, rets) AS linked
            FROM
            (
                SELECT o_tenant, kid, rt, s, ris,
                    arrayReverse(arrayCumSumNonNegative(arrayReverse(arrayMap(x -> if(x.4 != '', 0, if(x.3 > 0, 1, if(x.3 = 0, -1000000000, 0))), s)))) AS back,
                    arrayPushBack(arrayPopFront(back), 0) AS next_back
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
            )
            ARRAY JOIN s AS el, ris AS ri, next_back AS nb
            WHERE el.4 = '' AND ri > 0 AND (el.3 > 0 OR (el.3 = 0 AND nb > 0))
            GROUP BY o_tenant, kid, rt, ri
            HAVING notEmpty(linked)
        )
        ARRAY JOIN arrayConcat([(root, toUInt64(0), toInt32(0))], linked) AS r
    ) AS c USING request_id
    WHERE lg != '' OR up_n > 0
    GROUP BY lg, if(lg = '', p_provider, ''), if(lg = '', p_tenant, ''), if(lg = '', p_class, '')
    HAVING upstream > 0
)
GROUP BY provider, tenant, class
ORDER BY provider, tenant, class
