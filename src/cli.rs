//! Command line: `spate run`, `spate check`, `spate gen` and `spate probe`. Every flag also reads an
//! environment variable `SPATE_<FLAG>`; flags win over the environment.

use crate::events::Schema;
use crate::tls_files::{ClickHouse, Kafka, Registry, TlsFlags};
use crate::units::{parse_bytes, parse_duration, parse_property, parse_rename};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::time::Duration;

/// spate: Kafka to ClickHouse, at-least-once, committed only up to what
/// ClickHouse acknowledged.
#[derive(Debug, Parser)]
#[command(name = "spate", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once at start; boxing buys nothing
pub enum Command {
    /// Consume topics with a consumer group and insert every message as a
    /// row of a ClickHouse table.
    #[command(args_override_self = true, after_long_help = crate::kafka_help::after_long_help())]
    Run(RunArgs),
    /// Check a configuration without writing anything: connect to the
    /// brokers and every ClickHouse replica, read the table's schema, and
    /// decode a sample of messages per topic (nothing is committed). Exits
    /// non-zero when `run` would fail.
    #[command(args_override_self = true, after_long_help = crate::kafka_help::after_long_help())]
    Check(CheckArgs),
    /// Produce generated demo events (JSON or Avro) into a topic.
    Gen(GenArgs),
    /// GET one admin endpoint of a running spate (/healthz, /readyz) and
    /// exit 0 when it answers 200, 1 otherwise: a health check for images
    /// and hosts without curl (the Dockerfile's HEALTHCHECK, the systemd
    /// unit's readiness wait).
    Probe(ProbeArgs),
}

/// `spate probe`: one plain-HTTP GET, or several until `--wait` runs out.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// URL to GET, http:// only (the admin server of --admin-addr)
    #[arg(
        long,
        env = "SPATE_PROBE_URL",
        default_value = "http://127.0.0.1:9187/healthz"
    )]
    pub url: String,
    /// Timeout of one attempt (connecting, asking, reading the answer)
    #[arg(long, env = "SPATE_PROBE_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Ask again every half second until the answer is 200 or this long
    /// has passed [default: ask once]
    #[arg(long, env = "SPATE_PROBE_WAIT", value_parser = parse_duration)]
    pub wait: Option<Duration>,
}

/// `spate check`: the flags of `spate run`, plus the sample size.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Messages to sample per topic (from the group's committed offsets,
    /// or each partition's start).
    #[arg(long, env = "SPATE_CHECK_SAMPLES", default_value_t = 100)]
    pub samples: usize,
}

/// Compression of insert bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Compression {
    /// LZ4 blocks (ClickHouse's native compression): about a third of the
    /// bytes, for some CPU on both sides.
    Lz4,
    /// Plain RowBinary: the least CPU, for ClickHouse on the same host or a
    /// fast local network.
    None,
}

/// The format of insert bodies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InsertFormat {
    /// Native blocks, column by column: the least work for the server.
    /// Tables that need RowBinaryWithDefaults, or have a type spate does
    /// not transpose (Map), get RowBinary.
    Native,
    /// RowBinary rows, as encoded.
    Rowbinary,
}

/// Delivery guarantee of a pipeline (issue 19; docs/delivery.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Delivery {
    /// Every message at least once; a failure replays what was in flight.
    AtLeastOnce,
    /// Every message exactly once: blocks cut per partition, an intent
    /// recorded before each insert, ClickHouse deduplication drops a
    /// replayed block. Needs a table that deduplicates (checked at start).
    ExactlyOnce,
}

/// The format of the message values (`--format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MessageFormat {
    /// One JSON object per message; keys name columns.
    Json,
    /// Avro in the Confluent wire format (needs --schema-registry).
    Avro,
    /// Protobuf in the Confluent wire format, or with --protobuf-descriptor.
    Protobuf,
    /// The whole value into one String column (--raw-column).
    Raw,
    /// One CSV record (RFC 4180) per message.
    Csv,
}

