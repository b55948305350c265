-- cache_headroom: cached input tokens (not counted against input TPM where the provider excludes them) against all input tokens, by route; est_cached is what was reserved as cached.
SELECT route, sum(input_tokens) AS sum_input_tokens, sum(cached_tokens) AS sum_cached_tokens,
    sum(cached_tokens) / greatest(sum(input_tokens), 1) AS cached_share, sum(est_cached_tokens) AS sum_est_cached_tokens
FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND reconciled = 1
GROUP BY route
ORDER BY route
