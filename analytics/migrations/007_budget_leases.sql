-- 007: budgets across providers and their leases (issue 23 item 6), for
-- budget_burn.
--
-- * The lease messages (schemas/lease.go) are on sluice.requests, so the
--   sink already keeps them as events rows; their figures are only in the
--   payload. MATERIALIZED columns computed from it by the server, as in
--   006: the sink's insert does not list them, rows already stored get the
--   values on read, and every engine computes the same. The payload's
--   envelope has none of these keys and each lease payload is flat, so
--   visitParamExtract* reads the lease's own field; the type check keeps
--   other events at ''/0.
-- * A budget's limit is in the ledger document of a ConfigChanged, which
--   travels base64 in the payload; 18.16 has no base64Decode, so the sink
--   writes the document's budgets into the budgets column (one JSON object
--   a line: id, level, subject, unit, limit, window; Row.Budgets). Rows
--   stored before 007 have '' and give no limit.
-- Migrate emulates ADD COLUMN IF NOT EXISTS on 18.16 (see 002).
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS budgets String DEFAULT '';
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS lease_budget String MATERIALIZED if(type IN ('LeaseRequested', 'LeaseGranted', 'LeaseReturned'), visitParamExtractString(payload, 'budget'), '');
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS lease_holder String MATERIALIZED if(type IN ('LeaseRequested', 'LeaseGranted', 'LeaseReturned'), visitParamExtractString(payload, 'holder'), '');
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS lease_window_start_ms Int64 MATERIALIZED if(type IN ('LeaseRequested', 'LeaseGranted', 'LeaseReturned'), visitParamExtractInt(payload, 'window_start_ms'), toInt64(0));
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS lease_seq Int64 MATERIALIZED if(type IN ('LeaseRequested', 'LeaseGranted', 'LeaseReturned'), visitParamExtractInt(payload, 'seq'), toInt64(0));
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS lease_granted Int64 MATERIALIZED if(type IN ('LeaseRequested', 'LeaseGranted', 'LeaseReturned'), visitParamExtractInt(payload, 'granted'), toInt64(0));
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS lease_returned Int64 MATERIALIZED if(type IN ('LeaseRequested', 'LeaseReturned'), visitParamExtractInt(payload, 'returned'), toInt64(0));
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS lease_used Int64 MATERIALIZED if(type IN ('LeaseRequested', 'LeaseReturned'), visitParamExtractInt(payload, 'used'), toInt64(0));