/// What each message is (`--envelope`; docs/cdc.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Envelope {
    /// A row of the table.
    None,
    /// A Debezium change event (JSON: the envelope, with or without the
    /// schema/payload wrapper, or flattened by ExtractNewRecordState).
    Debezium,
    /// A keyed row: the value is the row, a tombstone deletes its key.
    Upsert,
}

/// What a change stream's delete does (`--on-delete`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnDelete {
    /// Mark the key deleted (the engine's is_deleted, or a `_deleted`
    /// column); refused at start when the table has neither.
    Apply,
    /// Keep deleted rows (counted in spate_messages_skipped_total).
    Skip,
}

/// What a Debezium truncate does (`--on-truncate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnTruncate {
    /// Stop, naming topic, partition and offset.
    Fail,
    /// Go on; the truncated rows stay (counted).
    Skip,
    /// Delete the rows of every change before it, in order with the
    /// inserts (one-partition topics; docs/cdc.md).
    DeleteAll,
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// TOML file with the settings of one or more pipelines (see
    /// docs/operations.md); flags and SPATE_* variables override it.
    #[arg(long, env = "SPATE_CONFIG", value_name = "FILE")]
    pub config: Option<String>,
    /// Print the effective configuration of every pipeline (secrets
    /// masked) and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Kafka bootstrap brokers, HOST:PORT[,HOST:PORT...].
    #[arg(long, env = "SPATE_BROKERS")]
    pub brokers: String,
    /// Topic to consume; repeat the flag for several. A topic beginning
    /// with `^` is a regex: every topic it matches (anywhere in the name,
    /// as librdkafka matches), including ones created while spate runs,
    /// which are picked up within --topic-refresh.
    #[arg(
        long = "topic",
        env = "SPATE_TOPIC",
        required = true,
        value_delimiter = ','
    )]
    pub topics: Vec<String>,
    /// Consumer group id; offsets are committed for this group.
    #[arg(long, env = "SPATE_GROUP")]
    pub group: String,
    /// ClickHouse HTTP interface URL, e.g. http://127.0.0.1:8123: the one
    /// server written to, or with --cluster the node to read the cluster
    /// from.
    #[arg(long, env = "SPATE_CLICKHOUSE_URL", required_unless_present = "shards")]
    pub clickhouse_url: Option<String>,
    /// One shard of a ClickHouse cluster: its replicas' URLs,
    /// comma-separated, tried in order. Repeat per shard (in SPATE_SHARDS
    /// separate shards with `;`). Rows go to each shard's --table directly.
    #[arg(long = "shard", env = "SPATE_SHARDS", value_name = "URL[,URL...]", value_delimiter = ';', conflicts_with_all = ["clickhouse_url", "cluster"])]
    pub shards: Vec<String>,
    /// Relative weights of the --shard flags, one per shard (default: 1
    /// each), like <weight> in remote_servers.
    #[arg(long, env = "SPATE_SHARD_WEIGHTS", value_delimiter = ',')]
    pub shard_weights: Vec<u32>,
    /// Read shards, replicas and weights of this cluster from
    /// system.clusters on --clickhouse-url. Each node's URL is its
    /// host_name with the scheme and port of --clickhouse-url.
    #[arg(long, env = "SPATE_CLUSTER", requires = "clickhouse_url")]
    pub cluster: Option<String>,
    /// Route each row to shard cityHash64(COLUMNS) % total weight, exactly
    /// where a Distributed table with that sharding key puts it. Without
    /// it, batches are spread over the shards by weight.
    #[arg(
        long,
        env = "SPATE_SHARD_KEY",
        value_name = "COLUMN[,COLUMN...]",
        value_delimiter = ','
    )]
    pub shard_key: Vec<String>,
    /// Target table, [DB.]TABLE (database `default` when omitted); with
    /// several shards, the local table on each. Its columns are read from
    /// ClickHouse at start. `{topic}` in it stands for each message's
    /// topic, `{header:NAME}` for its header NAME's value and
    /// `{field:/POINTER}` for a field's, in any --format but raw (these
    /// two need --allow-tables): one table per topic, tenant or type
    /// (docs/routing.md).
    #[arg(long, env = "SPATE_TABLE")]
    pub table: String,
    /// The table of one topic, where --table's template does not give it;
    /// repeat per topic (in SPATE_TABLE_MAP separate them with `,`).
    #[arg(
        long = "table-map",
        env = "SPATE_TABLE_MAP",
        value_name = "TOPIC=DB.TABLE",
        value_delimiter = ','
    )]
    pub table_map: Vec<String>,
    /// Write only tables whose `db.table` name this regex matches as a
    /// whole; a message routed elsewhere is a bad message (--on-error).
    #[arg(long, env = "SPATE_ALLOW_TABLES", value_name = "REGEX")]
    pub allow_tables: Option<String>,
    /// Create a routed table that does not exist as
    /// `CREATE TABLE .. AS DB.TEMPLATE`, on every shard and replica.
    /// Without it, the messages of a missing table are bad messages.
    #[arg(long, env = "SPATE_CREATE_TABLE_LIKE", value_name = "DB.TEMPLATE")]
    pub create_table_like: Option<String>,
    /// How often topic patterns (`--topic ^...`) are matched against the
    /// cluster's topics again; a change starts the pipelines again, drained
    /// and committed, with the new topics.
    #[arg(long, env = "SPATE_TOPIC_REFRESH", value_parser = crate::units::parse_duration, default_value = "10s")]
    pub topic_refresh: std::time::Duration,
    /// ClickHouse user.
    #[arg(long, env = "SPATE_USER")]
    pub user: Option<String>,
    /// ClickHouse password.
    #[arg(long, env = "SPATE_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    // --password-file and --clickhouse-{ca,cert,key}
    #[command(flatten)]
    pub clickhouse_files: TlsFlags<ClickHouse>,
    // --kafka-password-file
    #[command(flatten)]
    pub kafka_files: TlsFlags<Kafka>,
    /// Bounded run: stop each partition at its end (partition EOF), flush,
    /// commit, and exit 0 once everything is acknowledged. A member that
    /// holds no partition for one session timeout (session.timeout.ms,
    /// 45 s by default) after joining its group (more members than
    /// partitions, or its partitions moved to other members) also exits 0.
    #[arg(long, env = "SPATE_UNTIL_END")]
    pub until_end: bool,
    /// Reject messages with keys that are not columns of the table
    /// (default: ignore them).
    #[arg(long, env = "SPATE_STRICT")]
    pub strict: bool,
    /// A column takes its value from a JSON pointer instead of its own
    /// name: `--rename user_id=/user/id` (repeatable; in a config file
    /// `rename = { user_id = "/user/id" }` per pipeline). Objects also map
    /// onto dotted columns (`user.id`) without any rename.
    #[arg(
        long,
        env = "SPATE_RENAME",
        value_name = "COLUMN=/POINTER",
        value_delimiter = ',',
        value_parser = parse_rename
    )]
    pub rename: Vec<(String, String)>,
    // Message formats (issue 18).
    /// Format of the message values.
    #[arg(long, env = "SPATE_FORMAT", value_enum, default_value_t = MessageFormat::Json)]
    pub format: MessageFormat,
    /// What each message is: a row, or a change to apply to the table
    /// (needs a ReplacingMergeTree(ver[, is_deleted]) table; docs/cdc.md).
    #[arg(long, env = "SPATE_ENVELOPE", value_enum, default_value_t = Envelope::None)]
    pub envelope: Envelope,
    /// --envelope: what a delete does [default: apply].
    #[arg(long, env = "SPATE_ON_DELETE", value_enum)]
    pub on_delete: Option<OnDelete>,
    /// --envelope debezium: what a truncate (op "t") does [default: fail].
    #[arg(long, env = "SPATE_ON_TRUNCATE", value_enum)]
    pub on_truncate: Option<OnTruncate>,
    /// --format raw: the String column that takes each whole value.
    #[arg(long, env = "SPATE_RAW_COLUMN", value_name = "COLUMN")]
    pub raw_column: Option<String>,
    /// --format csv: the column of each field, in field order (an empty
    /// name skips its field) [default: the table's columns in table order,
    /// metadata columns left out].
    #[arg(
        long,
        env = "SPATE_CSV_COLUMNS",
        value_name = "COLUMN[,COLUMN...]",
        value_delimiter = ','
    )]
    pub csv_columns: Vec<String>,
    /// --format csv: the field delimiter (one ASCII character).
    #[arg(long, env = "SPATE_CSV_DELIMITER", default_value_t = ',')]
    pub csv_delimiter: char,
    /// Confluent schema registry URL (--format avro/protobuf), e.g.
    /// http://registry:8081; user:password@ in the URL or the next flags
    /// give basic auth.
    #[arg(long, env = "SPATE_SCHEMA_REGISTRY", value_name = "URL")]
    pub schema_registry: Option<String>,
    /// Schema registry basic-auth user.
    #[arg(long, env = "SPATE_SCHEMA_REGISTRY_USER")]
    pub schema_registry_user: Option<String>,
    /// Schema registry basic-auth password.
    #[arg(long, env = "SPATE_SCHEMA_REGISTRY_PASSWORD", hide_env_values = true)]
    pub schema_registry_password: Option<String>,
    // --schema-registry-{password-file,ca,cert,key}
    #[command(flatten)]
    pub registry_files: TlsFlags<Registry>,
    /// --format protobuf without a registry: a serialized FileDescriptorSet
    /// (`protoc --include_imports -o FILE`); messages are plain, not framed.
    #[arg(
        long,
        env = "SPATE_PROTOBUF_DESCRIPTOR",
        value_name = "FILE",
        requires = "protobuf_message"
    )]
    pub protobuf_descriptor: Option<String>,
    /// The message type of --protobuf-descriptor, e.g. `shop.v1.Order`.
    #[arg(
        long,
        env = "SPATE_PROTOBUF_MESSAGE",
        value_name = "NAME",
        requires = "protobuf_descriptor"
    )]
    pub protobuf_message: Option<String>,
    /// Insert a batch when it reaches this many rows [default: from the
    /// observed rate, about one insert per second per shard at high rates,
    /// at most 1000000 rows and within --batch-bytes and the memory budget;
    /// 100000 under --delivery exactly-once].
    #[arg(long, env = "SPATE_BATCH_ROWS")]
    pub batch_rows: Option<u64>,
    /// Insert a batch when it reaches this many bytes (K, M, G suffixes)
    /// [default: 16MiB; without --batch-rows (at least once), the share of
    /// --max-buffered-bytes that keeps inserts overlapping consumption].
    #[arg(long, env = "SPATE_BATCH_BYTES", value_parser = parse_bytes)]
    pub batch_bytes: Option<usize>,
    /// Insert a non-empty batch at the latest this long after its first row
    /// [default: 250ms when inserts are streamed (--insert-request), so a
    /// row waits at most about both; else 1s].
    #[arg(long, env = "SPATE_FLUSH_INTERVAL", value_parser = parse_duration)]
    pub flush_interval: Option<Duration>,
    /// Commit acknowledged offsets this often.
    #[arg(long, env = "SPATE_COMMIT_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub commit_interval: Duration,
    /// Driver threads [default: one per core, each pinned to its core;
    /// unpinned if pinning fails].
    #[arg(long, env = "SPATE_DRIVERS")]
    pub drivers: Option<usize>,
    /// Budget of the whole shutdown: flush, drain the sink, final commit.
    /// What ClickHouse has not acknowledged by then is not committed and
    /// replays after a restart.
    #[arg(long, env = "SPATE_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// Budget of one partition revocation (flush + acknowledgements + commit)
    /// [default: a third of session.timeout.ms, at most 10s]; must be below
    /// session.timeout.ms.
    #[arg(long, env = "SPATE_REVOKE_TIMEOUT", value_parser = parse_duration)]
    pub revoke_timeout: Option<Duration>,
    /// Timeout of one insert attempt (sending, then waiting for the answer);
    /// a timed-out insert is retried with the same rows.
    #[arg(long, env = "SPATE_INSERT_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub insert_timeout: Duration,
    /// Format of insert bodies.
    #[arg(long, env = "SPATE_INSERT_FORMAT", value_enum, default_value_t = InsertFormat::Native)]
    pub insert_format: InsertFormat,
    /// Delivery guarantee: at-least-once, or exactly-once (one partition
    /// per block, an intent record in <db>.spate_intents before each
    /// insert; the table must deduplicate, see docs/delivery.md).
    #[arg(long, env = "SPATE_DELIVERY", value_enum, default_value_t = Delivery::AtLeastOnce)]
    pub delivery: Delivery,
    /// Compression of insert bodies.
    #[arg(long, env = "SPATE_COMPRESSION", value_enum, default_value_t = Compression::Lz4)]
    pub compression: Compression,
    /// Concurrent inserts per shard.
    #[arg(long, env = "SPATE_INSERT_WORKERS", default_value_t = 2)]
    pub insert_workers: usize,
    /// Stream batches into one INSERT request per shard, kept open up to
    /// this long: each batch goes in as one more Native block and the
    /// server makes one part of the request, at a fraction of its CPU per
    /// row for one request per batch (bench/README.md "Streamed inserts").
    /// A batch is acknowledged when its request is confirmed. 0: one
    /// request per batch. At-least-once Native inserts only (exactly-once
    /// and RowBinary insert batch by batch).
    #[arg(long, env = "SPATE_INSERT_REQUEST", default_value = "500ms", value_parser = parse_duration)]
    pub insert_request: Duration,
    /// Insert each batch with the server's asynchronous inserts
    /// (`async_insert=1`, `wait_for_async_insert=1`): the server buffers
    /// the inserts of every client and writes them together, answering
    /// each once its rows are written, so offsets still move only then.
    /// Needs ClickHouse 21.11+; at-least-once only; one request per batch
    /// (no --insert-request); no deduplication of retries. Measured
    /// against streamed requests in bench/README.md.
    #[arg(long, env = "SPATE_ASYNC_INSERT")]
    pub async_insert: bool,
    /// End a streamed request before it passes this many rows (keep it at
    /// or below the server's `min_insert_block_size_rows` default,
    /// 1048576: spate sets that setting to it for its requests).
    #[arg(long, env = "SPATE_INSERT_REQUEST_ROWS", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub insert_request_rows: u64,
    /// Keep a streamed request's batches in memory up to this many bytes
    /// (K, M, G suffixes) until it is confirmed, to send it again whole if
    /// its answer is lost; past it they are released (or, with
    /// --insert-request-release=false, the request ends there) [default:
    /// a quarter of --max-buffered-bytes, split over the shards].
    #[arg(long, env = "SPATE_INSERT_REQUEST_BYTES", value_parser = parse_bytes)]
    pub insert_request_bytes: Option<usize>,
    /// Let a streamed request run past --insert-request-bytes: its
    /// batches are released once sent, and if it fails its partitions
    /// are read again from Kafka from their acknowledged offsets (more
    /// duplicates than a resend, never a gap). Long requests then cost no
    /// memory. `--insert-request-release=false` ends each request at the
    /// byte bound instead and keeps its batches to send it again whole.
    #[arg(long, env = "SPATE_INSERT_REQUEST_RELEASE", default_value_t = true,
          num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub insert_request_release: bool,
    /// Memory budget for batches queued or in flight to ClickHouse; lanes
    /// pause above it and resume below half of it.
    #[arg(long, env = "SPATE_MAX_BUFFERED_BYTES", default_value = "256MiB", value_parser = parse_bytes)]
    pub max_buffered_bytes: usize,
    /// Serve Prometheus /metrics, /healthz and /readyz on this address.
    #[arg(long, env = "SPATE_ADMIN_ADDR")]
    pub admin_addr: Option<SocketAddr>,
    /// Log a one-line summary (rows/s, lag, paused lanes, errors) this
    /// often; 0 turns it off.
    #[arg(long, env = "SPATE_STATS_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub stats_interval: Duration,
    /// How often /readyz probes every ClickHouse replica.
    #[arg(long, env = "SPATE_PROBE_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub probe_interval: Duration,
    /// /healthz reports a pipeline thread whose loop has not turned for
    /// this long; /readyz turns 503 when an insert has retried a transient
    /// error for this long (naming the shard and the error).
    #[arg(long, env = "SPATE_STALL_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub stall_timeout: Duration,
    /// librdkafka property KEY=VALUE, applied after spate's defaults
    /// (repeatable; in SPATE_PROPERTY separate them with `;`).
    #[arg(short = 'X', long = "property", env = "SPATE_PROPERTY", value_name = "KEY=VALUE", value_parser = parse_property, value_delimiter = ';')]
    pub properties: Vec<(String, String)>,
    // --- Bad messages (the error policy; docs/bad-messages.md) ---
    /// What to do with a message that cannot become a row (decode error or
    /// a row the server rejects): fail (exit 1 naming it), skip (count,
    /// log, go on) or dead-letter.
    #[arg(long, env = "SPATE_ON_ERROR", default_value = "fail", value_parser = parse_on_error)]
    pub on_error: spate_core::policy::OnError,
    /// Treat a message without a value (a tombstone) as an error instead of
    /// skipping and counting it.
    #[arg(long, env = "SPATE_TOMBSTONES_ARE_ERRORS")]
    pub tombstones_are_errors: bool,
    /// Under skip/dead-letter: fail when more than this fraction of a
    /// window of --rejected-window messages is rejected (1 turns it off).
    #[arg(long, env = "SPATE_MAX_REJECTED_RATIO", default_value_t = 0.1)]
    pub max_rejected_ratio: f64,
    /// Messages per window of --max-rejected-ratio.
    #[arg(long, env = "SPATE_REJECTED_WINDOW", default_value_t = 1000)]
    pub rejected_window: u64,
    /// Under skip/dead-letter: fail when this many messages in a row are
    /// rejected (0 turns it off).
    #[arg(long, env = "SPATE_MAX_REJECTED_CONSECUTIVE", default_value_t = 100)]
    pub max_rejected_consecutive: u64,
    /// Under --on-error dead-letter: the Kafka topic (on the same brokers)
    /// that receives each rejected message, with its key, value and
    /// timestamp and spate.* headers saying why.
    #[arg(long, env = "SPATE_DEAD_LETTER_TOPIC")]
    pub dead_letter_topic: Option<String>,
    /// Under --on-error dead-letter: the ClickHouse table ([DB.]TABLE, on
    /// the pipeline's first server, created when missing) that receives
    /// each rejected message, one row with why and where it failed.
    #[arg(long, env = "SPATE_DEAD_LETTER_TABLE")]
    pub dead_letter_table: Option<String>,
    /// The server of --dead-letter-table, when not the pipeline's first.
    #[arg(
        long,
        env = "SPATE_DEAD_LETTER_CLICKHOUSE_URL",
        requires = "dead_letter_table"
    )]
    pub dead_letter_clickhouse_url: Option<String>,
    // --- end of bad messages ---
    /// Log format.
    #[arg(long, env = "SPATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level or filter (RUST_LOG syntax); RUST_LOG wins when set.
    #[arg(long, env = "SPATE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// Kafka bootstrap brokers.
    #[arg(long, env = "SPATE_BROKERS")]
    pub brokers: String,
    /// Topic to produce into (created with --partitions if missing).
    #[arg(long, env = "SPATE_TOPIC")]
    pub topic: String,
    /// Number of events.
    #[arg(long, env = "SPATE_GEN_COUNT", default_value_t = 1_000_000)]
    pub count: u64,
    /// Partitions of the topic when spate creates it; events are spread
    /// round-robin over the topic's partitions.
    #[arg(long, env = "SPATE_GEN_PARTITIONS", default_value_t = 4)]
    pub partitions: i32,
    /// Produce at this steady rate (events per second) instead of as fast
    /// as possible: a live source, to measure freshness
    /// (`spate_delivery_latency_seconds`) against. Each event is stamped
    /// when it is sent, and lingers at most 5 ms in the producer (unless
    /// `-X linger.ms` says otherwise).
    #[arg(long, env = "SPATE_GEN_RATE", value_name = "EVENTS_PER_S")]
    pub rate: Option<u32>,
    /// Event schema: `small` (10 fields, ~200 bytes: ts, user_id, event,
    /// country, value, duration_ms, ok, tags, session, page) or `wide` (50
    /// columns, ~1 KB: ts, user_id, c02..c49 of mixed types).
    #[arg(
        long,
        env = "SPATE_GEN_SCHEMA",
        default_value = "small",
        value_parser = PossibleValuesParser::new(Schema::NAMES).try_map(|s| s.parse::<Schema>())
    )]
    pub schema: Schema,
    /// librdkafka producer property KEY=VALUE (repeatable).
    #[arg(short = 'X', long = "property", value_name = "KEY=VALUE", value_parser = parse_property)]
    pub properties: Vec<(String, String)>,
    /// Log level.
    #[arg(long, env = "SPATE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    // Message formats (issue 18).
    /// Format of the events: JSON, or Avro or Protobuf in the Confluent
    /// wire format (the schema is registered under --subject first).
    #[arg(long = "format", env = "SPATE_GEN_FORMAT", value_enum, default_value_t = GenFormat::Json)]
    pub format: GenFormat,
    /// `debezium`: each event as a Debezium change event (a create of the
    /// event, JSON envelope, `source.lsn` = its index), for
    /// `spate run --envelope debezium` (docs/cdc.md).
    #[arg(long = "envelope", env = "SPATE_GEN_ENVELOPE", value_enum, default_value_t = GenEnvelope::None)]
    pub envelope: GenEnvelope,
    /// Schema registry URL (--format avro/protobuf).
    #[arg(long, env = "SPATE_SCHEMA_REGISTRY", value_name = "URL")]
    pub schema_registry: Option<String>,
    /// Schema registry basic-auth user.
    #[arg(long, env = "SPATE_SCHEMA_REGISTRY_USER")]
    pub schema_registry_user: Option<String>,
    /// Schema registry basic-auth password.
    #[arg(long, env = "SPATE_SCHEMA_REGISTRY_PASSWORD", hide_env_values = true)]
    pub schema_registry_password: Option<String>,
    // --schema-registry-{password-file,ca,cert,key}
    #[command(flatten)]
    pub registry_files: TlsFlags<Registry>,
    /// Subject the schema is registered under [default: TOPIC-value, the
    /// Confluent TopicNameStrategy].
    #[arg(long, env = "SPATE_GEN_SUBJECT")]
    pub subject: Option<String>,
}

