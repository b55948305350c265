-- 006: what the client retried before the gateway saw it (issue 22 item 5).
-- ReserveRequested carries the SDK's own retry count (X-Stainless-Retry-Count,
-- schemas.ReserveRequested.ClientRetryCount) and the caller's idempotency
-- key; retry_amplification uses them to fold the gateway's request ids into
-- logical requests (README.md, "Logical requests").
--
-- MATERIALIZED columns computed from the payload (the encoded event) by the
-- server: the sink's column list does not change, rows already stored get
-- the values on read, and every engine computes the same. visitParamExtract*
-- finds the payload's first key of that name; only reserve_requested has
-- these keys, and the type check keeps other events at ''/0.
-- Migrate emulates ADD COLUMN IF NOT EXISTS on 18.16 (see 002).
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS idempotency_key String MATERIALIZED if(type = 'ReserveRequested', visitParamExtractString(payload, 'idempotency_key'), '');
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS client_retry_count Int32 MATERIALIZED if(type = 'ReserveRequested', toInt32(visitParamExtractInt(payload, 'client_retry_count')), toInt32(0));
