-- borrowed: granted attempts that borrowed idle capacity, and their reserved tokens, by class.
SELECT class, countIf(granted_ms > 0) AS n_granted, countIf(granted_ms > 0 AND borrowed = 1) AS n_borrowed,
    countIf(granted_ms > 0 AND borrowed = 1) / greatest(countIf(granted_ms > 0), 1) AS borrowed_share,
    sum(if(granted_ms > 0 AND borrowed = 1, est_input_tokens + est_output_tokens, 0)) AS borrowed_tokens
FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to})
GROUP BY class
ORDER BY class