/// How `spate gen` wraps each event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GenEnvelope {
    /// The event itself.
    None,
    /// A Debezium create of the event.
    Debezium,
}

/// The format `spate gen` writes events in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GenFormat {
    /// JSON objects.
    Json,
    /// Avro, Confluent wire format.
    Avro,
    /// Protobuf, Confluent wire format (the `.proto` registered).
    Protobuf,
}

fn parse_on_error(s: &str) -> Result<spate_core::policy::OnError, String> {
    s.parse()
}

impl RunArgs {
    /// `--flush-interval`, or its default (see the flag).
    #[must_use]
    pub fn flush_interval(&self) -> Duration {
        self.flush_interval
            .unwrap_or(match crate::settings::streams(self) {
                true => Duration::from_millis(250),
                false => Duration::from_secs(1),
            })
    }

    /// The error policy these flags describe.
    #[must_use]
    pub fn error_policy(&self) -> spate_core::policy::ErrorPolicy {
        spate_core::policy::ErrorPolicy {
            on_error: self.on_error,
            tombstones_are_errors: self.tombstones_are_errors,
            limit: spate_core::policy::RejectLimit {
                window: self.rejected_window,
                max_ratio: self.max_rejected_ratio,
                max_consecutive: self.max_rejected_consecutive,
            },
        }
    }
}
