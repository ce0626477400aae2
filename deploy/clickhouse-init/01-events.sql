-- Run once by the clickhouse/clickhouse-server image on an empty data volume
-- (files in /docker-entrypoint-initdb.d/). The table `spate run` in
-- docker-compose.yml writes to: payload columns, then spate's metadata columns.
CREATE TABLE IF NOT EXISTS default.events
(
    ts          DateTime,
    user_id     UInt64,
    event       LowCardinality(String),
    value       Float64,
    tags        Array(String),
    _topic      String,
    _partition  UInt32,
    _offset     UInt64,
    _timestamp  DateTime
)
ENGINE = MergeTree()
PARTITION BY toYYYYMM(ts)
ORDER BY (ts);
