-- 001: the raw event table. One row per Sluice event (schemas.Event), plus
-- one row per undecodable Kafka record (type = 'invalid').
--
-- Dedup: the sink may insert the same event more than once (Kafka
-- redelivery after a crash or rebalance). ReplacingMergeTree collapses rows
-- with the same sorting key (type, event_id) within a partition; duplicates
-- always land in the same partition because produced_at is part of the
-- event itself. Merges are eventual: queries that need exact counts use
-- FINAL, argMax(…, inserted_at) per event_id or uniqExact(event_id).
--
-- Must run on ClickHouse 18.16 and on current releases: no TTL, DateTime64,
-- Map, LowCardinality, Nullable, codecs. {db} is replaced by the quoted
-- database name.
CREATE TABLE IF NOT EXISTS {db}.events
(
    event_id               String,
    type                   String,
    v                      UInt16,
    produced_at            DateTime,
    produced_ms            UInt16,
    log_time_ms            UInt64,
    topic                  String,
    partition              UInt32,
    offset                 UInt64,
    request_id             String,
    attempt                Int32,
    node                   String,
    scope                  String,
    tenant                 String,
    key_id                 String,
    route                  String,
    class                  String,
    status                 String,
    reason                 String,
    gateway_decision       String,
    limit_path             String,
    limit_dimension        String,
    retry_class            String,
    retry_after_ms         Int64,
    http_status            Int32,
    provider               String,
    deployment             String,
    model                  String,
    est_input_tokens       Int64,
    est_output_tokens      Int64,
    est_cached_input_tokens Int64,
    est_spend_micros       Int64,
    input_tokens           Int64,
    output_tokens          Int64,
    cached_input_tokens    Int64,
    spend_micros           Int64,
    queue_ms               Int64,
    first_byte_ms          Int64,
    total_ms               Int64,
    attempts               Int32,
    streaming              UInt8,
    borrowed               UInt8,
    payload                String,
    decode_error           String,
    inserted_at            DateTime DEFAULT now()
)
ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMMDD(produced_at)
ORDER BY (type, event_id)
SETTINGS index_granularity = 8192;
