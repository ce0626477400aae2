//! ClickHouse sink for spate.
//!
//! What this crate owns:
//! - [`types`]: ClickHouse type strings → [`ChType`];
//! - [`schema`]: the target table's [`Column`]s and the server's
//!   [`ServerFeatures`];
//! - [`encode`]: [`RowEncoder`], JSON message → one RowBinary row, with no
//!   per-row allocation;
//! - [`envelope`]: change data capture (Debezium, upserts) into
//!   `ReplacingMergeTree` tables;
//! - [`classify`]: the one classification of ClickHouse errors (give up,
//!   retry, fail over);
//! - [`metrics`]: the connector's per-replica series ([`ChMetrics`]), on
//!   the core's registry;
//! - [`client`]: [`ChClient`], connect / describe / insert / ping over HTTP
//!   via the `clickhouse` crate;
//! - [`transport`]: [`Transport`], the connection pool and TLS (rustls,
//!   system roots + `--clickhouse-ca`, client certificates) every client
//!   of a sink shares; [`Secret`], a password that never prints.
//!
//! Threads: a lane (chain) thread owns one `RowEncoder` per table and calls
//! `encode` per message into a batch buffer; insert workers (tokio tasks)
//! share one `ChClient` and call `insert` with finished batches, feeding
//! failures through [`classify()`]. Start-up code calls `connect` and
//! `describe` once;
//! - [`sink`]: [`SinkPool`], shard queues and insert workers with retry,
//!   the drain hook and the readiness probe.

pub mod classify;
pub mod client;
pub mod dead_letter;
pub mod encode;
pub mod envelope;
pub mod formats;
pub mod metrics;
pub(crate) mod rowbinary;
pub mod schema;
pub mod shard_hash;
pub mod sink;
pub mod transport;
pub mod types;

pub use classify::{classify, code_remedy, parse_code, remedy, ErrorClass, Remedy};
pub use client::{ChClient, ChClientOptions, ClientError, InsertError};
pub use dead_letter::ChDeadLetters;
pub use encode::{
    EncoderOptions, NativeLayout, NativeScratch, PathTarget, RowEncoder, RowError, SchemaError,
    TransposeError,
};
pub use envelope::{ChangeEncoder, ChangePlan, EnvelopeKind, EnvelopeSpec, OnDelete, OnTruncate};
pub use formats::{
    CsvOptions, FieldPointer, FieldReader, FormatEncoder, FormatSpec, ProtobufSource,
    RegistryConfig, SchemaRegistry,
};
pub use metrics::ChMetrics;
pub use schema::{Column, DefaultKind, ServerFeatures, VersionError};
pub use sink::{
    change_plan_for, discover, ensure_table, list_tables, Discovery, Presence, ReplicaAnswer,
    ReplicaSchema,
};
pub use sink::{ChRowEncoder, EncoderFactory, Encoders, PreparedSink};
pub use sink::{
    RetryPolicy, SinkError, SinkPool, SinkSpec, StreamBounds, TableRef, Takeover, IN_FLIGHT_COPIES,
};
pub use sink::{ShardSpec, Topology, TopologySource};
pub use transport::{Secret, SharedSecret, TlsError, TlsFiles, TlsFlags, TlsSettings, Transport};
pub use types::{parse_type, ChType, TypeError};
