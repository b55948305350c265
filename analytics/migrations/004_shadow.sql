-- 004: the shadow verdict of a granted Decision (schemas.ShadowVerdict):
-- what the shadow buckets on the request's path (evaluated, never
-- enforced) would have decided. shadow_buckets is how many shadow buckets
-- the grant passed (0: its path has none, the verdict is absent);
-- shadow_limited is 1 when one of them could not cover the grant, and
-- shadow_limit_path / shadow_limit_dimension / shadow_needed /
-- shadow_available name the first such bucket and its figures.
--
-- Read from events directly (the shadow_limits query), not through the
-- attempt facts: a verdict belongs to one decision, not to an attempt.
-- Migrate emulates ADD COLUMN IF NOT EXISTS on 18.16 (see 002).
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS shadow_buckets Int32 AFTER config_source;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS shadow_limited UInt8 AFTER shadow_buckets;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS shadow_reason String AFTER shadow_limited;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS shadow_limit_path String AFTER shadow_reason;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS shadow_limit_dimension String AFTER shadow_limit_path;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS shadow_needed Int64 AFTER shadow_limit_dimension;
ALTER TABLE {db}.events ADD COLUMN IF NOT EXISTS shadow_available Int64 AFTER shadow_needed;
