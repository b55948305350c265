-- scope_429: provider 429s ÷ upstream attempts per provider scope, for bucket-size recommendations, with how the 429s spread over the range: the days and hours that had any, and the share of the busiest hour (a storm the provider had for an hour is not a calibration problem; refusals that persist across the week are).
SELECT deployment AS scope, sum(n) AS upstream_attempts, sum(r) AS provider_429,
    sum(r) / greatest(sum(n), 1) AS ratio,
    uniqExactIf(day, r > 0) AS days_with_429,
    sum(r > 0) AS hours_with_429,
    max(r) / greatest(sum(r), 1) AS peak_hour_share
FROM
(
    SELECT replaceRegexpOne(scope, '^([^#]+)#([0-9]|[1-5][0-9]|6[0-3])$', '\\1') AS deployment, toStartOfHour(produced_at) AS hour, toDate(produced_at) AS day, sum(dispatched) AS n, sum(rejected_429) AS r
    FROM {attempts} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND dispatched = 1
    GROUP BY deployment, hour, day
)
GROUP BY scope
ORDER BY scope
