-- stranded_by_owner: whose holds strand quota — per scope, tenant, route and class, the granted attempts, their stranded input and output token·s (reserved above use × hold), and the holds broken out by what ended them: late_grant (released unused, the grant came too late to dispatch), hold_expired (hold_ttl_abandoned, node_lost: the gateway never settled it), retried (the provider refused it: ProviderRejected or the next RetryRequested), and unsettled (no end in the log yet: not counted).
SELECT replaceRegexpOne(scope, '^([^#]+)#([0-9]|[1-5][0-9]|6[0-3])$', '\\1') AS scope, tenant, route, class, count() AS grants,
    sum(stranded_input_token_ms) / 1000 AS stranded_input_token_s,
    sum(stranded_output_token_ms) / 1000 AS stranded_output_token_s,
    sum(stranded_input_token_ms + stranded_output_token_ms) / 1000 AS stranded_token_s,
    sum(hold_end_kind = 'late_grant') AS late_grants,
    sum(if(hold_end_kind = 'late_grant', stranded_input_token_ms + stranded_output_token_ms, 0)) / 1000 AS late_grant_token_s,
    sum(hold_end_kind = 'hold_expired') AS hold_expired,
    sum(if(hold_end_kind = 'hold_expired', stranded_input_token_ms + stranded_output_token_ms, 0)) / 1000 AS hold_expired_token_s,
    sum(hold_end_kind IN ('provider_rejected', 'retried')) AS retried,
    sum(if(hold_end_kind IN ('provider_rejected', 'retried'), stranded_input_token_ms + stranded_output_token_ms, 0)) / 1000 AS retried_token_s,
    sum(hold_end_ms = 0) AS unsettled
FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND granted_ms > 0
GROUP BY scope, tenant, route, class
ORDER BY scope, tenant, route, class
