-- budget_burn: budget burn by provider — per cross-scope budget, window and holder (the provider scope partition that leases it), from the lease messages' cumulative counters at the end of the range: spent (the holder's newest Used, by Seq), granted (the highest cumulative grant), returned, outstanding (granted − returned − spent: leased, not yet spent or given back), the budget's limit and unit (its newest ConfigChanged before the range's end; 0 and '' when no config in the log names it) and spent as % of the limit.
SELECT budget, unit, window_start_ms, holder, splitByChar(':', holder)[1] AS provider,
    budget_limit, spent, granted, returned,
    greatest(granted - returned - spent, toInt64(0)) AS outstanding,
    if(budget_limit > 0, 100 * spent / budget_limit, 0.) AS pct_of_limit,
    lease_messages
FROM
(
    SELECT budget, window_start_ms, holder,
        argMaxIf(used, seq, type != 'LeaseGranted') AS spent,
        argMaxIf(returned_, seq, type != 'LeaseGranted') AS returned,
        max(granted_) AS granted,
        uniqExact(event_id) AS lease_messages
    FROM
    (
        -- The lease payloads are flat and the envelope has none of these
        -- keys, so visitParamExtract* reads the lease's own fields.
        SELECT type, event_id,
            visitParamExtractString(payload, 'budget') AS budget,
            visitParamExtractString(payload, 'holder') AS holder,
            visitParamExtractInt(payload, 'window_start_ms') AS window_start_ms,
            visitParamExtractInt(payload, 'seq') AS seq,
            visitParamExtractInt(payload, 'granted') AS granted_,
            visitParamExtractInt(payload, 'returned') AS returned_,
            visitParamExtractInt(payload, 'used') AS used
        FROM {db}.events
        WHERE type IN ('LeaseRequested', 'LeaseGranted', 'LeaseReturned')
            AND produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
    )
    WHERE budget != ''
    GROUP BY budget, window_start_ms, holder
) AS l
ANY LEFT JOIN
(
    SELECT visitParamExtractString(line, 'id') AS budget,
        argMax(visitParamExtractString(line, 'unit'), log_time_ms) AS unit,
        argMax(visitParamExtractInt(line, 'limit'), log_time_ms) AS budget_limit
    FROM
    (
        SELECT arrayJoin(splitByChar('\n', budgets)) AS line, log_time_ms
        FROM {db}.events
        WHERE type = 'ConfigChanged' AND budgets != '' AND produced_at < toDateTime({to})
    )
    GROUP BY budget
) AS c USING budget
ORDER BY budget, window_start_ms, holder
