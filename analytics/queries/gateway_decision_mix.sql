-- gateway_decision_mix: final gateway_decision of logical requests; admitted_then_provider_rejected is a limiter calibration problem, rejected_locally and rejected_policy are intended protection.
SELECT outcome_decision AS gateway_decision,
    multiIf(outcome_decision = 'admitted_then_provider_rejected', 'calibration_problem',
            outcome_decision IN ('rejected_locally', 'rejected_policy'), 'intended_protection', 'served_or_other') AS meaning,
    count() AS requests
FROM {requests} WHERE produced_at >= toDateTime({from}) AND produced_at < toDateTime({to}) AND outcome_status != ''
GROUP BY gateway_decision, meaning
ORDER BY gateway_decision
