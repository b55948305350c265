-- budget_burn: budget burn by provider — per cross-scope budget, window and holder (the provider scope partition that leases it), from the lease messages' cumulative counters at the end of the range: spent (the holder's newest Used, by Seq), granted (the highest cumulative grant), returned, outstanding (granted − returned − spent: leased, not yet spent or given back), the budget's limit and unit (its newest ConfigChanged before the range's end; 0 and '' when no config in the log names it) and spent as % of the limit.
SELECT budget, unit, window_start_ms, holder, splitByChar(':', holder)[1] AS provider,
    budget_limit, spent, granted, returned,
    greatest(granted - returned - spent, toInt64(0)) AS outstanding,
    if(budget_limit > 0, 100 * spent / budget_limit, 0.) AS pct_of_limit,
    lease_messages
FROM
(
    SELECT lease_budget AS budget, lease_window_start_ms AS window_start_ms, lease_holder AS holder,
        argMaxIf(lease_used, lease_seq, type != 'LeaseGranted') AS spent,
        argMaxIf(lease_returned, lease_seq, type != 'LeaseGranted') AS returned,
        max(lease_granted) AS granted,
        uniqExact(event_id) AS lease_messages
    FROM {db}.events
    WHERE type IN ('LeaseRequested', 'LeaseGranted', 'LeaseReturned') AND lease_budget != ''
        AND produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
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
